// A draining server's close put off while clients are still being refused (shared/lifecycle.ts
// drainedQuietly), on a fake clock: busy while calls are in flight, then a quiet moment after the
// last answer and after each refusal, never longer than the bound.
import test from 'ava';
import { drainedQuietly } from '../../../dist/shared/lifecycle.js';

test('drained quietly: busy in flight, then quietMs after the last answer and after each refusal, at most maxQuietMs', (t) => {
  const clock = { ms: 1000 };
  let inflight = 2;
  let refusedAt = 0;
  const busy = drainedQuietly(() => inflight, () => refusedAt, 100, 1000, () => clock.ms);
  t.true(busy(), 'calls in flight');
  inflight = 0;
  t.true(busy(), 'the last answer just went: a client may send its next call now');
  clock.ms += 99;
  t.true(busy());
  clock.ms += 1;
  t.false(busy(), 'quiet for 100 ms: close');
  // Refusals keep it open 100 ms after each, up to a second after the last answer.
  const idle = clock.ms - 100;
  for (let at = clock.ms; at < idle + 1200; at += 50) {
    clock.ms = at;
    refusedAt = at;
    t.is(busy(), at - idle < 1000, `${at - idle} ms after the last answer, a call refused just now`);
  }
  // A new call in flight starts it over.
  inflight = 1;
  t.true(busy());
  inflight = 0;
  refusedAt = 0;
  t.true(busy(), 'its answer just went');
  clock.ms += 100;
  t.false(busy());
});
