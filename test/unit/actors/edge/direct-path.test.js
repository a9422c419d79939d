// An edge thread's direct path over real MessagePorts standing in for the device actors' ends of
// its doors: which door a request takes when a device lost the model, what a device taken out of
// service does to the requests pending on its door, and each request counted in shared memory
// (shared/request-counters.ts) before its answer.
import { MessageChannel } from 'node:worker_threads';
import test from 'ava';
import { DirectPath } from '../../../../dist/actors/edge/direct-path.js';
import { Leases } from '../../../../dist/shared/leases.js';
import { RequestCounters } from '../../../../dist/shared/request-counters.js';
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
  const counters = RequestCounters.create(1, 1, 3); // the main thread's view: it reads them
  const path = new DirectPath({ leases: memory, routing: 'round_robin', counters: counters.shape }, 0);
  path.route('m', { model: 'm', spec, instance, slot: 0, tag: 1, ...(holders ? { devices: holders } : {}) });
  /** @type {Map<number, { port: import('node:worker_threads').MessagePort, got: number, closed: boolean, ids: number[] }>} */
  const ends = new Map();
  for (const id of devices) {
    const { port1, port2 } = new MessageChannel();
    const end = { port: port1, got: 0, closed: false, ids: /** @type {number[]} */ ([]) };
    port1.on('message', (/** @type {{ type: string, id: number }[]} */ messages) => {
      for (const m of messages) if (m.type === 'infer') end.ids.push(m.id);
      end.got += messages.filter((m) => m.type === 'infer').length;
    });
    port1.on('close', () => { end.closed = true; });
    ends.set(id, end);
    path.door(id, port2, 10_000);
  }
  t.teardown(() => { for (const e of ends.values()) e.port.close(); });
  return { path, ends, counters, main };
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

test('each request is counted in shared memory before it is answered: routes, successes with their times, failures by reason', async (t) => {
  const { path, ends, counters, main } = edge(t, [0, 1]);
  const answered = /** @type {Promise<unknown>} */ (path.infer(request(), options()));
  const failing = /** @type {Promise<unknown>} */ (path.infer(request(), options()));
  await turn();
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
  t.is(counters.directOf(0), 2);
  t.true(after.lastMs > 0);
  t.is(main.held(0), 0, 'both leases given back after their counts');
  const taken = counters.take(0);
  t.is(taken.success.count, 1);
  t.is(counters.read(0).success.count, 0, 'taken: the slot starts again at zero');
  t.is(counters.directOf(0), 2, 'the edge\'s total stays');
});
