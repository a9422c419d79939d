// The scheduler as a unit: a fake clock, a fake executor that "runs" a batch by advancing the clock
// by the model's cost, and nothing else.
import test from 'ava';
import { Scheduler } from '../../../../dist/actors/device/scheduler.js';
import { Backlog, CostModel, PROBE_AFTER_MS } from '../../../../dist/shared/backlog.js';
import { stowageThrows } from '../../../helpers/errors.js';

/**
 * @param {{ discipline?: 'fair' | 'fifo' | 'edf', maxQueueDepth?: number, maxWaitMs?: number, halflifeMs?: number, resident?: (model: string) => boolean,
 *   priorityLevels?: number, defaultPriority?: number, lowerPriorityShare?: number, guard?: Backlog }} [options]
 */
function harness({ discipline = 'fair', maxQueueDepth = 10_000, maxWaitMs = 60_000, halflifeMs = 30_000, resident, priorityLevels, defaultPriority, lowerPriorityShare, guard } = {}) {
  const clock = { ms: 0 };
  const scheduler = new Scheduler({ discipline, maxQueueDepth, maxWaitMs, costs: new CostModel(halflifeMs), now: () => clock.ms, resident, priorityLevels, defaultPriority, lowerPriorityShare, guard });
  let id = 0;
  /**
   * @param {string} model
   * @param {{ rows?: number, deadlineMs?: number, priority?: number }} [options]
   */
  const enqueue = (model, { rows = 1, deadlineMs = Infinity, priority } = {}) => {
    const ticket = { id: ++id, instance: model, rows, enqueuedAtMs: clock.ms, deadlineMs, ...(priority === undefined ? {} : { priority }) };
    scheduler.enqueue(ticket);
    return ticket;
  };
  /** Pick, "execute" for costMs(model, rows), charge; returns the pick. */
  /**
   * @param {(model: string, rows: number) => number} costMs
   */
  const step = (costMs) => {
    /** @type {ReturnType<typeof scheduler.next> & { ms?: number }} */
    const pick = scheduler.next();
    if (pick.batch.length) {
      const model = pick.batch[0].instance;
      const rows = pick.batch.reduce((a, t) => a + t.rows, 0);
      const ms = costMs(model, rows);
      clock.ms += ms;
      scheduler.charge(model, rows, ms);
      pick.ms = ms;
    }
    return pick;
  };
  return { clock, scheduler, enqueue, step };
}

test('fair: under a flood on every model, device time is shared by weight within 10%', (t) => {
  const { scheduler, enqueue, step } = harness();
  /** @type {Record<string, number>} */
  const weights = { a: 1, b: 2, c: 1 };
  /** @type {Record<string, number>} */
  const cost = { a: 2, b: 1, c: 5 }; // ms per execution: shares are of time, not of executions
  for (const [m, weight] of Object.entries(weights)) scheduler.setModel(m, { weight, maxBatchRows: 1 });
  for (const m of Object.keys(weights)) for (let i = 0; i < 50; i++) enqueue(m);
  /** @type {Record<string, number>} */
  const time = { a: 0, b: 0, c: 0 };
  for (let i = 0; i < 5000; i++) {
    const pick = step((m) => cost[m]);
    const m = pick.batch[0].instance;
    time[m] += pick.ms ?? 0;
    enqueue(m); // keep every queue full
  }
  const total = time.a + time.b + time.c;
  for (const [m, weight] of Object.entries(weights)) {
    const share = time[m] / total;
    const expected = weight / 4;
    t.true(Math.abs(share - expected) / expected < 0.1, `${m}: share ${share.toFixed(3)}, expected ${expected}`);
  }
});

