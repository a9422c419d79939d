// An edge thread's direct path over real MessagePorts standing in for the device actors' ends of
// its doors: which door a request takes when a device lost the model, and what a device taken out
// of service does to the requests pending on its door.
import { MessageChannel } from 'node:worker_threads';
import test from 'ava';
import { DirectPath } from '../../../../dist/actors/edge/direct-path.js';
import { Leases } from '../../../../dist/shared/leases.js';
import { instanceKey } from '../../../../dist/shared/model-spec.js';
import { modelSpec, tensorSpec } from '../../../helpers/specs.js';
import { stowageError } from '../../../helpers/errors.js';

const spec = modelSpec({ name: 'm', inputs: [tensorSpec('x', 'FP32', 'k', [2], -1)], outputs: [tensorSpec('y', 'FP32', 'k', [2], -1)] });
const instance = instanceKey('m', 1);

/**
 * A direct path with a door to each of `devices`, the device ends kept (each records the requests it got).
 * @param {import('ava').ExecutionContext} t
 * @param {number[]} devices
 * @param {number[]} [holders] the route's devices (absent: every device)
 */
function edge(t, devices, holders) {
  const memory = Leases.memory(1);
  const main = new Leases(memory);
  main.open(0, 1);
  const path = new DirectPath({ leases: memory, routing: 'round_robin' }, 0, () => {});
  path.route('m', { model: 'm', spec, instance, slot: 0, tag: 1, ...(holders ? { devices: holders } : {}) });
  /** @type {Map<number, { port: import('node:worker_threads').MessagePort, got: number, closed: boolean }>} */
  const ends = new Map();
  for (const id of devices) {
    const { port1, port2 } = new MessageChannel();
    const end = { port: port1, got: 0, closed: false };
    port1.on('message', (/** @type {{ type: string }[]} */ messages) => { end.got += messages.filter((m) => m.type === 'infer').length; });
    port1.on('close', () => { end.closed = true; });
    ends.set(id, end);
    path.door(id, port2, 10_000);
  }
  t.teardown(() => { for (const e of ends.values()) e.port.close(); });
  return { path, ends };
}

/** @returns {import('../../../../dist/shared/data-plane.js').DataPlaneRequest} */
const request = () => ({ model: 'm', version: '', id: '', inputs: [{ name: 'x', datatype: 'FP32', shape: [2], bytes: { kind: 'inline', data: new Uint8Array(8), owned: true } }], outputs: [], parameters: {} });
const options = (signal = new AbortController().signal) => ({ callDeadlineMs: Infinity, signal, outputs: null, protocol: /** @type {const} */ ('grpc') });
const turn = () => new Promise((resolve) => setTimeout(resolve, 20));

test('a model some device lost goes only to the devices that hold it', async (t) => {
  const { path, ends } = edge(t, [0, 1, 2], [2]);
  for (let i = 0; i < 6; i++) path.infer(request(), options())?.catch(() => {});
  await turn();
  t.deepEqual([0, 1, 2].map((id) => ends.get(id)?.got), [0, 0, 6]);
});

test('a model no device with a door holds goes to the main thread', (t) => {
  const { path } = edge(t, [0, 1], [2]);
  t.is(path.infer(request(), options()), null);
});

test('a device taken out of service: its door closes, and what was pending on it fails UNAVAILABLE saying why', async (t) => {
  const { path, ends } = edge(t, [0]);
  const pending = path.infer(request(), options());
  t.truthy(pending);
  await turn();
  t.is(ends.get(0)?.got, 1);
  path.deviceOut(0, 'it is out of service: CUDA error 700');
  const err = await stowageError(t, /** @type {Promise<unknown>} */ (pending));
  t.is(err.code, 'STOWAGE_DEVICE_UNAVAILABLE');
  t.regex(err.message, /device 0 is unavailable: it is out of service: CUDA error 700/);
  await turn();
  t.true(ends.get(0)?.closed, 'the device\'s end of the door closed');
  t.is(path.infer(request(), options()), null, 'nothing more goes to it');
});

test('a request whose client went before it was handed over is not sent', async (t) => {
  const { path, ends } = edge(t, [0]);
  const abort = new AbortController();
  abort.abort();
  const err = await stowageError(t, /** @type {Promise<unknown>} */ (path.infer(request(), options(abort.signal))));
  t.is(err.code, 'STOWAGE_CANCELLED');
  await turn();
  t.is(ends.get(0)?.got, 0);
});
