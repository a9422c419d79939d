// Routing policies (routing/routing.ts): round robin in turn; least outstanding to the fewest in
// flight, ties taken in turn rather than always by the first candidate.
import test from 'ava';
import { Router } from '../../../dist/routing/routing.js';

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
