// Calls waiting for another thread's answer (shared/thread-messages.ts, PendingCalls): each settles exactly once,
// by its answer, its timer or failAll, and an answer after that is refused (returns false).
import test from 'ava';
import { PendingCalls } from '../../../dist/shared/thread-messages.js';

test('a call settles once: by its answer, then nothing else counts', async (t) => {
  const calls = new PendingCalls();
  const answer = calls.wait(1, 10_000, () => new Error('timed out'));
  t.is(calls.size, 1);
  t.true(calls.resolve(1, 'done'));
  t.false(calls.resolve(1, 'again'), 'a second answer is refused');
  t.false(calls.reject(1, new Error('late')));
  t.is(await answer, 'done');
  t.is(calls.size, 0);
});

test('a call not answered in time fails with the timeout\'s error, and its answer after is refused', async (t) => {
  const calls = new PendingCalls();
  let told = 0;
  const answer = calls.wait(7, 20, () => {
    told++;
    return new Error('no answer within 20 ms');
  });
  await t.throwsAsync(answer, { message: 'no answer within 20 ms' });
  t.is(told, 1);
  t.false(calls.resolve(7, 'too late'));
  t.is(calls.size, 0);
});

test('failAll fails every waiting call with one error and leaves none', async (t) => {
  const calls = new PendingCalls();
  const waiting = [1, 2, 3].map((id) => calls.wait(id, 10_000, () => new Error('timed out')));
  calls.reject(2, new Error('its own'));
  calls.failAll(new Error('the worker went'));
  const settled = await Promise.allSettled(waiting);
  t.deepEqual(settled.map((s) => /** @type {PromiseRejectedResult} */ (s).reason.message), ['the worker went', 'its own', 'the worker went']);
  t.is(calls.size, 0);
});