test('fair: a rare model is never starved by a flood on another (waits at most one execution)', (t) => {
  const { clock, scheduler, enqueue, step } = harness();
  scheduler.setModel('flood', { weight: 1, maxBatchRows: 1 });
  scheduler.setModel('rare', { weight: 1, maxBatchRows: 1 });
  for (let i = 0; i < 1000; i++) enqueue('flood');
  const waits = [];
  let nextRareAt = 0;
  while (clock.ms < 20_000) {
    if (clock.ms >= nextRareAt) {
      enqueue('rare');
      nextRareAt += 100;
    }
    const pick = step((m) => (m === 'flood' ? 10 : 3));
    for (const ticket of pick.batch) if (ticket.instance === 'rare') waits.push(clock.ms - (pick.ms ?? 0) - ticket.enqueuedAtMs);
    if (pick.batch[0]?.instance === 'flood') enqueue('flood');
  }
  t.true(waits.length >= 190, `${waits.length} rare requests served`);
  // The stated bound: a rare request waits for at most the one flood execution already running.
  t.true(Math.max(...waits) <= 10, `longest rare wait ${Math.max(...waits)} ms`);
});

test('fair: an idle model banks no credit while others run', (t) => {
  const { scheduler, enqueue, step } = harness();
  scheduler.setModel('a', { weight: 1, maxBatchRows: 1 });
  scheduler.setModel('b', { weight: 1, maxBatchRows: 1 });
  for (let i = 0; i < 100; i++) enqueue('a');
  for (let i = 0; i < 100; i++) step(() => 1); // a runs alone for 100 ms
  for (let i = 0; i < 20; i++) { enqueue('a'); enqueue('b'); }
  const order = [];
  for (let i = 0; i < 20; i++) order.push(step(() => 1).batch[0].instance);
  // b re-entered at a's level: they alternate instead of b running 20 times in a row.
  t.true(order.filter((m) => m === 'a').length >= 9, order.join(''));
});

test('fair with the weight cache: a resident model may go before a cold one, by at most that one\'s coming on (its last load and one run)', (t) => {
  // A budget for one model: whichever ran last is resident, as LRU with room for one leaves it.
  let onDevice = 'warm';
  const { scheduler, enqueue, step } = harness({ resident: (m) => m === onDevice });
  scheduler.setModel('warm', { weight: 1, maxBatchRows: 1 });
  scheduler.setModel('cold', { weight: 1, maxBatchRows: 1 });
  // Loaded once each before (cold's load took 5 ms, warm's 6, charged to them); cold is off the device.
  scheduler.chargeTime('cold', 5);
  scheduler.chargeTime('warm', 6);
  for (let i = 0; i < 40; i++) { enqueue('warm'); enqueue('cold'); }
  let order = '';
  for (let i = 0; i < 80; i++) {
    const model = step(() => 1).batch[0].instance;
    order += model[0];
    onDevice = model;
  }
  // cold is least charged (5 against 6) but off the device: warm runs while its charge is within
  // what cold's coming on costs (its 5 ms load and one 1 ms run: 6..11), then cold comes on and
  // runs until it leads by warm's 6 + 1 ms, and so on: runs of a dozen executions instead of a
  // cold load at every turn, and a lead never beyond one coming on (a run at most 2 x 7 + 1 long).
  t.is(order.slice(0, 7), 'wwwwwwc', order);
  const runs = order.match(/w+|c+/g) ?? [];
  t.true(runs.length >= 6 && runs.every((r) => r.length <= 15), `runs ${runs.map((r) => r.length).join(', ')}`);
  t.is([...order].filter((m) => m === 'w').length, 40);
});

test('fair with the weight cache: without a cold load seen, or with every model resident, the order is plain fair', (t) => {
  for (const resident of [() => true, (/** @type {string} */ m) => m === 'a']) {
    const { scheduler, enqueue, step } = harness({ resident });
    scheduler.setModel('a', { weight: 1, maxBatchRows: 1 });
    scheduler.setModel('b', { weight: 1, maxBatchRows: 1 });
    for (let i = 0; i < 5; i++) { enqueue('a'); enqueue('b'); }
    const order = [];
    for (let i = 0; i < 10; i++) order.push(step(() => 1).batch[0].instance);
    t.is(order.join(''), 'ababababab');
  }
});

