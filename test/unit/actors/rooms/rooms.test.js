// A thread's rooms (actors/rooms/rooms.ts): an edge's over real MessagePorts standing in for the
// device actors' ends of its doors, with real hook threads of its own: which door a request takes
// when a device lost the model, what a device taken out of service does to the requests pending on
// its door, each request counted in shared memory (shared/request-counters.ts) before its answer, a
// preprocess hook feeding the device through a door of its thread's, and a meta model's sub-call
// to a model without a route here going elsewhere; the main thread's over stand-ins for device
// handles: the choice of device (settled first, lost models, lpt_packing's fill).
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { MessageChannel } from 'node:worker_threads';
import test from 'ava';
import { readManifest } from '../../../../dist/bundle/manifest.js';
import { ROOT } from '../../../helpers/server.js';
import { Rooms } from '../../../../dist/actors/rooms/rooms.js';
import { Devices } from '../../../../dist/node/devices.js';
import { ModelPolicies } from '../../../../dist/node/model-policies.js';
import { Leases, SEGMENT_SLOTS } from '../../../../dist/shared/leases.js';
import { Quotas } from '../../../../dist/shared/admission.js';
import { Backlog } from '../../../../dist/shared/backlog.js';
import { RequestCounters } from '../../../../dist/shared/request-counters.js';
import { instanceKey } from '../../../../dist/shared/model-spec.js';
import { modelSpec, tensorSpec } from '../../../helpers/specs.js';
import { stowageError } from '../../../helpers/errors.js';

const spec = modelSpec({ name: 'm', inputs: [tensorSpec('x', 'FP32', 'k', [2], -1)], outputs: [tensorSpec('y', 'FP32', 'k', [2], -1)] });
const instance = instanceKey('m', 1);

/** @typedef {import('../../../../dist/shared/data-plane.js').Infer} Infer */
/** What rooms that cannot take a request do in these tests: say so. */
const WENT_ELSEWHERE = { message: 'went elsewhere' };

/**
 * An edge's path with a door to each of `devices`, the device ends kept (each records the messages it got).
 * @param {import('ava').ExecutionContext} t
 * @param {number[]} devices
 * @param {number[]} [holders] the route's devices (absent: every device)
 * @param {{ viaMain?: Infer, routes?: import('../../../../dist/shared/channels/edge.js').EdgeRoute[] }} [more]
 */
