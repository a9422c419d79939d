// Which cold models get their weights copied in beside a run: the scheduler's next ones, at most
// MAX_UPLOADS_AHEAD in flight, never the one running, never at the cost of one waiting ahead; a
// failed copy turns the uploads off for the device, said once.
import test from 'ava';
import { Arena } from '../../../../dist/actors/device/arena.js';
import { CostModel } from '../../../../dist/shared/backlog.js';
import { Scheduler } from '../../../../dist/actors/device/scheduler.js';
import { UploadsAhead } from '../../../../dist/actors/device/uploads-ahead.js';
import { WeightCache } from '../../../../dist/actors/device/weight-cache.js';
import { MAX_UPLOADS_AHEAD } from '../../../../dist/shared/constants.js';

const BYTES = 256;

/** A device with `models` of BYTES each, a budget of `room` of them, fifo so the order is the queue's. */
function device(models = ['a', 'b', 'c', 'd', 'e'], room = 4) {
  let clock = 0;
  const scheduler = new Scheduler({ discipline: 'fifo', maxQueueDepth: 100, maxWaitMs: 60_000, costs: new CostModel(30_000), now: () => clock });
  const cache = new WeightCache(new Arena(BYTES * room), { readTensor: (_s, into) => into.fill(1), compactionInterval: 0, thrashWindowMs: 10_000 });
  for (const m of models) {
    scheduler.setModel(m, { weight: 1, maxBatchRows: 1 });
    cache.add(m, m, 'system', [{ key: m, byteLength: BYTES, file: `/cache/${m}` }]);
  }
  /** @type {unknown[]} */
  const warnings = [];
  // Instances are plain strings here: the device's InstanceKey is a branded string.
  const key = (/** @type {string} */ m) => /** @type {import('../../../../dist/shared/model-spec.js').InstanceKey} */ (/** @type {unknown} */ (m));
  const uploads = new UploadsAhead(/** @type {any} */ (cache), /** @type {any} */ (scheduler), (err) => warnings.push(err));
  let id = 0;
  const enqueue = (/** @type {string} */ m) => scheduler.enqueue(/** @type {any} */ ({ id: ++id, instance: m, rows: 1, enqueuedAtMs: clock++, deadlineMs: Infinity }));
  const start = (/** @type {string} */ running) => uploads.start(key(running));
  return { scheduler, cache, uploads, start, enqueue, warnings };
}

test('the next cold models queued are uploaded, at most MAX_UPLOADS_AHEAD, never the one running', (t) => {
  const { cache, uploads, start, enqueue } = device();
  t.is(uploads.issuedBeforeRun, false, 'host memory: copied while the run goes on a libuv thread');
  cache.ensureResident('a');
  for (const m of ['a', 'b', 'c', 'd']) enqueue(m);
  t.is(start('a'), MAX_UPLOADS_AHEAD);
  t.true(cache.isUploading('b') && cache.isUploading('c'));
  t.false(cache.isUploading('d'), 'no more than MAX_UPLOADS_AHEAD in flight');
  t.true(cache.isResident('a'), 'the running model is kept');
  t.is(start('a'), 0, 'the next round waits for those to land');
  cache.ensureResident('b');
  t.is(start('b'), 1, 'one landed: one more starts');
  t.true(cache.isUploading('d'));
});

test('an upload that would evict a model waiting ahead of it does not start, and none behind it jumps ahead', (t) => {
  const { cache, start, enqueue } = device(['a', 'b', 'c', 'd'], 2);
  cache.ensureResident('a');
  cache.ensureResident('b');
  // Queued: b (resident, ahead), then c (cold), then d (cold). Running: a. Room for 2: only by evicting a or b.
  for (const m of ['b', 'c', 'd']) enqueue(m);
  t.is(start('a'), 0);
  t.false(cache.isUploading('c') || cache.isUploading('d'));
  t.true(cache.isResident('a') && cache.isResident('b'), 'nothing evicted');
});

test('a failed upload turns uploads beside execution off for the device, said once', (t) => {
  const { cache, start, enqueue, warnings } = device();
  cache.beginUpload = () => {
    throw new Error('cudaMemcpyAsync: an illegal memory access was encountered (CUDA error 700)');
  };
  for (const m of ['b', 'c']) enqueue(m);
  t.is(start('a'), 0);
  t.is(start('a'), 0);
  t.is(warnings.length, 1);
  t.regex(String(warnings[0]), /CUDA error 700/);
});
