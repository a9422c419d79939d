// Waits past one Node timer's reach (2^31−1 ms), and gRPC timeouts cut to what grpc-js's timer holds.
import test from 'ava';
import { after, MAX_TIMER_MS, MAX_TIMER_SECONDS, timerDelay } from '../../../dist/shared/timers.js';
import { PendingCalls } from '../../../dist/shared/thread-messages.js';
import { cappedTimeout } from '../../../dist/protocol/edge.js';

const DAY_MS = 86_400_000;
const wait = (/** @type {number} */ ms) => new Promise((resolve) => setTimeout(resolve, ms));

test('a wait longer than one timer holds does not fire at once; a short one fires on time', async (t) => {
  let long = false;
  let never = false;
  let short = false;
  const timers = [after(30 * DAY_MS, () => { long = true; }), after(Infinity, () => { never = true; }), after(20, () => { short = true; })];
  await wait(60);
  t.false(long);
  t.false(never);
  t.true(short);
  for (const timer of timers) timer.clear();
});

test('a cleared wait never fires', async (t) => {
  let fired = false;
  after(10, () => { fired = true; }).clear();
  await wait(40);
  t.false(fired);
});

test('a call waiting 30 days is still waiting, and is answered', async (t) => {
  const calls = new PendingCalls();
  const answer = calls.wait(1, 30 * DAY_MS, () => new Error('timed out'));
  await wait(30);
  t.is(calls.size, 1);
  calls.resolve(1, 'ok');
  t.is(await answer, 'ok');
});

test('one timer\'s limits', (t) => {
  t.is(MAX_TIMER_MS, 2 ** 31 - 1);
  t.is(MAX_TIMER_SECONDS, 2_147_483);
  t.is(timerDelay(-5), 0);
  t.is(timerDelay(Infinity), MAX_TIMER_MS);
  t.is(timerDelay(1234), 1234);
});

test('gRPC timeouts past one timer are cut to the longest it holds; others are left as they are', (t) => {
  t.is(cappedTimeout('600H'), '2147483S', '25 days');
  t.is(cappedTimeout('99999999S'), '2147483S');
  t.is(cappedTimeout('596H'), '596H', '24.8 days fits');
  t.is(cappedTimeout('2147483647m'), '2147483647m', 'not a timeout grpc-js reads (over 8 digits): left for it to refuse');
  t.is(cappedTimeout('100m'), '100m');
  t.is(cappedTimeout('5n'), '5n');
});
