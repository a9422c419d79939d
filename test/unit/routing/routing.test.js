// Routing policies (routing/routing.ts): round robin in turn; least outstanding to the fewest in
// flight, ties taken in turn rather than always by the first candidate; weighted turns in
// proportion, interleaved, per key.
import test from 'ava';
import { Router, WeightedTurns } from '../../../dist/routing/routing.js';

test('round_robin takes every candidate in turn', (t) => {
  const router = new Router('round_robin');
  const nodes = [{ id: 'a', inflight: 0 }, { id: 'b', inflight: 9 }, { id: 'c', inflight: 0 }];
  t.deepEqual(Array.from({ length: 6 }, () => router.pick(nodes).id), ['a', 'b', 'c', 'a', 'b', 'c']);
});

test('least_outstanding takes the fewest in flight, and spreads ties in turn', (t) => {
  const router = new Router('least_outstanding');
  const nodes = [{ id: 'a', inflight: 0 }, { id: 'b', inflight: 0 }, { id: 'c', inflight: 0 }];
  const idle = Array.from({ length: 6 }, () => router.pick(nodes).id);
  t.deepEqual([...idle].sort(), ['a', 'a', 'b', 'b', 'c', 'c'], `idle candidates share the calls: ${idle}`);
  nodes[0].inflight = 3;
  nodes[2].inflight = 1;
  t.deepEqual(Array.from({ length: 4 }, () => router.pick(nodes).id), ['b', 'b', 'b', 'b'], 'the least busy whatever the turn');
  t.throws(() => router.pick([]), { message: /at least one candidate/ });
});

test('weighted turns give each candidate its share, interleaved, each key its own turns', (t) => {
  const turns = new WeightedTurns();
  const picks = Array.from({ length: 400 }, () => turns.pick('m', ['a', 'b'], [0.75, 0.25]));
  t.is(picks.filter((i) => i === 0).length, 300);
  t.deepEqual(picks.slice(0, 8), [0, 0, 1, 0, 0, 0, 1, 0], 'spread out, not three in a row then one');
  // Any run of picks stays within one of each share.
  for (let n = 1; n <= 40; n++) t.true(Math.abs(picks.slice(0, n).filter((i) => i === 1).length - n / 4) <= 1, `after ${n}`);
  // Another key keeps its own credits; forgetting one starts it afresh.
  t.is(turns.pick('other', ['x', 'y', 'z'], [1, 1, 2]), 2);
  turns.forget('m');
  t.is(turns.pick('m', ['a', 'b'], [0.25, 0.75]), 1);
});
