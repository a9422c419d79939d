// An edge thread's request path (actors/edge/edge-path.ts) over real MessagePorts standing in for
// the device actors' ends of its doors, with real hook threads of its own: which door a request
// takes when a device lost the model, what a device taken out of service does to the requests
// pending on its door, each request counted in shared memory (shared/request-counters.ts) before
// its answer, a preprocess hook feeding the device through a door of its thread's, and a meta
// model's sub-call to a model without a route here going to the main thread.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { MessageChannel } from 'node:worker_threads';
import test from 'ava';
import { readManifest } from '../../../../dist/bundle/manifest.js';
import { ROOT } from '../../../helpers/server.js';
import { EdgePath } from '../../../../dist/actors/edge/edge-path.js';
import { Leases, SEGMENT_SLOTS } from '../../../../dist/shared/leases.js';
import { Quotas } from '../../../../dist/shared/quotas.js';
import { Backlog } from '../../../../dist/shared/backlog.js';
import { RequestCounters } from '../../../../dist/shared/request-counters.js';
import { instanceKey } from '../../../../dist/shared/model-spec.js';
import { modelSpec, tensorSpec } from '../../../helpers/specs.js';
import { stowageError } from '../../../helpers/errors.js';

const spec = modelSpec({ name: 'm', inputs: [tensorSpec('x', 'FP32', 'k', [2], -1)], outputs: [tensorSpec('y', 'FP32', 'k', [2], -1)] });
const instance = instanceKey('m', 1);

/** @typedef {import('../../../../dist/shared/data-plane.js').Infer} Infer */
/** @type {Infer} */
const noMain = () => Promise.reject(new Error('nothing here goes to the main thread'));

/**
 * An edge's path with a door to each of `devices`, the device ends kept (each records the messages it got).
 * @param {import('ava').ExecutionContext} t
 * @param {number[]} devices
 * @param {number[]} [holders] the route's devices (absent: every device)
 * @param {{ viaMain?: Infer, routes?: import('../../../../dist/shared/channels/edge.js').EdgeRoute[] }} [more]
 */
function edge(t, devices, holders, { viaMain = noMain, routes = [] } = {}) {
  const main = Leases.create(1);
  for (let slot = 0; slot <= routes.length; slot++) main.open(main.take(), 1);
  const counters = RequestCounters.create(1, 3); // the main thread's view: it reads them
  counters.grow();
  const hooks = { threads: 1, timeoutMs: 10_000, importTimeoutMs: 10_000, maxHeapMib: 0 };
  /** @type {string[]} */
  const lastReleases = [];
  const path = new EdgePath({ leases: main.shape, routing: 'round_robin', counters: counters.shape, hooks, regionHolds: Leases.create(1).shape, quotas: Quotas.create({}, {}, 2), levels: { defaultLevel: 2, models: {} } }, 0, viaMain, (of) => lastReleases.push(of));
  t.teardown(() => path.close());
  path.route('m', { model: 'm', spec, instance, slot: 0, tag: 1, ...(holders ? { devices: holders } : {}) });
  for (const route of routes) path.route(route.model, route);
  /** @type {Map<number, { port: import('node:worker_threads').MessagePort, got: number, closed: boolean, ids: number[], messages: any[] }>} */
  const ends = new Map();
  for (const id of devices) {
    const { port1, port2 } = new MessageChannel();
    const end = { port: port1, got: 0, closed: false, ids: /** @type {number[]} */ ([]), messages: /** @type {any[]} */ ([]) };
    port1.on('message', (/** @type {{ type: string, id: number }[]} */ messages) => {
      for (const m of messages) if (m.type === 'infer') end.ids.push(m.id);
      end.messages.push(...messages);
      end.got += messages.filter((m) => m.type === 'infer').length;
    });
    port1.on('close', () => { end.closed = true; });
    ends.set(id, end);
    path.door(id, port2, 100 + id, 10_000, Backlog.create(3));
  }
  t.teardown(() => { for (const e of ends.values()) e.port.close(); });
  return { path, ends, counters, main, lastReleases };
}

