// Why the node refuses a request no thread's rooms could take (node/refusals.ts): the registry words
// an unknown model or version and a model not ready; the shared-memory registry a region not
// registered (or registered but not yet told to the rooms); the device pool a model no device in
// service holds, or a node with no device in service.
import test from 'ava';
import { refusalOf } from '../../../dist/node/refusals.js';
import { ModelRegistry, ModelState } from '../../../dist/node/model-registry.js';
import { SharedMemoryRegistry } from '../../../dist/node/shared-memory.js';
import { Devices } from '../../../dist/node/devices.js';
import { ModelPolicies } from '../../../dist/node/model-policies.js';
import { Leases } from '../../../dist/shared/leases.js';
import { instanceKey } from '../../../dist/shared/model-spec.js';
import { createRegion, destroyRegion } from '../../../dist/client/shared-memory.js';
import { modelSpec } from '../../helpers/specs.js';

const key = `/stowage_refusals_${process.pid}`;
test.before(() => createRegion(key, 4096));
test.after.always(() => destroyRegion(key));

/** A device handle with what the pool reads to word a refusal; `any`: a stand-in. @returns {any} */
const device = (/** @type {number} */ deviceId, serving = true, holds = true) => ({ deviceId, serving, state: serving ? 'READY' : 'OUT_OF_SERVICE', holds: () => holds });

function sources(/** @type {any[]} */ handles = [device(0)]) {
  const registry = new ModelRegistry(Leases.create(0));
  const sharedMemory = new SharedMemoryRegistry(() => {}, Leases.create(0));
  const devices = new Devices(handles, { mode: 'round_robin', policies: new ModelPolicies([]) });
  registry.set({ name: 'ready', state: ModelState.READY, spec: modelSpec({ name: 'ready' }), instance: instanceKey('ready', 1), reason: '' });
  registry.set({ name: 'broken', state: ModelState.UNAVAILABLE, spec: modelSpec({ name: 'broken' }), reason: 'its ONNX file is not a graph' });
  return { registry, sharedMemory, devices };
}

/** @returns {import('../../../dist/shared/data-plane.js').DataPlaneRequest} */
const request = (model = 'ready', version = '', region = '') => ({
  model, version, id: '', parameters: {}, outputs: [],
  inputs: [{ name: 'x', datatype: 'FP32', shape: [1], bytes: region ? { kind: 'region', region, offset: 0, byteSize: 4 } : { kind: 'inline', data: new Uint8Array(4), owned: true } }],
});

test('the registry words an unknown model, an unknown version and a model not ready', (t) => {
  const s = sources();
  t.like(refusalOf(request('ghost'), s), { code: 'STOWAGE_MODEL_NOT_FOUND' });
  t.regex(refusalOf(request('ghost'), s).message, /unknown model "ghost"/);
  t.regex(refusalOf(request('ready', '7'), s).message, /version "7"/);
  const notReady = refusalOf(request('broken'), s);
  t.regex(notReady.message, /model "broken" is not ready \(state UNAVAILABLE\): its ONNX file is not a graph/);
});

test('a region not registered, or registered and not yet told to the rooms, is NOT_FOUND by its name', (t) => {
  const s = sources();
  t.regex(refusalOf(request('ready', '', 'nowhere'), s).message, /no shared-memory region "nowhere" is registered/);
  s.sharedMemory.register('here', key, 0, 4096);
  t.regex(refusalOf(request('ready', '', 'here'), s).message, /no shared-memory region "here" is registered/, 'no rooms watch yet: not served');
  s.sharedMemory.watch(() => {});
  t.notRegex(refusalOf(request('ready', '', 'here'), s).message, /shared-memory/, 'told: the region is not why');
  s.sharedMemory.unregister('');
});

test('the device pool words a model no device in service holds, and a node with none in service', (t) => {
  const lost = sources([device(0, true, false), device(1, true, false)]);
  t.regex(refusalOf(request(), lost).message, /model "ready" is not ready \(state UNAVAILABLE\): no device in service holds it \(device 0, device 1 could not load it\)/);
  const out = sources([device(0, false), device(1, false)]);
  const err = refusalOf(request(), out);
  t.like(err, { code: 'STOWAGE_DEVICE_UNAVAILABLE' });
  t.regex(err.message, /no device of this node is in service \(device 0: OUT_OF_SERVICE, device 1: OUT_OF_SERVICE\)/);
});