test('fifo: the oldest request across models runs first', (t) => {
  const { clock, scheduler, enqueue, step } = harness({ discipline: 'fifo' });
  for (const m of ['x', 'y', 'z']) scheduler.setModel(m, { weight: 1, maxBatchRows: 1 });
  for (const m of ['y', 'x', 'z', 'x', 'y']) {
    enqueue(m);
    clock.ms += 1;
  }
  const order = [];
  while (scheduler.queued) order.push(step(() => 0).batch[0].instance);
  t.deepEqual(order, ['y', 'x', 'z', 'x', 'y']);
});

test('edf: the earliest deadline runs first, across models and within one', (t) => {
  const { scheduler, enqueue, step } = harness({ discipline: 'edf' });
  for (const m of ['x', 'y']) scheduler.setModel(m, { weight: 1, maxBatchRows: 1 });
  const a = enqueue('x', { deadlineMs: 500 });
  const b = enqueue('y', { deadlineMs: 100 });
  const c = enqueue('x', { deadlineMs: 50 });
  const d = enqueue('y', { deadlineMs: 300 });
  const order = [];
  while (scheduler.queued) order.push(step(() => 1).batch[0].id);
  t.deepEqual(order, [c.id, b.id, d.id, a.id]);
});

test('edf: with equal deadlines it behaves like fifo', (t) => {
  const { clock, scheduler, enqueue, step } = harness({ discipline: 'edf', maxWaitMs: 1000 });
  for (const m of ['x', 'y']) scheduler.setModel(m, { weight: 1, maxBatchRows: 1 });
  const ids = [];
  for (const m of ['y', 'x', 'y', 'x']) {
    ids.push(enqueue(m).id);
    clock.ms += 1;
  }
  const order = [];
  while (scheduler.queued) order.push(step(() => 0).batch[0].id);
  t.deepEqual(order, ids);
});

test('edf: a request that cannot finish in time is shed, not run late', (t) => {
  const { clock, scheduler, enqueue, step } = harness({ discipline: 'edf' });
  scheduler.setModel('x', { weight: 1, maxBatchRows: 1 });
  enqueue('x');
  step(() => 40); // learn: x costs 40 ms
  const late = enqueue('x', { deadlineMs: clock.ms + 30 });
  const fine = enqueue('x', { deadlineMs: clock.ms + 100 });
  const pick = scheduler.next();
  t.deepEqual(pick.shed.map((s) => [s.request.id, s.reason]), [[late.id, 'laxity']]);
  t.deepEqual(pick.batch.map((b) => b.id), [fine.id]);
});

