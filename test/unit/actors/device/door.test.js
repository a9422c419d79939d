// A thread's door to a device actor (actors/device/door.ts), over a real MessagePort
// whose other end stands in for the device: each request settles exactly once, by its answer (one
// execution's answers in one message), the device's failure, its deadline (the device told to drop
// it), its client going (likewise), or the door closing (UNAVAILABLE, now and for later requests,
// what was pending saying why as the main thread says it, or after a while without);
// what one turn sends goes as one message; `inflight` counts what is unsettled; a door made before its
// worker serves holds what it is sent, in order and within each request's deadline, until it opens.
import { MessageChannel, MessagePort } from 'node:worker_threads';
import test from 'ava';
import { DeviceDoor } from '../../../../dist/actors/device/door.js';
import { nowMs } from '../../../../dist/shared/timers.js';
import { instanceKey } from '../../../../dist/shared/model-spec.js';
import { stowageError } from '../../../helpers/errors.js';

const instance = instanceKey('m', 1);
/** @type {import('../../../../dist/shared/channels/inference.js').ExecutionTiming} */
const timing = { computeInputNs: 2, computeInferNs: 3, computeOutputNs: 4, batchRows: 2, executedBatchSize: 2, requests: 2 };

/**
 * A door and the device's end of it: the batches the device got, and how it answers.
 * @param {import('ava').ExecutionContext} t
 */
function door(t) {
  const { port1: device, port2 } = new MessageChannel();
  /** @type {any[][]} */
  const batches = [];
  /** @type {((batch: any[]) => void)[]} */
  const waiting = [];
  device.on('message', (batch) => {
    batches.push(batch);
    waiting.shift()?.(batch);
  });
  let closedTold = 0;
  const d = new DeviceDoor(3, port2, 7, 5_000, () => closedTold++);
  t.teardown(() => device.close());
  /** The next batch the device gets. */
  const next = () => new Promise((resolve) => waiting.push(resolve));
  return { d, device, batches, next, closedTold: () => closedTold };
}

/**
 * @param {number} [deadlineMs]
 * @returns {import('../../../../dist/shared/channels/inference.js').InferenceRequest}
 */
const request = (deadlineMs = Infinity) => ({ instance, inputs: [{ name: 'x', datatype: 'FP32', shape: [1, 2], data: new Uint8Array(8) }], rows: 1, outputs: ['y'], outputRegions: [null], frame: null, deadlineMs });
const result = (/** @type {number} */ id, /** @type {number} */ v) => ({ id, outputs: [{ name: 'y', datatype: 'FP32', shape: [1, 1], data: new Uint8Array([v, 0, 0, 0]) }] });

test('requests of one turn go as one message, their inputs transferred; one execution answers them in one', async (t) => {
  const { d, device, next } = door(t);
  const got = next();
  const a = request();
  const answers = Promise.all([d.infer(a, new AbortController().signal), d.infer(request(), new AbortController().signal)]);
  t.is(d.inflight, 2);
  const batch = await got;
  t.deepEqual(batch.map((/** @type {{ type: string, id: number }} */ m) => [m.type, m.id]), [['infer', 1], ['infer', 2]]);
  t.is(a.inputs[0].data.byteLength, 0, 'its input moved to the device, not copied');
  device.postMessage({ type: 'executed', results: [result(2, 20), result(1, 10)], timing });
  const [one, two] = await answers;
  t.is(one.outputs[0].data[0], 10, 'each answer to its own request, whatever the order');
  t.is(two.outputs[0].data[0], 20);
  t.deepEqual(one.timing, timing);
  t.is(d.inflight, 0);
});

test('the device failing a request fails it with the device\'s error', async (t) => {
  const { d, device, next } = door(t);
  const got = next();
  const answer = d.infer(request(), new AbortController().signal);
  const [cmd] = await got;
  device.postMessage({ type: 'failed', id: cmd.id, error: { code: 'STOWAGE_INVALID_TENSOR', message: 'bad shape' } });
  const err = await stowageError(t, answer);
  t.is(err.code, 'STOWAGE_INVALID_TENSOR');
  t.is(err.message, 'bad shape');
  t.is(d.inflight, 0);
});

test('a request past its deadline fails DEADLINE_EXCEEDED and the device is told to drop it; its late answer is ignored', async (t) => {
  const { d, device, next } = door(t);
  const got = next();
  const answer = d.infer(request(nowMs() + 30), new AbortController().signal);
  const [cmd] = await got;
  const cancel = next();
  const err = await stowageError(t, answer);
  t.is(err.code, 'STOWAGE_DEADLINE_EXCEEDED');
  t.deepEqual(await cancel, [{ type: 'cancel', id: cmd.id }]);
  device.postMessage({ type: 'executed', results: [result(cmd.id, 1)], timing });
  await new Promise((resolve) => setTimeout(resolve, 20));
  t.is(d.inflight, 0);
});

test('a client that goes cancels its request on the device; one gone before it was sent is never sent', async (t) => {
  const { d, batches, next } = door(t);
  const got = next();
  const client = new AbortController();
  const answer = d.infer(request(), client.signal);
  const [cmd] = await got;
  const cancel = next();
  client.abort();
  t.is((await stowageError(t, answer)).code, 'STOWAGE_CANCELLED');
  t.deepEqual(await cancel, [{ type: 'cancel', id: cmd.id }]);

  const gone = new AbortController();
  gone.abort();
  t.is((await stowageError(t, d.infer(request(), gone.signal))).code, 'STOWAGE_CANCELLED');
  await new Promise((resolve) => setTimeout(resolve, 20));
  t.is(batches.length, 2, 'nothing sent for it');
});

