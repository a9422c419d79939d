// The device's tally of its executions (actors/device/execution-costs.ts) by itself: executions are
// summed per model and executed batch size, cold loads kept one by one, hits counted; one report
// goes a while after the first execution not yet reported, or at once when asked (before a
// reply); nothing goes when nothing ran. And a report read by Statistics (node/statistics.ts)
// counts as the same executions counted one by one would.
import test from 'ava';
import { setTimeout as sleep } from 'node:timers/promises';
import { ExecutionTally } from '../../../../dist/actors/device/execution-costs.js';
import { Statistics } from '../../../../dist/node/statistics.js';

/** @typedef {import('../../../../dist/shared/channels/device.js').ExecutionReport} ExecutionReport */

/** @param {number} rows @param {number} size @param {number} inferNs */
const timing = (rows, size, inferNs) => ({ computeInputNs: 10, computeInferNs: inferNs, computeOutputNs: 30, batchRows: rows, executedBatchSize: size, requests: rows });
const hit = { hit: true, loadedBytes: 0, diskBytes: 0, loadMs: 0, evicted: [] };
const miss = { hit: false, loadedBytes: 4096, diskBytes: 0, loadMs: 2, evicted: ['old'] };
const memory = { residentBytes: 4096, logicalBytes: 4096, budgetBytes: 8192 };

test('executions are summed per model and batch size, and one report posts them all', (t) => {
  /** @type {ExecutionReport[]} */
  const reports = [];
  const tally = new ExecutionTally((r) => reports.push(r), 60_000);
  tally.add({ model: 'a', timing: timing(3, 4, 100), queued: 5, load: miss, memory });
  tally.add({ model: 'a', timing: timing(4, 4, 200), queued: 2, load: hit, memory: null });
  tally.add({ model: 'b', timing: timing(1, 1, 50), queued: 0, load: null, memory: null });
  tally.add({ model: 'a', timing: timing(1, 1, 70), queued: 1, load: hit, memory: null });
  t.is(reports.length, 0, 'nothing posted before the report (the timer is a minute here)');
  tally.report();
  t.is(reports.length, 1);
  const [r] = reports;
  t.is(r.executions, 4);
  t.is(r.busyNs, 420);
  t.is(r.queued, 1, 'the queue after the last execution');
  t.deepEqual(new Map(r.rows), new Map([[3, 1], [4, 1], [1, 2]]));
  const a = r.models.find((m) => m.model === 'a');
  t.is(a?.executions, 3);
  t.is(a?.weightHits, 2);
  t.deepEqual(a?.batches.sort((x, y) => x.size - y.size), [
    { size: 1, count: 1, computeInputNs: 10, computeInferNs: 70, computeOutputNs: 30 },
    { size: 4, count: 2, computeInputNs: 20, computeInferNs: 300, computeOutputNs: 60 },
  ]);
  t.deepEqual(r.loads, [{ model: 'a', load: miss, memory }], 'a cold load is kept as it happened');
  tally.report();
  t.is(reports.length, 1, 'an empty tally posts nothing');
  tally.add({ model: 'b', timing: timing(2, 2, 10), queued: 0, load: null, memory: null });
  tally.report();
  t.is(reports[1].executions, 1, 'the tally started again at zero');
  t.deepEqual(reports[1].models.map((m) => m.model), ['b']);
});

test('unasked, one report goes a while after the first execution, counting every execution since', async (t) => {
  /** @type {ExecutionReport[]} */
  const reports = [];
  const tally = new ExecutionTally((r) => reports.push(r), 30);
  for (let i = 0; i < 5; i++) tally.add({ model: 'a', timing: timing(1, 1, 1), queued: 0, load: null, memory: null });
  await sleep(10);
  tally.add({ model: 'a', timing: timing(1, 1, 1), queued: 0, load: null, memory: null });
  t.is(reports.length, 0);
  await sleep(80);
  t.deepEqual(reports.map((r) => r.executions), [6], 'one report for the six');
  await sleep(60);
  t.is(reports.length, 1, 'and none after it while nothing runs');
});

test('Statistics counts a report as the executions in it', (t) => {
  /** @type {ExecutionReport[]} */
  const reports = [];
  const tally = new ExecutionTally((r) => reports.push(r), 60_000);
  tally.add({ model: 'a', timing: timing(3, 4, 100), queued: 5, load: null, memory: null });
  tally.add({ model: 'a', timing: timing(4, 4, 200), queued: 3, load: null, memory: null });
  tally.add({ model: 'a', timing: timing(1, 1, 70), queued: 0, load: null, memory: null });
  tally.report();
  const statistics = new Statistics();
  /** @type {[number, number, number][]} */
  const rows = [];
  statistics.onBatchRows = (device, r, executions) => rows.push([device, r, executions]);
  statistics.recordExecutions(2, reports[0]);
  const s = statistics.snapshot('a');
  t.is(s.execution_count, 3);
  t.deepEqual(s.batch_stats.map((b) => [b.batch_size, b.compute_infer]), [[1, { count: 1, ns: 70 }], [4, { count: 2, ns: 300 }]]);
  t.is(statistics.computeSeconds('a'), 370 / 1e9);
  t.deepEqual(new Map([...statistics.devices()]).get(2), { executions: 3, busyNs: 370, queued: 0 });
  t.deepEqual(rows.sort((x, y) => x[1] - y[1]), [[2, 1, 1], [2, 3, 1], [2, 4, 1]]);
});