test('a model whose every batch has been refused for laxity for PROBE_AFTER_MS runs the next one\'s first request, and learns its cost again', (t) => {
  const { clock, scheduler, enqueue, step } = harness({ discipline: 'fifo' });
  scheduler.setModel('x', { weight: 1, maxBatchRows: 4 });
  enqueue('x');
  step(() => 400); // one slow run (an idle spell's first): x learned at 400 ms, where it takes 10
  const shedAt = (/** @type {number} */ atMs) => {
    clock.ms = atMs;
    const a = enqueue('x', { deadlineMs: clock.ms + 100 });
    const b = enqueue('x', { deadlineMs: clock.ms + 100 });
    return { a, b, pick: scheduler.next() };
  };
  let r = shedAt(1_000);
  t.deepEqual(r.pick.batch, [], 'refused: 100 ms left, 400 learned');
  t.deepEqual(r.pick.shed.map((s) => s.reason), ['laxity', 'laxity']);
  r = shedAt(1_000 + PROBE_AFTER_MS - 1);
  t.deepEqual(r.pick.batch, [], 'still refused just short of PROBE_AFTER_MS');
  r = shedAt(1_000 + PROBE_AFTER_MS);
  t.deepEqual(r.pick.batch.map((x) => x.id), [r.a.id], 'the first of the batch runs anyway');
  t.deepEqual(r.pick.shed, [], 'the second waits (a row more would make the first later still)');
  clock.ms += 10;
  scheduler.charge('x', 1, 10);
  let pick = scheduler.next();
  t.deepEqual(pick.shed.map((s) => [s.request.id, s.reason]), [[r.b.id, 'laxity']], 'then is refused: a probe is one request');
  r = shedAt(clock.ms + PROBE_AFTER_MS / 2);
  t.deepEqual(r.pick.batch, [], 'the next probe PROBE_AFTER_MS after refusing began again');
  // Two minutes on (four half-lives of the learned cost), a probe's 10 ms outweighs the old 400.
  r = shedAt(clock.ms + 120_000);
  t.deepEqual(r.pick.batch.map((x) => x.id), [r.a.id], 'a probe');
  clock.ms += 10;
  scheduler.charge('x', 1, 10);
  t.deepEqual(scheduler.next().batch.map((x) => x.id), [r.b.id], 'learned again: the one after it runs');
  clock.ms += 10;
  scheduler.charge('x', 1, 10);
  r = shedAt(clock.ms + 1);
  t.deepEqual(r.pick.batch.map((x) => x.id), [r.a.id, r.b.id], 'learned again: both run');
});

test('every discipline refuses at dispatch each request of the batch that would miss its deadline, counting its weights\' coming on when they are off the device', (t) => {
  for (const discipline of /** @type {const} */ (['fair', 'fifo', 'edf'])) {
    let onDevice = true;
    const { clock, scheduler, enqueue, step } = harness({ discipline, resident: () => onDevice });
    scheduler.setModel('x', { weight: 1, maxBatchRows: 4 });
    enqueue('x', { rows: 2 });
    step(() => 40); // learn: 2 rows of x cost 40 ms
    const late = enqueue('x', { deadlineMs: clock.ms + 15 });
    const fine = enqueue('x', { deadlineMs: clock.ms + 100 });
    const none = enqueue('x');
    const pick = scheduler.next();
    t.deepEqual(pick.shed.map((s) => [s.request.id, s.reason]), [[late.id, 'laxity']], `${discipline}: 15 ms left, a row alone takes ~20`);
    t.deepEqual(pick.batch.map((b) => b.id), [fine.id, none.id], discipline);
    scheduler.charge('x', 2, 40);
    // One that makes its deadline alone but not in a full batch runs in a smaller one; the rest wait for the next.
    const tighter = enqueue('x', { deadlineMs: clock.ms + 30 });
    const after = [enqueue('x'), enqueue('x')];
    const small = scheduler.next();
    t.deepEqual(small.shed, [], discipline);
    t.deepEqual(small.batch.map((b) => b.id), [tighter.id], `${discipline}: 30 ms left: a batch of one row (~20 ms), not of three (~60)`);
    t.deepEqual(scheduler.next().batch.map((b) => b.id), after.map((b) => b.id), discipline);
    // Off the device, its last cold load (50 ms) counts too: 100 ms left is enough for a run, not for both.
    scheduler.chargeTime('x', 50);
    onDevice = false;
    const tight = enqueue('x', { deadlineMs: clock.ms + 80 });
    const roomy = enqueue('x', { deadlineMs: clock.ms + 200 });
    const cold = scheduler.next();
    t.deepEqual(cold.shed.map((s) => s.request.id), [tight.id], discipline);
    t.deepEqual(cold.batch.map((b) => b.id), [roomy.id], discipline);
  }
});

