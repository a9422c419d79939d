// The gateway's ModelStatistics: every node's entry for a model summed into one.
import test from 'ava';
import { mergeStatistics } from '../../../dist/remote/statistics-merge.js';

const duration = (/** @type {number} */ count, /** @type {number} */ ns) => ({ count: String(count), ns: String(ns) });
/**
 * A node's ModelStatistics entry, as protobufjs decodes it.
 * @param {string} name
 * @param {number} n
 * @param {number} last
 */
const entry = (name, n, last) => ({
  name, version: '1', last_inference: String(last), inference_count: String(n * 2), execution_count: String(n),
  inference_stats: { success: duration(n, n * 1000), fail: duration(0, 0), queue: duration(n, 10) },
  batch_stats: [{ batch_size: '1', compute_infer: duration(n, n * 500) }, { batch_size: String(n), compute_infer: duration(1, 7) }],
  memory_usage: [],
});

test('counts and durations add up, batch sizes merge, the latest inference wins, one entry per model', (t) => {
  /** @type {any[]} ModelStatistics entries, as protobufjs decodes them */
  const merged = mergeStatistics([entry('a', 2, 100), entry('b', 1, 5), entry('a', 3, 300)]);
  t.deepEqual(merged.map((m) => m.name), ['a', 'b']);
  const a = merged[0];
  t.is(a.inference_count, '10');
  t.is(a.execution_count, '5');
  t.is(a.last_inference, '300');
  t.deepEqual(a.inference_stats.success, { count: '5', ns: '5000' });
  t.deepEqual(a.batch_stats.map((/** @type {any} */ b) => [b.batch_size, b.compute_infer.count]), [['1', '5'], ['2', '1'], ['3', '1']]);
  t.is(merged[1].inference_count, '2');
  t.is(mergeStatistics([{ ...entry('big', 1, 1), inference_count: '18446744073709551615' }, { ...entry('big', 1, 1), inference_count: '1' }])[0].inference_count, '18446744073709551616');
});
