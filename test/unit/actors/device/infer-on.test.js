// One request to a device over a link (actors/device/door.ts `inferOn`), by itself, on a link of
// the test's own that records what is sent: numbered, stamped and sent with its inputs' buffers
// (each once); settled by its answer, by its deadline or, without one, the link's wait bound (the
// device told to drop it), by its client going (likewise), and never sent when refused or when its
// client went first.
import test from 'ava';
import { inferOn } from '../../../../dist/actors/device/door.js';
import { PendingCalls } from '../../../../dist/shared/thread-messages.js';
import { nowMs } from '../../../../dist/shared/timers.js';
import { instanceKey } from '../../../../dist/shared/model-spec.js';
import { errors } from '../../../../dist/shared/errors.js';
import { stowageError } from '../../../helpers/errors.js';

const timing = { computeInputNs: 1, computeInferNs: 2, computeOutputNs: 3, batchRows: 2, executedBatchSize: 2, requests: 2 };

/** A link that records what it sends; `refused` makes it refuse. */
function link({ waitBoundMs = 5_000, refused = /** @type {Error | null} */ (null) } = {}) {
  /** @type {{ msg: any, transfer: readonly unknown[] }[]} */
  const sent = [];
  let next = 1;
  const pending = new PendingCalls();
  /** @type {import('../../../../dist/actors/device/door.js').DeviceLink} */
  const l = { pending, nextId: () => next++, waitBoundMs, send: (msg, transfer = []) => { sent.push({ msg, transfer }); }, refusal: () => refused };
  return { link: l, sent, pending };
}

/** A request with two inputs that are views of one buffer, and a third of its own. */
function request(deadlineMs = Infinity) {
  const shared = new ArrayBuffer(16);
  const own = new Uint8Array(8);
  return {
    instance: instanceKey('m', 1), rows: 1, outputs: ['y'], outputRegions: [null], frame: null, deadlineMs,
    inputs: [
      { name: 'a', datatype: /** @type {const} */ ('FP32'), shape: [1, 2], data: new Uint8Array(shared, 0, 8) },
      { name: 'b', datatype: /** @type {const} */ ('FP32'), shape: [1, 2], data: new Uint8Array(shared, 8, 8) },
      { name: 'c', datatype: /** @type {const} */ ('FP32'), shape: [1, 2], data: own },
    ],
  };
}

test('a request is numbered, stamped and sent with each of its buffers once; its answer settles it with the execution\'s timing', async (t) => {
  const { link: l, sent, pending } = link();
  const req = request();
  const before = nowMs();
  const answer = inferOn(l, req, undefined, (command) => { command.inputsFromHook = true; });
  t.is(sent.length, 1);
  const { msg, transfer } = sent[0];
  t.is(msg.type, 'infer');
  t.is(msg.id, 1);
  t.true(msg.enqueuedAtMs >= before);
  t.true(msg.inputsFromHook, 'the caller marked the command before it went');
  t.is(transfer.length, 2, 'two views of one buffer transfer it once');
  pending.resolve(1, { result: { outputs: [], queueNs: 7 }, timing });
  const result = await answer;
  t.is(result.queueNs, 7);
  t.deepEqual(result.timing, timing);
});

test('a request past its deadline fails DEADLINE_EXCEEDED naming its model, and the device is told to drop it', async (t) => {
  const { link: l, sent } = link();
  const err = await stowageError(t, inferOn(l, request(nowMs() + 20), undefined));
  t.is(err.code, 'STOWAGE_DEADLINE_EXCEEDED');
  t.regex(err.message, /"m"/);
  t.deepEqual(sent.map((s) => s.msg.type), ['infer', 'cancel']);
  t.is(sent[1].msg.id, sent[0].msg.id);
});

test('a request without a deadline waits no longer than the link\'s wait bound', async (t) => {
  const { link: l, sent } = link({ waitBoundMs: 20 });
  const started = nowMs();
  t.is((await stowageError(t, inferOn(l, request(), undefined))).code, 'STOWAGE_DEADLINE_EXCEEDED');
  t.true(nowMs() - started >= 15);
  t.deepEqual(sent.map((s) => s.msg.type), ['infer', 'cancel']);
});

test('a client that goes cancels its request on the device; one gone before it was sent, or refused by the link, is never sent', async (t) => {
  const { link: l, sent } = link();
  const client = new AbortController();
  const answer = inferOn(l, request(), client.signal);
  client.abort();
  t.is((await stowageError(t, answer)).code, 'STOWAGE_CANCELLED');
  t.deepEqual(sent.map((s) => s.msg.type), ['infer', 'cancel']);

  const gone = new AbortController();
  gone.abort();
  t.is((await stowageError(t, inferOn(l, request(), gone.signal))).code, 'STOWAGE_CANCELLED');
  const refusing = link({ refused: errors.deviceUnavailable(2, 'it has stopped') });
  const err = await stowageError(t, inferOn(refusing.link, request(), undefined));
  t.regex(err.message, /device 2 is unavailable: it has stopped/);
  t.is(sent.length, 2, 'nothing more sent');
  t.is(refusing.sent.length, 0);
});
