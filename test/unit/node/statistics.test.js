// Statistics (node/statistics.ts) over every thread's counts in shared memory (shared/request-counters.ts):
// what an edge or the main thread counted is in ModelStatistics and the metrics' per-model counters
// as soon as it is counted; a freed slot's counts become the model's own and the slot starts again
// at zero, so a reused slot never counts for the wrong model.
import test from 'ava';
import { Statistics } from '../../../dist/node/statistics.js';
import { RequestCounters } from '../../../dist/shared/request-counters.js';

const timing = { computeInputNs: 100, computeInferNs: 200, computeOutputNs: 300, batchRows: 2, executedBatchSize: 2, requests: 1 };

test('an edge\'s counts are read with the main thread\'s, folded when the slot is freed, and the slot reused clean', (t) => {
  const main = RequestCounters.create(2, 2); // two edges and the main thread
  main.grow(); // the counters of the first segment of lease slots
  const edge0 = new RequestCounters(main.shape, 0);
  const edge1 = new RequestCounters(main.shape, 1);
  const statistics = new Statistics();
  /** @type {[string, number][]} */
  let slots = [['a', 3]];
  statistics.shareCounters(main, () => slots);

  main.succeeded(3, 1, 1000, 10, timing); // the main thread's own request, in its row
  edge0.routed(3, 1);
  edge0.succeeded(3, 2, 2000, 20, timing);
  edge1.routed(3, 0);
  edge1.failed(3, 'CANCELED', 500);
  const s = statistics.snapshot('a');
  t.is(s.inference_count, 3, 'rows: 1 by the main thread, 2 by an edge');
  t.deepEqual(s.inference_stats.success, { count: 2, ns: 3000 });
  t.deepEqual(s.inference_stats.fail, { count: 1, ns: 500 });
  t.deepEqual(s.inference_stats.queue, { count: 2, ns: 30 });
  t.deepEqual(s.inference_stats.compute_infer, { count: 2, ns: 400 });
  const [[model, merged]] = [...statistics.models()];
  t.is(model, 'a');
  t.is(merged.failures.get('CANCELED'), 1, 'the metrics see the edge\'s failure by reason');
  t.deepEqual([...(statistics.routes().get('a') ?? [])], [[0, 1], [1, 1]]);

  // The slot is freed: its counts become a's own; the slot, reused for b, starts at zero.
  statistics.fold('a', 3);
  slots = [['b', 3]];
  edge0.succeeded(3, 1, 700, 7, timing);
  t.deepEqual(statistics.snapshot('a').inference_stats.success, { count: 2, ns: 3000 }, 'a keeps what it counted');
  t.deepEqual(statistics.snapshot('b').inference_stats.success, { count: 1, ns: 700 }, 'b counts only its own');
  t.deepEqual([...(statistics.routes().get('a') ?? [])], [[0, 1], [1, 1]], 'a\'s routes kept after the fold');
  t.deepEqual([...statistics.models()].map(([m]) => m).sort(), ['a', 'b']);
});

test('within a scrape every family reads the models once; outside one, and at the next scrape, they read the counters as they are', async (t) => {
  const main = RequestCounters.create(1, 1);
  main.grow();
  const edge = new RequestCounters(main.shape, 0);
  const statistics = new Statistics();
  statistics.shareCounters(main, () => [['a', 0]]);
  const successes = () => [...statistics.models()].find(([m]) => m === 'a')?.[1].success.count ?? 0;
  edge.succeeded(0, 1, 1000, 10, timing);
  const seen = await statistics.scraping(async () => {
    const first = successes();
    edge.succeeded(0, 1, 1000, 10, timing); // counted while the scrape renders
    await new Promise((resolve) => setImmediate(resolve));
    return [first, successes()];
  });
  t.deepEqual(seen, [1, 1], 'one reading for the whole scrape');
  t.is(successes(), 2, 'outside a scrape: as counted now');
  t.is(await statistics.scraping(async () => successes()), 2, 'the next scrape reads anew');
});