test('every discipline sheds requests past their deadline or queued past dispatch_timeout', (t) => {
  for (const discipline of /** @type {const} */ (['fair', 'fifo', 'edf'])) {
    const { clock, scheduler, enqueue } = harness({ discipline, maxWaitMs: 1000 });
    scheduler.setModel('x', { weight: 1, maxBatchRows: 8 });
    const expired = enqueue('x', { deadlineMs: 10 });
    const waited = enqueue('x');
    clock.ms = 600;
    const fresh = enqueue('x');
    clock.ms = 1500;
    const pick = scheduler.next();
    t.deepEqual(pick.shed.map((s) => [s.request.id, s.reason]).sort(), [[expired.id, 'deadline'], [waited.id, 'waited']].sort(), discipline);
    t.deepEqual(pick.batch.map((b) => b.id), [fresh.id], discipline);
    t.is(scheduler.queued, 0);
  }
});

test('coalescing takes queued requests up to the batch cap, never splitting one', (t) => {
  const { scheduler, enqueue } = harness();
  scheduler.setModel('m', { weight: 1, maxBatchRows: 8 });
  const [a, b, c] = [enqueue('m', { rows: 3 }), enqueue('m', { rows: 3 }), enqueue('m', { rows: 3 })];
  t.deepEqual(scheduler.next().batch.map((x) => x.id), [a.id, b.id]);
  t.deepEqual(scheduler.next().batch.map((x) => x.id), [c.id]);
  const big = enqueue('m', { rows: 12 });
  const small = enqueue('m', { rows: 1 });
  t.deepEqual(scheduler.next().batch.map((x) => x.id), [big.id], 'larger than the cap: runs alone');
  t.deepEqual(scheduler.next().batch.map((x) => x.id), [small.id]);
  t.deepEqual(scheduler.next().batch, []);
});

test('a model with requests on their way is held up to one learned execution, then runs what came; others run meanwhile', (t) => {
  const { clock, scheduler, enqueue, step } = harness();
  scheduler.setModel('hooked', { weight: 1, maxBatchRows: 8 });
  scheduler.setModel('plain', { weight: 1, maxBatchRows: 8 });
  step(() => 0); // nothing queued: nothing to pick, nothing held
  // Learn that an execution of hooked at 1 row takes 0.5 ms.
  enqueue('hooked');
  step(() => 0.5);
  // Three requests announced; the first one's inputs arrive.
  for (let i = 0; i < 3; i++) scheduler.expect('hooked');
  scheduler.arrived('hooked');
  const first = enqueue('hooked');
  const held = scheduler.next();
  t.deepEqual(held.batch, [], 'held while rows are on their way');
  t.is(held.heldUntilMs, first.enqueuedAtMs + 0.5, 'for one learned execution of what is queued');
  // Another model is not held back by it.
  const other = enqueue('plain');
  t.deepEqual(scheduler.next().batch.map((x) => x.id), [other.id]);
  // A second arrives within the hold, which grows to one execution of two rows (1 ms: unmeasured
  // sizes scale the measured one); when it is up, both run together.
  clock.ms += 0.2;
  scheduler.arrived('hooked');
  const second = enqueue('hooked');
  const longer = scheduler.next();
  t.deepEqual(longer.batch, []);
  t.is(longer.heldUntilMs, first.enqueuedAtMs + 1);
  clock.ms = first.enqueuedAtMs + 1;
  t.deepEqual(scheduler.next().batch.map((x) => x.id), [first.id, second.id], 'the hold is over: what came runs as one batch');
  // The third is withdrawn (its hook failed): nothing is held for it.
  scheduler.arrived('hooked');
  const lone = enqueue('hooked');
  t.deepEqual(scheduler.next().batch.map((x) => x.id), [lone.id]);
});

