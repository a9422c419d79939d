// A model's capacity at full batches from its learned costs (actors/device/execution-costs.ts
// fullBatchRate), what a node reports as window_capacity: the cost line taken to the largest batch,
// the largest learned size when the line cannot be trusted, nothing when nothing is learned.
import test from 'ava';
import { fullBatchRate } from '../../../../dist/actors/device/execution-costs.js';

test('two or more learned sizes: the line (a fixed cost plus a cost per row) taken to the largest batch', (t) => {
  // 2 ms + 0.25 ms a row, learned at batches of 1 to 4 only: 16 rows take 6 ms, 2,667 rows a second.
  const costs = [1, 2, 4].map((b) => ({ batchSize: b, ms: 2 + 0.25 * b }));
  t.is(Math.round(fullBatchRate(costs, 16)), 2667);
  // The largest learned size alone would say 1,333: a model spread thin runs small batches.
  t.is(Math.round(fullBatchRate([costs[2]], 16)), 1333);
  // Noisy points: least squares, not the two ends.
  const noisy = [{ batchSize: 1, ms: 2.3 }, { batchSize: 2, ms: 2.4 }, { batchSize: 8, ms: 4.1 }, { batchSize: 4, ms: 2.9 }];
  const rate = fullBatchRate(noisy, 16);
  t.true(rate > 2400 && rate < 2900, `${rate}`);
});

test('one size, a line that falls, no larger batch allowed or nothing learned: what was measured, or 0', (t) => {
  t.is(fullBatchRate([], 16), 0);
  t.is(fullBatchRate([{ batchSize: 4, ms: 0 }], 16), 0, 'a cost of 0 ms says nothing');
  t.is(fullBatchRate([{ batchSize: 4, ms: 8 }], 16), 500);
  // Larger batches measured cheaper than smaller ones: the line is not trusted; the largest size's rate.
  t.is(fullBatchRate([{ batchSize: 1, ms: 5 }, { batchSize: 8, ms: 4 }], 16), 2000);
  // The model's largest batch is the one learned (or unbounded: Infinity), nothing to extrapolate to.
  t.is(fullBatchRate([{ batchSize: 1, ms: 2.25 }, { batchSize: 8, ms: 4 }], 8), 2000);
  t.is(fullBatchRate([{ batchSize: 1, ms: 2.25 }, { batchSize: 8, ms: 4 }], Infinity), 2000);
  // A line through 0 (a CPU's cost proportional to rows): the same rate at every batch.
  t.is(Math.round(fullBatchRate([{ batchSize: 1, ms: 1 }, { batchSize: 4, ms: 4 }], 32)), 1000);
});
