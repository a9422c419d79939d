// A meta model's ctx.infer on the hook thread's side of its MessagePort: every pending sub-call
// settles exactly once, by its reply, its timeout, or the port closing.
import { MessageChannel } from 'node:worker_threads';
import { once } from 'node:events';
import test from 'ava';
import { subCaller } from '../../../../dist/actors/hooks/sub-calls.js';

/** @typedef {import('../../../../dist/shared/channels/hooks.js').SubCall} SubCall */

/**
 * The main thread's end: each sub-call it receives, as it arrives.
 * @param {import('ava').ExecutionContext} t
 */
function mainSide(t) {
  const channel = new MessageChannel();
  t.teardown(() => channel.port1.close());
  /** @type {SubCall[]} */
  const calls = [];
  /** @type {((call: SubCall) => void)[]} */
  const arrived = [];
  channel.port1.on('message', (/** @type {SubCall} */ call) => {
    calls.push(call);
    arrived.shift()?.(call);
  });
  const next = () => /** @type {Promise<SubCall>} */ (new Promise((resolve) => arrived.push(resolve)));
  return { port: channel.port1, infer: subCaller(channel.port2, 10_000), calls, next, hookPort: channel.port2 };
}

const scores = { scores: { datatype: 'FP32', shape: [2], data: new Float32Array([0.25, 0.75]) } };

test('a reply resolves the call with hook tensors; a failure rejects with the sub-model\'s code and status', async (t) => {
  const main = mainSide(t);
  const answered = main.infer('classifier', scores, { outputs: ['label'] });
  const call = await main.next();
  t.like(call, { type: 'infer', model: 'classifier', outputs: ['label'] });
  t.deepEqual(call.tensors.map((x) => [x.name, x.datatype, x.shape]), [['scores', 'FP32', [2]]]);
  const label = new Uint8Array(new BigInt64Array([7n]).buffer);
  main.port.postMessage({ type: 'inferred', id: call.id, tensors: [{ name: 'label', datatype: 'INT64', shape: [1], data: label }] });
  const { label: out } = await answered;
  t.deepEqual([out.datatype, out.shape, [.../** @type {BigInt64Array} */ (out.data)]], ['INT64', [1], [7n]]);

  const refused = main.infer('ghost', scores);
  const second = await main.next();
  main.port.postMessage({ type: 'inferFailed', id: second.id, error: { code: 'STOWAGE_MODEL_NOT_FOUND', message: 'model "ghost" is not in the repository' } });
  const err = await t.throwsAsync(refused, { message: 'model "ghost" is not in the repository' });
  t.like(err, { code: 'STOWAGE_MODEL_NOT_FOUND', status: 5 });
});

test('a call with no answer rejects DEADLINE_EXCEEDED at its timeout, and a late answer is ignored', async (t) => {
  const channel = new MessageChannel();
  t.teardown(() => channel.port1.close());
  const infer = subCaller(channel.port2, 50);
  const [call] = await Promise.all([once(channel.port1, 'message').then(([c]) => c), t.throwsAsync(infer('slow', scores), { message: /ctx\.infer\("slow"\) had no answer within 50 ms/ }).then((err) => t.like(err, { status: 4 }))]);
  // The answer arrives after the timeout: nothing is pending under its id any more.
  channel.port1.postMessage({ type: 'inferred', id: call.id, tensors: [] });
  const again = infer('slow', scores);
  const [next] = await once(channel.port1, 'message');
  t.not(next.id, call.id, 'ids are never reused');
  channel.port1.postMessage({ type: 'inferred', id: next.id, tensors: [] });
  t.deepEqual(await again, {});
});

test('the port closing rejects every pending call at once with UNAVAILABLE', async (t) => {
  const main = mainSide(t);
  const pending = [main.infer('a', scores), main.infer('b', scores)];
  await main.next();
  await main.next();
  t.is(main.calls.length, 2);
  main.port.close(); // the main thread answered the meta request, or its side is gone
  for (const p of pending) {
    const err = await t.throwsAsync(p, { message: /answered or abandoned while this sub-call was in flight/ });
    t.like(err, { code: 'STOWAGE_DEVICE_UNAVAILABLE', status: 14 });
  }
});

test('a malformed tensor rejects at once and sends nothing', async (t) => {
  const main = mainSide(t);
  await t.throwsAsync(main.infer('classifier', { scores: { datatype: 'FP32', shape: [3], data: new Float32Array(2) } }),
    { message: 'ctx.infer("classifier"): bad tensor "scores": shape [3] needs 3 elements, data has 2' });
  await t.throwsAsync(main.infer('classifier', { scores: { datatype: 'FP99', shape: [1], data: [1] } }), { message: /not a KServe datatype/ });
  // A good call after them is the first the main thread sees.
  const ok = main.infer('classifier', scores);
  const call = await main.next();
  t.is(main.calls.length, 1);
  main.port.postMessage({ type: 'inferred', id: call.id, tensors: [] });
  await ok;
});