test('a hold ends at once when the last request on its way arrives, or when the batch is full', (t) => {
  const { scheduler, enqueue, step } = harness();
  scheduler.setModel('m', { weight: 1, maxBatchRows: 4 });
  enqueue('m');
  step(() => 1); // learned: 1 ms
  scheduler.expect('m');
  scheduler.expect('m');
  scheduler.arrived('m');
  const a = enqueue('m');
  t.deepEqual(scheduler.next().batch, []);
  scheduler.arrived('m');
  const b = enqueue('m');
  t.deepEqual(scheduler.next().batch.map((x) => x.id), [a.id, b.id], 'nothing more on its way: no wait');
  // Rows on their way but the queue already fills a batch: it runs.
  scheduler.expect('m');
  const full = enqueue('m', { rows: 4 });
  t.deepEqual(scheduler.next().batch.map((x) => x.id), [full.id]);
  // Requests announced for a model the scheduler does not know hold nothing back.
  scheduler.arrived('m');
  scheduler.expect('ghost');
  const next = enqueue('m');
  t.deepEqual(scheduler.next().batch.map((x) => x.id), [next.id]);
});

test('a full queue refuses with RESOURCE_EXHAUSTED naming the model and the cap; cancel removes', (t) => {
  const { scheduler, enqueue } = harness({ maxQueueDepth: 2 });
  scheduler.setModel('m', { weight: 1, maxBatchRows: 1 });
  const first = enqueue('m');
  enqueue('m');
  const err = stowageThrows(t, () => enqueue('m'));
  t.is(err.code, 'STOWAGE_QUEUE_FULL');
  t.is(err.status, 8);
  t.regex(err.message, /model "m" already has 2 requests queued \(scheduler\.max_queue_depth\)/);
  stowageThrows(t, () => enqueue('m', { rows: 5 }));
  t.is(scheduler.refusedRowsFor('m'), 6, 'the rows refused, counted');
  t.is(scheduler.cancel(first.id), first);
  t.is(scheduler.cancel(first.id), undefined);
  t.notThrows(() => enqueue('m'));
  t.is(stowageThrows(t, () => enqueue('unknown')).code, 'STOWAGE_MODEL_NOT_READY');
  scheduler.removeModel('m');
  t.is(scheduler.refusedRowsFor('m'), 0, 'forgotten with the model');
});

test('removing a model hands back its queued requests', (t) => {
  const { scheduler, enqueue } = harness();
  scheduler.setModel('m', { weight: 1, maxBatchRows: 1 });
  const a = enqueue('m');
  t.deepEqual(scheduler.removeModel('m').map((x) => x.id), [a.id]);
  t.is(scheduler.queued, 0);
});

test('the learned cost is an EMA whose old value halves every half-life', (t) => {
  const costs = new CostModel(1000);
  t.is(costs.estimate('m', 4), 1, 'an unmeasured model is assumed cheap');
  costs.record('m', 4, 10, 0);
  t.is(costs.record('m', 4, 20, 1000), 15);
  t.is(costs.estimate('m', 4), 15);
  t.is(costs.estimate('m', 8), 30, 'an unmeasured size scales the nearest measured one');
  const after = costs.record('m', 4, 115, 1000);
  // No clock time passed, so the sample weighs as its own 115 ms of device time: 1 - 0.5^0.115.
  t.true(Math.abs(after - (15 * 0.5 ** 0.115 + 115 * (1 - 0.5 ** 0.115))) < 1e-9, String(after));
});

test('upcoming: the queued models in the order each discipline would pick them (what uploads beside execution go ahead for)', (t) => {
  {
    const { clock, scheduler, enqueue, step } = harness({ discipline: 'fifo' });
    for (const m of ['a', 'b', 'c']) scheduler.setModel(m, { weight: 1, maxBatchRows: 1 });
    enqueue('c');
    clock.ms += 1;
    enqueue('a');
    enqueue('c');
    t.deepEqual(scheduler.upcoming(), ['c', 'a'], 'fifo: by the oldest head; idle models are not listed');
    const order = [];
    for (let i = 0; i < 2; i++) order.push(step(() => 1).batch[0].instance);
    t.deepEqual(order, ['c', 'a'], 'which is the order next() picks');
  }
  {
    const { scheduler, enqueue, step } = harness({ discipline: 'fair' });
    for (const m of ['a', 'b']) scheduler.setModel(m, { weight: 1, maxBatchRows: 1 });
    enqueue('a');
    enqueue('b');
    step(() => 5); // a (tie broken by registration) ran and was charged 5
    enqueue('a');
    t.deepEqual(scheduler.upcoming(), ['b', 'a'], 'fair: the least charged first');
  }
  {
    const { scheduler, enqueue } = harness({ discipline: 'edf' });
    for (const m of ['a', 'b']) scheduler.setModel(m, { weight: 1, maxBatchRows: 1 });
    enqueue('a', { deadlineMs: 500 });
    enqueue('b', { deadlineMs: 100 });
    t.deepEqual(scheduler.upcoming(), ['b', 'a'], 'edf: the most urgent head first');
  }
});

