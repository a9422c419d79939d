// When a supervisor gives up restarting a worker (shared/restarts.ts): after `limit` crashes in a
// row; a sign of health between them starts the count again.
import test from 'ava';
import { ConsecutiveCrashes } from '../../../dist/shared/restarts.js';

test('restarts until the limit of crashes in a row; health in between starts the count again', (t) => {
  const crashes = new ConsecutiveCrashes(3);
  t.true(crashes.crashed());
  t.true(crashes.crashed());
  crashes.healthy();
  t.is(crashes.count, 0);
  t.deepEqual([crashes.crashed(), crashes.crashed(), crashes.crashed()], [true, true, false], 'the third in a row is the last');
  t.is(crashes.count, 3);
});