/** @returns {import('../../../../dist/shared/data-plane.js').DataPlaneRequest} */
const request = () => ({ model: 'm', version: '', id: '', inputs: [{ name: 'x', datatype: 'FP32', shape: [2], bytes: { kind: 'inline', data: new Uint8Array(8), owned: true } }], outputs: [], parameters: {} });
const options = (signal = new AbortController().signal) => ({ callDeadlineMs: Infinity, signal, outputs: null, protocol: /** @type {const} */ ('grpc') });
const turn = () => new Promise((resolve) => setTimeout(resolve, 20));

test('a model some device lost goes only to the devices that hold it', async (t) => {
  const { path, ends } = edge(t, [0, 1, 2], [2]);
  for (let i = 0; i < 6; i++) path.infer(request(), options())?.catch(() => {});
  await waitFor(() => ends.get(2)?.got === 6);
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
  await waitFor(() => ends.get(0)?.got === 1);
  path.deviceOut(0, 'it is out of service: CUDA error 700');
  const err = await stowageError(t, /** @type {Promise<unknown>} */ (pending));
  t.is(err.code, 'STOWAGE_DEVICE_UNAVAILABLE');
  t.regex(err.message, /device 0 is unavailable: it is out of service: CUDA error 700/);
  await waitFor(() => ends.get(0)?.closed === true); // the close reaches the other end in a turn or a few
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

test('each request is counted in shared memory before it is answered: routes, successes with their times, failures by reason', async (t) => {
  const { path, ends, counters, main, lastReleases } = edge(t, [0, 1]);
  const answered = /** @type {Promise<unknown>} */ (path.infer(request(), options()));
  const failing = /** @type {Promise<unknown>} */ (path.infer(request(), options()));
  await waitFor(() => ends.get(0)?.got === 1 && ends.get(1)?.got === 1);
  const [a, b] = [ends.get(0), ends.get(1)];
  t.deepEqual([a?.got, b?.got], [1, 1], 'in turn: one on each device');
  const timing = { computeInputNs: 10, computeInferNs: 20, computeOutputNs: 30, batchRows: 1, executedBatchSize: 1, requests: 1 };
  a?.port.postMessage({ type: 'executed', results: [{ id: a.ids[0], outputs: [], queueNs: 5 }], timing });
  b?.port.postMessage({ type: 'failed', id: b.ids[0], error: { code: 'STOWAGE_EXECUTION_FAILED', message: 'the run failed' } });
  await answered;
  const counts = counters.read(0);
  t.is(counts.success.count, 1, 'counted by the time its answer resolved');
  t.true(counts.success.ns > 0);
  t.deepEqual([counts.rows, counts.queueNs, counts.computeInputNs, counts.computeInferNs, counts.computeOutputNs], [1, 5, 10, 20, 30]);
  await t.throwsAsync(failing);
  const after = counters.read(0);
  t.is(after.fail.count, 1);
  t.is(after.failures.get('BACKEND'), 1, 'by Triton\'s reason');
  t.deepEqual(after.routes, [1, 1, 0], 'one request to each device');
  t.is(counters.servedOf(0), 2);
  t.true(after.lastMs > 0);
  t.is(main.held(0), 0, 'both leases given back after their counts');
  t.deepEqual(lastReleases, [], 'on an open slot, a release tells no one');
  const taken = counters.take(0);
  t.is(taken.success.count, 1);
  t.is(counters.read(0).success.count, 0, 'taken: the slot starts again at zero');
  t.is(counters.servedOf(0), 2, 'the edge\'s total stays');
});

test('a preprocess hook on the edge\'s own hook thread feeds the device through a door of its own, handed over through the edge\'s door', async (t) => {
  const bundle = path.join(ROOT, 'bundles', 'digits_u8');
  const hooked = { ...readManifest(bundle), hooks: { file: path.join(bundle, 'model.js'), version: '1', preprocess: true, postprocess: false, run: false } };
  const route = { model: 'digits_u8', spec: hooked, instance: instanceKey('digits_u8', 1), slot: 1, tag: 1 };
  const { path: edgePath, ends, counters } = edge(t, [0], undefined, { routes: [route] });
  const pixels = Uint8Array.from({ length: 64 }, (_, i) => i);
  /** @type {import('../../../../dist/shared/data-plane.js').DataPlaneRequest} */
  const req = { model: 'digits_u8', version: '', id: 'r1', inputs: [{ name: 'image', datatype: 'UINT8', shape: [1, 8, 8], bytes: { kind: 'inline', data: pixels, owned: true } }], outputs: [{ name: 'label', region: null }], parameters: {} };
  const answered = edgePath.infer(req, options());
  t.truthy(answered, 'the edge takes a hooked model\'s request');
  const end = /** @type {NonNullable<ReturnType<typeof ends.get>>} */ (ends.get(0));
  /** @type {any} */
  let fed;
  const hookDoor = await waitFor(() => end.messages.find((m) => m.type === 'hookDoor'));
  hookDoor.port.on('message', (/** @type {any} */ m) => { fed = m; });
  await waitFor(() => fed);
  const command = end.messages.find((m) => m.type === 'infer');
  t.true(command.inputsFromHook, 'the command goes without inputs');
  t.deepEqual(command.inputs, []);
  t.is(fed.link, 100, 'the hook names the request by the door\'s link');
  t.is(fed.id, command.id, 'and by its id on that door');
  t.deepEqual([fed.inputs[0].name, fed.inputs[0].datatype, fed.inputs[0].shape], ['image', 'FP32', [1, 8, 8]]);
  t.is(new Float32Array(fed.inputs[0].data.buffer, fed.inputs[0].data.byteOffset, 64)[16], Math.fround(16 * (16 / 255)), 'scaled by model.js on the hook thread');
  hookDoor.port.close();
  const label = BigInt64Array.from([7n]);
  const timing = { computeInputNs: 1, computeInferNs: 2, computeOutputNs: 3, batchRows: 1, executedBatchSize: 1, requests: 1 };
  end.port.postMessage({ type: 'executed', results: [{ id: command.id, outputs: [{ name: 'label', datatype: 'INT64', shape: [1], data: new Uint8Array(label.buffer) }], queueNs: 1 }], timing });
  const answer = /** @type {import('../../../../dist/shared/data-plane.js').InferenceAnswer} */ (await answered);
  t.deepEqual([...new BigInt64Array(answer.outputs[0].data.buffer, answer.outputs[0].data.byteOffset, 1)], [7n]);
  t.is(counters.read(1).success.count, 1, 'counted on the hooked model\'s slot');
});

test('a meta model\'s run hook runs on the edge; its sub-call to a model without a route here goes to the main thread', async (t) => {
  const dir = mkdtempSync(path.join(tmpdir(), 'stowage-edge-meta-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const file = path.join(dir, 'model.js');
  writeFileSync(file, "export async function run({ x }, ctx) { const { y } = await ctx.infer('sub', { x }); return { y }; }\n");
  const x = tensorSpec('x', 'FP32', 'k', [2], -1);
  const y = tensorSpec('y', 'FP32', 'k', [2], -1);
  const meta = modelSpec({ name: 'meta', kind: 'meta', subModels: ['sub'], inputs: [x], outputs: [y], hooks: { file, version: '1', preprocess: false, postprocess: false, run: true } });
  /** @type {import('../../../../dist/shared/data-plane.js').DataPlaneRequest[]} */
  const sentToMain = [];
  /** @type {Infer} */
  const viaMain = async (request) => {
    sentToMain.push(request);
    const input = request.inputs[0].bytes;
    const values = input.kind === 'inline' ? new Float32Array(input.data.slice().buffer) : new Float32Array(0);
    return { outputs: [{ name: 'y', datatype: 'FP32', shape: [2], data: new Uint8Array(values.map((v) => v * 10).buffer) }], framed: null };
  };
  const { path: edgePath, ends, counters } = edge(t, [0], undefined, { viaMain, routes: [{ model: 'meta', spec: meta, instance: instanceKey('meta', 1), slot: 1, tag: 1 }] });
  /** @type {import('../../../../dist/shared/data-plane.js').DataPlaneRequest} */
  const req = { model: 'meta', version: '', id: '', inputs: [{ name: 'x', datatype: 'FP32', shape: [2], bytes: { kind: 'inline', data: new Uint8Array(Float32Array.from([1, 2]).buffer), owned: true } }], outputs: [], parameters: {} };
  const answer = /** @type {import('../../../../dist/shared/data-plane.js').InferenceAnswer} */ (await edgePath.infer(req, options()));
  t.deepEqual([...new Float32Array(answer.outputs[0].data.slice().buffer)], [10, 20]);
  t.deepEqual(sentToMain.map((r) => [r.model, r.inputs.map((i) => i.name), r.outputs.map((o) => o.name)]), [['sub', ['x'], []]], 'only the sub-call went to the main thread');
  t.is(ends.get(0)?.got, 0, 'a meta model runs on no device itself');
  t.is(counters.read(1).success.count, 1, 'the meta request counted on its slot here');
  t.is(edgePath.infer({ ...req, model: 'sub' }, options()), null, 'a model without a route here is the main thread\'s');
});

/**
 * What `probe` gives once it gives something (polled every 5 ms, for at most 5 s).
 * @template T
 * @param {() => T | undefined} probe
 * @returns {Promise<T>}
 */
async function waitFor(probe) {
  for (let i = 0; i < 1000; i++) {
    const value = probe();
    if (value) return value;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  throw new Error('timed out waiting');
}

test('the last lease given back on a slot the main thread closed tells it (an unload waits for that, polling nothing)', async (t) => {
  const { path, ends, main, lastReleases } = edge(t, [0]);
  const pending = /** @type {Promise<unknown>} */ (path.infer(request(), options()));
  await waitFor(() => ends.get(0)?.got === 1);
  main.close(0); // an unload: no new lease on it
  t.is(path.infer(request(), options()), null, 'a closed slot takes no new request here');
  const end = /** @type {NonNullable<ReturnType<typeof ends.get>>} */ (ends.get(0));
  end.port.postMessage({ type: 'executed', results: [{ id: end.ids[0], outputs: [], queueNs: 1 }], timing: { computeInputNs: 0, computeInferNs: 0, computeOutputNs: 0, batchRows: 1, executedBatchSize: 1, requests: 1 } });
  await pending;
  t.deepEqual(lastReleases, ['model']);
});

test('a route to a slot in a segment added after the edge started: the segment comes first, then the request takes a lease and is counted there', async (t) => {
  const { path, ends, counters, main } = edge(t, [0]);
  // The main thread fills its first segment of slots, so the next instance's slot is in a second
  // one, which it sends (with its counters) before the route that names it (ToEdge 'slotsGrown').
  /** @type {SharedArrayBuffer[]} */
  const grown = [];
  const grower = Leases.create(1, (segment) => grown.push(segment));
  let slot = grower.take();
  while (slot < SEGMENT_SLOTS) slot = grower.take();
  t.is(grown.length, 2);
  main.adopt(grown[1]); // the test's main view stands for the grower from here
  main.open(slot, 5);
  path.slotsGrown(grown[1], counters.grow());
  const beyond = modelSpec({ name: 'far', inputs: [tensorSpec('x', 'FP32', 'k', [2], -1)], outputs: [tensorSpec('y', 'FP32', 'k', [2], -1)] });
  path.route('far', { model: 'far', spec: beyond, instance: instanceKey('far', 1), slot, tag: 5 });
  const answered = /** @type {Promise<unknown>} */ (path.infer({ ...request(), model: 'far' }, options()));
  t.truthy(answered, 'the edge takes it');
  await waitFor(() => ends.get(0)?.got === 1);
  t.is(main.held(slot), 1, 'its lease is in the new segment');
  const end = /** @type {NonNullable<ReturnType<typeof ends.get>>} */ (ends.get(0));
  end.port.postMessage({ type: 'executed', results: [{ id: end.ids[0], outputs: [], queueNs: 1 }], timing: { computeInputNs: 0, computeInferNs: 0, computeOutputNs: 0, batchRows: 1, executedBatchSize: 1, requests: 1 } });
  await answered;
  t.is(counters.read(slot).success.count, 1, 'counted in the new segment\'s counters');
  t.is(main.held(slot), 0);
});