/** The harness with three priority levels (default 2), lower levels' share `share`; `enqueue(model, priority)`, `run()` the batch's ids (10 ms). */
function prioritized({ discipline = /** @type {'fair' | 'fifo' | 'edf'} */ ('fifo'), share = 0 } = {}) {
  const h = harness({ discipline, priorityLevels: 3, defaultPriority: 2, lowerPriorityShare: share });
  return {
    scheduler: h.scheduler,
    enqueue: (/** @type {string} */ model, /** @type {number | undefined} */ priority = undefined) => h.enqueue(model, { priority }),
    run: () => h.step(() => 10).batch.map((t) => t.id),
  };
}

test('priorities: a higher level goes first within a model and across models, whatever arrived first; 0 or none is the model\'s default', (t) => {
  for (const discipline of /** @type {const} */ (['fair', 'fifo', 'edf'])) {
    const { scheduler, enqueue, run } = prioritized({ discipline });
    scheduler.setModel('a', { weight: 1, maxBatchRows: 1 });
    scheduler.setModel('b', { weight: 1, maxBatchRows: 1 });
    scheduler.setModel('c', { weight: 1, maxBatchRows: 1, priority: 1 });
    const lows = [enqueue('a', 3), enqueue('a', 3), enqueue('b', 3)];
    const usual = enqueue('a', 0); // the default, 2
    const urgent = enqueue('b', 1);
    const cDefault = enqueue('c'); // c's default, 1
    const order = [run(), run(), run(), run(), run(), run()].flat();
    t.deepEqual(order.slice(0, 2).sort(), [urgent.id, cDefault.id].sort(), `${discipline}: level 1 first (b's and c's default)`);
    t.is(order[2], usual.id, `${discipline}: then level 2, which passed three of level 3 queued before it`);
    t.deepEqual(order.slice(3).sort(), lows.map((l) => l.id).sort(), discipline);
  }
});

test('priorities: a batch starts at its model\'s highest level and fills its spare rows with the next levels of the same model', (t) => {
  const { scheduler, enqueue, run } = prioritized();
  scheduler.setModel('m', { weight: 1, maxBatchRows: 4 });
  const low = [enqueue('m', 3), enqueue('m', 3), enqueue('m', 3), enqueue('m', 3)];
  const high = enqueue('m', 1);
  t.deepEqual(run(), [high.id, low[0].id, low[1].id, low[2].id]);
  t.deepEqual(run(), [low[3].id]);
});

test('priorities: one above scheduler.priority_levels is refused INVALID_ARGUMENT saying the levels', (t) => {
  const { scheduler, enqueue } = prioritized();
  scheduler.setModel('m', { weight: 1, maxBatchRows: 1 });
  const err = stowageThrows(t, () => enqueue('m', 4));
  t.is(err?.code, 'STOWAGE_INVALID_REQUEST');
  t.regex(err?.message ?? '', /priority 4 is above this server's 3 priority levels \(scheduler\.priority_levels\): give 1 \(the highest\) to 3, or 0 for the model's default/);
  t.is(scheduler.queued, 0);
});