function edge(t, devices, holders, { viaMain, routes = [] } = {}) {
  const main = Leases.create(1);
  for (let slot = 0; slot <= routes.length; slot++) main.open(main.take(), 1);
  const counters = RequestCounters.create(1, 3); // the main thread's view: it reads them
  counters.grow();
  const hooks = { threads: 1, timeoutMs: 10_000, importTimeoutMs: 10_000, maxHeapMib: 0 };
  /** @type {string[]} */
  const lastReleases = [];
  /** @type {Infer} */
  const elsewhere = viaMain ?? (() => Promise.reject(new Error(WENT_ELSEWHERE.message)));
  const start = { leases: main.shape, routing: /** @type {const} */ ('round_robin'), counters: counters.shape, hooks, regionHolds: Leases.create(1).shape, quotas: Quotas.create({}, {}, 2), levels: { defaultLevel: 2, models: {} }, costHalflifeMs: 30_000 };
  const path = new Rooms(start, { row: 0, quotaRow: 1 }, { elsewhere, lastRelease: (of) => lastReleases.push(of), tracing: false });
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

test('a model no device with a door holds goes elsewhere', async (t) => {
  const { path } = edge(t, [0, 1], [2]);
  await t.throwsAsync(path.infer(request(), options()), WENT_ELSEWHERE);
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
  await t.throwsAsync(path.infer(request(), options()), WENT_ELSEWHERE, 'nothing more goes to it');
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

test('a meta model\'s run hook runs on the edge; its sub-call to a model without a route here goes elsewhere', async (t) => {
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
  await edgePath.infer({ ...req, model: 'sub', inputs: [{ ...req.inputs[0], bytes: { kind: 'inline', data: new Uint8Array(8), owned: true } }] }, options());
  t.is(sentToMain.at(-1)?.model, 'sub', 'a model without a route here is the main thread\'s');
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
  await t.throwsAsync(path.infer(request(), options()), WENT_ELSEWHERE, 'a closed slot takes no new request here');
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

/**
 * A device actor's handle as the main thread's rooms reach it (RoomDevice) and the device pool loads onto it: its
 * requests stay pending; stands in for a DeviceHandle with only what the rooms and the pool use, hence `any`.
 * @param {number} deviceId
 * @returns {any}
 */
function handle(deviceId) {
  /** @type {(() => void)[]} */
  const pending = [];
  return {
    deviceId, serving: true, settled: true, state: 'READY', pending,
    /** Instances this device lost; it holds every other. */
    lost: new Set(),
    holds(/** @type {string} */ instance) { return !this.lost.has(instance); },
    get inflight() { return pending.length; },
    load: async () => ({ loadMs: 1, weightBytes: 1000, session: 'own' }),
    infer: () => new Promise((resolve) => pending.push(() => resolve({ outputs: [], queueNs: 0, timing: {} }))),
    adoptDoor: () => {},
  };
}

/**
 * The main thread's rooms over `devices` (its row the only one), with the device pool that decides each model's
 * placement and holders, as the server wires them: every route told with them.
 * @param {import('ava').ExecutionContext} t
 * @param {any[]} devices
 * @param {import('../../../../dist/shared/config-schema.js').GatewayMode} mode
 * @param {Partial<import('../../../../dist/node/devices.js').LptOptions>} [lpt]
 */
function mainRooms(t, devices, mode, lpt = {}) {
  const leases = Leases.create(0);
  const slots = [0, 1].map(() => leases.take()); // before the rooms start: their segment is in the shape
  const counters = RequestCounters.create(0, devices.length);
  counters.grow();
  const pool = new Devices(devices, { mode, policies: new ModelPolicies([]), lpt: { defaultReplicas: 1, replicas: {}, fillFactor: 1, policy: 'fill_rr', rebalanceSeconds: 0, budgets: new Map(), ...lpt } });
  const hooks = { threads: 1, timeoutMs: 10_000, importTimeoutMs: 10_000, maxHeapMib: 0 };
  const start = { leases: leases.shape, routing: mode === 'least_outstanding' ? /** @type {const} */ ('least_outstanding') : /** @type {const} */ ('round_robin'), counters: counters.shape, hooks, regionHolds: Leases.create(0).shape, quotas: Quotas.create({}, {}, 1), levels: { defaultLevel: 2, models: {} }, costHalflifeMs: 30_000 };
  const rooms = new Rooms(start, { row: 0, quotaRow: 0 }, { elsewhere: (req) => Promise.reject(pool.unavailable(instanceKey(req.model, 1))), lastRelease: () => {}, tracing: false });
  t.teardown(() => rooms.close());
  for (const d of devices) rooms.reach(d, new Backlog(Backlog.create(3)));
  /** Load `name` onto the pool, and route it as the server would (its placement, its holders). */
  const load = async (/** @type {string} */ name, maxBatchSize = 1) => {
    const modelSpecOf = modelSpec({ name, maxBatchSize, inputs: [tensorSpec('x', 'FP32', 'k', [2], -1)], outputs: [tensorSpec('y', 'FP32', 'k', [2], -1)] });
    const instance = instanceKey(name, 1);
    await pool.load(modelSpecOf, instance);
    const slot = /** @type {number} */ (slots.shift());
    leases.open(slot, slot + 1);
    const route = () => rooms.route(name, pool.routed({ model: name, spec: modelSpecOf, instance, slot, tag: slot + 1 }, 0));
    route();
    return { instance, route };
  };
  const send = (/** @type {string} */ model) => rooms.infer({ ...request(), model }, options());
  return { rooms, pool, load, send };
}

test('main thread: fill_rr fills a replica\'s batch before the next opens; when all are full, the least loaded', async (t) => {
  const devices = [0, 1, 2].map(handle);
  const { pool, load, send } = mainRooms(t, devices, 'lpt_packing', { replicas: { hot: 2 } });
  await load('hot', 2);
  const placed = pool.placementOf('hot');
  t.is(placed.length, 2);
  /** @type {number[]} */
  const routed = [];
  const seen = devices.map(() => 0);
  for (let i = 0; i < 5; i++) {
    void send('hot');
    routed.push(devices.findIndex((d, k) => d.pending.length > seen[k]));
    devices.forEach((d, k) => { seen[k] = d.pending.length; });
  }
  t.deepEqual(routed, [placed[0], placed[0], placed[1], placed[1], placed[0]]);
});

test('main thread: fill_least opens the replica with the fewest calls in flight', async (t) => {
  const devices = [0, 1, 2].map(handle);
  const { pool, load, send } = mainRooms(t, devices, 'lpt_packing', { policy: 'fill_least', replicas: { hot: 3 } });
  await load('hot', 1);
  const [first, second, third] = pool.placementOf('hot');
  devices[third].pending.push(() => {}, () => {}); // busy with other work; the second is idle
  void send('hot');
  void send('hot');
  t.deepEqual([devices[first].pending.length, devices[second].pending.length, devices[third].pending.length], [1, 1, 2]);
});

test('main thread: round_robin and least_outstanding over the devices; one device is a pass-through', async (t) => {
  const devices = [0, 1].map(handle);
  const rr = mainRooms(t, devices, 'round_robin');
  await rr.load('m');
  for (let i = 0; i < 4; i++) void rr.send('m');
  t.deepEqual(devices.map((d) => d.pending.length), [2, 2]);
  const lo = mainRooms(t, devices, 'least_outstanding');
  await lo.load('m');
  devices[0].pending.push(() => {});
  void lo.send('m');
  t.deepEqual(devices.map((d) => d.pending.length), [3, 3]);
  const one = mainRooms(t, [handle(0)], 'lpt_packing');
  await one.load('m', 8);
  t.deepEqual(one.pool.placementOf('m'), [0]);
});

test('main thread: a device out of service is routed around; with none left, UNAVAILABLE saying which are out', async (t) => {
  const devices = [0, 1].map(handle);
  const { load, send } = mainRooms(t, devices, 'round_robin');
  await load('m');
  devices[0].serving = false;
  devices[0].settled = false;
  devices[0].state = 'OUT_OF_SERVICE';
  for (let i = 0; i < 4; i++) void send('m');
  t.deepEqual(devices.map((d) => d.pending.length), [0, 4], 'nothing routed to the device taken out');
  devices[1].serving = false;
  devices[1].settled = false;
  devices[1].state = 'OUT_OF_SERVICE';
  const err = await stowageError(t, send('m'));
  t.is(err.code, 'STOWAGE_DEVICE_UNAVAILABLE');
  t.regex(err.message, /no device of this node is in service \(device 0: OUT_OF_SERVICE, device 1: OUT_OF_SERVICE\)/);
});

test('main thread: a device that lost a model is routed around, placed or not; one still reloading after a crash takes nothing others serve, and alone takes what comes (its door holds it)', async (t) => {
  for (const mode of /** @type {const} */ (['round_robin', 'least_outstanding', 'lpt_packing'])) {
    const devices = [0, 1, 2].map(handle);
    const { pool, load, send } = mainRooms(t, devices, mode, { defaultReplicas: 'all' });
    const { instance, route } = await load('m');
    devices[1].lost.add(instance);
    t.true(pool.lost(instance), `${mode}: others still hold it`);
    route(); // the server tells every thread's rooms (its #instanceLost)
    for (let i = 0; i < 12; i++) void send('m');
    t.deepEqual(devices.map((d) => d.inflight), [6, 0, 6], mode);
    devices[2].settled = false; // restarting: its reloads not done
    for (let i = 0; i < 4; i++) void send('m');
    t.deepEqual(devices.map((d) => d.inflight), [10, 0, 6], `${mode}: restarting`);
    devices[0].settled = false;
    void send('m');
    t.is(devices[0].inflight + devices[2].inflight, 17, `${mode}: every holder restarting, one takes it`);
  }
});

test('main thread: a model no device in service holds fails UNAVAILABLE, naming the model', async (t) => {
  const devices = [0, 1].map(handle);
  const { pool, load, send } = mainRooms(t, devices, 'round_robin');
  const { instance, route } = await load('m');
  for (const d of devices) d.lost.add(instance);
  t.false(pool.lost(instance));
  route();
  const err = await stowageError(t, send('m'));
  t.regex(err.message, /model "m" is not ready \(state UNAVAILABLE\): no device in service holds it/);
});
