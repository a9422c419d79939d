// endpoints.edge_threads: a number as given, `auto` by the cores (src/config/edges.ts).
import test from 'ava';
import { edgeThreads } from '../../../dist/config/edges.js';

test('auto keeps the main thread alone below 4 cores, then one edge per 4 cores, at most 8', (t) => {
  t.deepEqual([1, 2, 3, 4, 7, 8, 16, 31, 32, 64, 256].map((cores) => edgeThreads('auto', cores)), [0, 0, 0, 1, 1, 2, 4, 7, 8, 8, 8]);
});

test('a number is taken as given, whatever the cores', (t) => {
  t.is(edgeThreads(0, 64), 0);
  t.is(edgeThreads(3, 2), 3);
});
