// Operations called across threads (shared/operations.ts): every operation of one thread becomes a
// call another thread runs on its own (callOperation), its name and request carried together over
// a real MessagePort, its reply or error coming back.
import { MessageChannel } from 'node:worker_threads';
import test from 'ava';
import { callOperation, OPERATION_NAMES, operationsVia } from '../../../dist/shared/operations.js';

test('an operation called through operationsVia runs on the other side with its request, and answers or fails there', async (t) => {
  const { port1: caller, port2: callee } = new MessageChannel();
  t.teardown(() => caller.close());
  /** @type {any[]} */
  const seen = [];
  // The side that has the operations: two of them real, the rest failing.
  const ops = /** @type {import('../../../dist/shared/operations.js').Operations} */ (/** @type {unknown} */ (Object.fromEntries(OPERATION_NAMES.map((op) => [op, () => { throw new Error(`${op} is not here`); }]))));
  ops.ModelReady = (req) => ({ ready: req.name === 'digits' });
  ops.ServerLive = () => ({ live: true });
  callee.on('message', async ({ id, call }) => {
    seen.push(call);
    try {
      callee.postMessage({ id, reply: await callOperation(ops, call) });
    } catch (err) {
      callee.postMessage({ id, error: /** @type {Error} */ (err).message });
    }
  });
  let next = 1;
  /** @type {Map<number, { resolve: (v: any) => void, reject: (e: Error) => void }>} */
  const waiting = new Map();
  caller.on('message', ({ id, reply, error }) => {
    const w = waiting.get(id);
    waiting.delete(id);
    if (error) w?.reject(new Error(error));
    else w?.resolve(reply);
  });
  const remote = operationsVia((call) => new Promise((resolve, reject) => {
    const id = next++;
    waiting.set(id, { resolve, reject });
    caller.postMessage({ id, call });
  }));
  t.deepEqual(await remote.ModelReady({ name: 'digits', version: '' }), { ready: true });
  t.deepEqual(await remote.ServerLive(), { live: true });
  await t.throwsAsync(Promise.resolve(remote.ServerReady()), { message: 'ServerReady is not here' });
  t.deepEqual(seen, [{ op: 'ModelReady', request: { name: 'digits', version: '' } }, { op: 'ServerLive', request: undefined }, { op: 'ServerReady', request: undefined }]);
  await t.throwsAsync(callOperation(ops, /** @type {any} */ ({ op: 'NoSuchRpc', request: {} })), { message: 'no operation "NoSuchRpc"' });
});