test('the device\'s end closing fails what is pending and every later request UNAVAILABLE, and is told once', async (t) => {
  const { d, device, next, closedTold } = door(t);
  const got = next();
  const answer = d.infer(request(), new AbortController().signal);
  await got;
  device.close();
  const err = await stowageError(t, answer);
  t.is(err.code, 'STOWAGE_DEVICE_UNAVAILABLE');
  t.regex(err.message, /device 3.*its worker exited/);
  t.is(closedTold(), 1);
  const later = await stowageError(t, d.infer(request(), new AbortController().signal));
  t.is(later.code, 'STOWAGE_DEVICE_UNAVAILABLE');
  t.is(d.inflight, 0);
});

test('what is pending when the device\'s end closes waits for the main thread to say why, its exit code included; later requests are refused at once', async (t) => {
  const { d, device, next, closedTold } = door(t);
  const got = next();
  const answer = d.infer(request(), new AbortController().signal);
  await got;
  device.close();
  while (closedTold() === 0) await new Promise((resolve) => setTimeout(resolve, 5));
  const later = await stowageError(t, d.infer(request(), new AbortController().signal));
  t.is(later.code, 'STOWAGE_DEVICE_UNAVAILABLE', 'nothing more goes to it');
  t.is(d.inflight, 1, 'the pending one waits for why');
  d.close('its worker exited (code 70)');
  const err = await stowageError(t, answer);
  t.regex(err.message, /device 3 is unavailable: its worker exited \(code 70\)/);
  t.is(d.inflight, 0);
});

test('a request fed by a hook goes without inputs, named to the hook by the door\'s link; a hook thread\'s door for this door goes to the device, one for another is closed', async (t) => {
  const { d, next } = door(t);
  /** @type {any} */
  let target;
  const got = next();
  d.infer(request(), new AbortController().signal, (to) => { target = to; }).catch(() => {});
  t.deepEqual(target, { deviceId: 3, generation: 7, link: 7, id: 1 });
  const [command] = await got;
  t.true(command.inputsFromHook);
  const mine = new MessageChannel();
  const adopted = next();
  d.adoptDoor(mine.port2, 7);
  const [sent] = await adopted;
  t.is(sent.type, 'hookDoor');
  t.true(sent.port instanceof MessagePort, 'the port itself, transferred');
  sent.port.close();
  mine.port1.close();
  const stale = new MessageChannel();
  let closed = false;
  stale.port1.on('close', () => { closed = true; });
  d.adoptDoor(stale.port2, 6);
  while (!closed) await new Promise((resolve) => setTimeout(resolve, 5));
  t.pass('a door made for another door\'s worker is closed');
});

test('a door made before its worker serves holds its requests, in order, until it opens; one past its deadline meanwhile fails there; closing it unopened fails what it holds', async (t) => {
  const { port1: device, port2 } = new MessageChannel();
  t.teardown(() => device.close());
  const d = new DeviceDoor(3, null, 9, 5_000, () => {});
  const first = d.infer(request(), new AbortController().signal);
  const late = d.infer(request(nowMs() + 20), new AbortController().signal);
  const second = d.infer(request(), new AbortController().signal);
  t.is(d.inflight, 3);
  t.is((await stowageError(t, late)).code, 'STOWAGE_DEADLINE_EXCEEDED', 'its deadline runs while it waits');
  /** @type {any[][]} */
  const batches = [];
  device.on('message', (batch) => batches.push(batch));
  d.open(port2);
  while (batches.flat().length < 4) await new Promise((resolve) => setTimeout(resolve, 5));
  t.deepEqual(batches.flat().map((m) => [m.type, m.id]), [['infer', 1], ['infer', 2], ['infer', 3], ['cancel', 2]], 'what it held, in order, the late one\'s cancel after it');
  device.postMessage({ type: 'executed', results: [result(1, 1), result(3, 3)], timing });
  t.deepEqual([(await first).outputs[0].data[0], (await second).outputs[0].data[0]], [1, 3]);

  const unopened = new DeviceDoor(4, null, 10, 5_000, () => {});
  const held = unopened.infer(request(), new AbortController().signal);
  unopened.close('its worker did not start within 10 ms');
  const err = await stowageError(t, held);
  t.is(err.code, 'STOWAGE_DEVICE_UNAVAILABLE');
  t.regex(err.message, /device 4 is unavailable: its worker did not start within 10 ms/);
});

test('the handle\'s own door holds when gone: a request sent after the device\'s end closed fails with the why the main thread gives, its exit code in it', async (t) => {
  const { port1: device, port2 } = new MessageChannel();
  let gone = false;
  const d = new DeviceDoor(5, port2, 11, 5_000, () => { gone = true; }, { holdWhenGone: true });
  device.close();
  while (!gone) await new Promise((resolve) => setTimeout(resolve, 5));
  const late = d.infer(request(), new AbortController().signal);
  t.is(d.inflight, 1, 'taken, not refused');
  d.close('its worker exited (code 70)');
  const err = await stowageError(t, late);
  t.regex(err.message, /device 5 is unavailable: its worker exited \(code 70\)/);
});