test('priorities: lower levels get their share of device time while they wait (lower_priority_share), none with 0', (t) => {
  for (const share of [0, 0.2]) {
    const { scheduler, enqueue, run } = prioritized({ share });
    scheduler.setModel('hot', { weight: 1, maxBatchRows: 1 });
    scheduler.setModel('batch', { weight: 1, maxBatchRows: 1 });
    const lowIds = new Set(Array.from({ length: 200 }, () => enqueue('batch', 3).id));
    let lowRuns = 0;
    for (let i = 0; i < 200; i++) {
      enqueue('hot', 1); // the high level never runs dry
      if (run().some((id) => lowIds.has(id))) lowRuns++;
    }
    if (share === 0) t.is(lowRuns, 0, 'strict: the lower level waits while the higher has work');
    else t.true(lowRuns >= 200 * share * 0.8 && lowRuns <= 200 * share * 1.25, `share ${share}: ${lowRuns} of 200 executions`);
  }
});

test('priorities: a model whose default level changes has its queue put in level order again', (t) => {
  const { scheduler, enqueue, run } = prioritized();
  scheduler.setModel('m', { weight: 1, maxBatchRows: 1 });
  const plain = enqueue('m'); // 2, the scheduler's default
  const low = enqueue('m', 3);
  scheduler.setModel('m', { weight: 1, maxBatchRows: 1, priority: 3 });
  const high = enqueue('m', 1);
  t.deepEqual([run(), run(), run()].flat(), [high.id, plain.id, low.id], 'plain and low now share level 3, in arrival order');
});

test('priorities: while a higher level has deadlines, a lower level\'s batch takes only the rows that run within half its slack; full again once they stop', (t) => {
  const guard = new Backlog(Backlog.create(3));
  const { clock, scheduler, enqueue, step } = harness({ priorityLevels: 3, guard });
  clock.ms = 1_000; // the guard's clock starts above 0
  scheduler.setModel('interactive', { weight: 1, maxBatchRows: 8 });
  scheduler.setModel('batch', { weight: 1, maxBatchRows: 8 });
  const cost = (/** @type {string} */ _m, /** @type {number} */ rows) => 5 * rows; // a run grows with its rows
  // Teach both models their costs; then the lower level runs full batches while no deadline is seen.
  enqueue('interactive', { priority: 1 });
  step(cost);
  for (let i = 0; i < 8; i++) enqueue('batch', { priority: 2 });
  t.is(step(cost).batch.length, 8, 'no deadline at a higher level: a full batch');
  // An interactive request with 45 ms to its deadline and a 5 ms run of its own: 40 ms of slack, so a
  // batch of the lower level may run half of it (GUARD_SHARE), 20 ms: 4 rows at 5 ms.
  enqueue('interactive', { priority: 1, deadlineMs: clock.ms + 45 });
  t.is(step(cost).batch[0].instance, 'interactive');
  for (let i = 0; i < 16; i++) enqueue('batch', { priority: 2 });
  const guarded = step(cost);
  t.is(guarded.batch.length, 4, `batch of ${guarded.batch.length}: (45 - 5) / 2 / 5 rows`);
  t.true((guarded.ms ?? 0) <= 20);
  // A level's own batches, and levels above, are not held to it.
  for (let i = 0; i < 8; i++) enqueue('interactive', { priority: 1 });
  t.is(step(cost).batch.length, 8, 'the guarded level itself runs full batches');
  // DEADLINE_GUARD_MS later with no more deadlines there, the lower level runs full batches again.
  clock.ms += 10_001;
  t.is(step(cost).batch.length, 8);
  // A slack noted by a thread that admits requests (the device never saw that request) guards too.
  new Backlog(guard.memory).noteSlack(1, 20, clock.ms);
  for (let i = 0; i < 8; i++) enqueue('batch', { priority: 2 });
  t.is(step(cost).batch.length, 2, 'half of 20 ms: 2 rows at 5 ms');
});
