// A device's published backlog (shared/backlog.ts) and the refusal at admission it feeds
// (shared/backlog.ts, DeadlineAdmission), by themselves: what a request of a level waits for is the batch
// running now and the work waiting at its level and above; a request whose wait and run would end
// past its deadline is refused, naming the figures; a model not seen run yet, or a request without a
// deadline, never is; a request's level is its own, else its model's, else the default.
import test from 'ava';
import { Backlog, DeadlineAdmission, PROBE_AFTER_MS } from '../../../dist/shared/backlog.js';

/** An execution of `size` rows that took `ms`, `extra` of it in input (a weight load, a session open). */
const ran = (/** @type {number} */ ms, size = 1, extra = {}) => ({ computeInputNs: 0, computeInferNs: ms * 1e6, computeOutputNs: 0, batchRows: size, executedBatchSize: size, requests: size, ...extra });
/** The learned runs' half-life in these tests (scheduler.ema_halflife_seconds' default). */
const HALF_LIFE_MS = 30_000;
/** A request at `priority` (0: its model's level) due by `deadlineMs`, of `rows` rows. */
const req = (/** @type {number} */ priority, /** @type {number} */ deadlineMs, rows = 1) => ({ priority, deadlineMs, rows });

test('a level waits for the running batch and the work at its level and above, not below', (t) => {
  const b = new Backlog(Backlog.create(3));
  b.add(1, 10);
  b.add(2, 20);
  b.add(3, 40);
  t.is(b.aheadMs(1, 0), 10);
  t.is(b.aheadMs(2, 0), 30);
  t.is(b.aheadMs(3, 0), 70);
  t.is(b.aheadMs(9, 0), 70, 'a level past the levels counts as the lowest');
  b.running(1_005);
  t.is(b.aheadMs(1, 1_000), 15, 'the running batch\'s remaining 5 ms first');
  t.is(b.aheadMs(1, 2_000), 10, 'a run predicted over by now adds nothing');
  b.add(2, -20);
  t.is(b.aheadMs(3, 2_000), 50, 'work that left is taken back');
  const other = new Backlog(b.memory);
  t.is(other.aheadMs(3, 2_000), 50, 'another thread reads the same numbers');
  b.clear();
  t.is(other.aheadMs(3, 0), 0);
});

test('a request whose wait and run would end past its deadline is refused, naming them; one that would make it is not', (t) => {
  const d = new DeadlineAdmission({ defaultLevel: 2, models: { urgent: 1 } }, HALF_LIFE_MS);
  /** @type {number[]} */
  const levels = [];
  /** @type {[number, number][]} */
  const noted = [];
  const ahead = { aheadMs: (/** @type {number} */ level) => { levels.push(level); return level === 1 ? 5 : 80; }, noteSlack: (/** @type {number} */ level, /** @type {number} */ slackMs) => { noted.push([level, slackMs]); } };
  t.is(d.refusal({ name: 'm' }, req(0, 1_050), ahead, 1_000), null, 'a model not seen run yet is never refused here');
  d.learn('m', ran(10), 0);
  t.is(d.refusal({ name: 'm' }, req(0, Infinity), ahead, 1_000), null, 'nor a request without a deadline');
  const err = d.refusal({ name: 'm' }, req(0, 1_050), ahead, 1_000);
  t.is(err?.code, 'STOWAGE_DEADLINE_EXCEEDED');
  t.is(err?.message, 'request for model "m" refused before it ran: its deadline is 50 ms away, and the device has 80 ms of work ahead of it at priority 2 and above, then its run takes about 10 ms');
  t.is(d.refusal({ name: 'm' }, req(1, 1_050), ahead, 1_000), null, 'at priority 1 only 5 ms are ahead of it');
  d.learn('urgent', ran(10), 0);
  t.is(d.refusal({ name: 'urgent' }, req(0, 1_050), ahead, 1_000), null, 'its model\'s level, 1');
  t.deepEqual(levels, [2, 1, 1]);
  // The manifest's level (scheduling.priority) where the node file gives none; the node file's wins.
  t.is(d.refusal({ name: 'm', priority: 1 }, req(0, 1_050), ahead, 1_000), null, 'its manifest\'s level, 1');
  t.is(d.refusal({ name: 'urgent', priority: 3 }, req(0, 1_050), ahead, 1_000), null, 'the node file\'s level, 1, over the manifest\'s 3');
  t.deepEqual(levels.slice(3), [1, 1]);
  d.learn('m', ran(30), HALF_LIFE_MS); // a half-life on: halfway from 10 to 30
  t.regex(d.refusal({ name: 'm' }, req(1, 1_020), ahead, 1_000)?.message ?? '', /5 ms of work ahead of it at priority 1 and above, then its run takes about 20 ms/, 'a moving average of its runs');
  // Each request with a deadline and a known run noted its slack at its level, the refused ones too.
  t.deepEqual(noted[0], [2, 40], 'the refused one: 50 ms left, a 10 ms run');
  t.deepEqual(noted[noted.length - 1], [1, 0], 'the last: 20 ms left, a 20 ms run');
  t.is(noted.length, 6);
  t.is(d.refusal({ name: 'm' }, req(1, 1_020), undefined, 1_000), null, 'no device known: nothing ahead');
});

test('a request\'s own run is its model\'s learned cost at its rows\' batch size, less a weight load or session open; not one average of the batches its model rode in', (t) => {
  const d = new DeadlineAdmission({ defaultLevel: 1, models: {} }, HALF_LIFE_MS);
  const quiet = { aheadMs: () => 30, noteSlack: () => {} };
  t.is(d.runMs('m', 1), undefined, 'never seen run');
  d.learn('m', ran(20, 1), 0);
  for (let i = 0; i < 6; i++) d.learn('m', ran(80, 4), 0);
  t.is(d.runMs('m', 1), 20, 'one row: the batch of 1');
  t.is(d.runMs('m', 4), 80, 'four rows: the batch of 4');
  t.is(d.runMs('m', 16), 320, 'past the sizes seen: the nearest, in proportion to its rows');
  // Under load the model ran in batches of 4 (80 ms); a lone request with 97 ms to go and 30 ms
  // ahead makes its deadline. With one average of the batches (~70 ms) it was refused, every one
  // after it too, and nothing was learned again (the 3x run of bench/slo.js that refused them all).
  t.is(d.refusal({ name: 'm' }, req(0, 1_097), quiet, 1_000), null);
  t.truthy(d.refusal({ name: 'm' }, req(0, 1_097, 4), quiet, 1_000), 'four rows run as the batch of 4: 30 + 80 > 97');
  d.learn('m', ran(515, 1, { weightLoadMs: 495 }), HALF_LIFE_MS);
  d.learn('m', ran(25, 1, { sessionOpenMs: 5 }), 2 * HALF_LIFE_MS);
  t.is(d.runMs('m', 1), 20, 'a weight load and a session open are the backlog\'s to count, not the run\'s');
  d.learn('m', ran(40, 1), 3 * HALF_LIFE_MS);
  t.is(d.runMs('m', 1), 30, 'runs slowed: learned at the half-life');
});

test('a model whose every request has been refused here for PROBE_AFTER_MS gets one let through, then again a while later', (t) => {
  const d = new DeadlineAdmission({ defaultLevel: 1, models: {} }, HALF_LIFE_MS);
  let aheadMs = 200;
  const backlog = { aheadMs: () => aheadMs, noteSlack: () => {} };
  d.learn('m', ran(10), 0);
  t.truthy(d.refusal({ name: 'm' }, req(0, 1_100), backlog, 1_000), 'refused: 200 ms ahead, 100 to go');
  t.truthy(d.refusal({ name: 'm' }, req(0, 1_100 + PROBE_AFTER_MS - 1), backlog, 1_000 + PROBE_AFTER_MS - 1), 'still refused just short of PROBE_AFTER_MS');
  t.is(d.refusal({ name: 'm' }, req(0, 2_100), backlog, 1_000 + PROBE_AFTER_MS), null, 'after PROBE_AFTER_MS of refusals, one is let through (the device checks it again)');
  t.truthy(d.refusal({ name: 'm' }, req(0, 2_110), backlog, 1_010 + PROBE_AFTER_MS), 'the next is refused again');
  t.is(d.refusal({ name: 'm' }, req(0, 3_100), backlog, 1_000 + 2 * PROBE_AFTER_MS), null, 'and one a while later');
  aheadMs = 0;
  t.is(d.refusal({ name: 'm' }, req(0, 3_150), backlog, 3_100), null, 'room again: let through');
  aheadMs = 200;
  t.truthy(d.refusal({ name: 'm' }, req(0, 3_200), backlog, 3_100 + PROBE_AFTER_MS / 2), 'refusing starts over from the last one let through');
  t.truthy(d.refusal({ name: 'm' }, req(0, 3_200), backlog, 3_100 + PROBE_AFTER_MS), 'PROBE_AFTER_MS counts from the first refusal, not the last let through');
});

test('a level\'s deadline guard: a lower level\'s batches may run half the tightest slack noted above it lately, by any thread', (t) => {
  const b = new Backlog(Backlog.create(3));
  t.is(b.runCapMs(3, 1_000), Infinity, 'no deadlines noted: no cap');
  b.noteSlack(1, 40, 1_000);
  const other = new Backlog(b.memory); // an edge's view of the same device
  other.noteSlack(2, 30, 1_000);
  t.is(b.runCapMs(1, 1_000), Infinity, 'a level is not held to its own slack');
  t.is(b.runCapMs(2, 1_000), 20, 'level 2 under level 1\'s 40 ms');
  t.is(b.runCapMs(3, 1_000), 15, 'level 3 under the tightest of levels 1 and 2');
  b.noteSlack(1, 60, 2_000);
  t.is(b.runCapMs(2, 2_000), 20, 'a looser slack does not replace a tighter one noted lately');
  b.noteSlack(1, 60, 6_001);
  t.is(b.runCapMs(2, 6_001), 30, 'after half of DEADLINE_GUARD_MS the next slack replaces it');
  b.noteSlack(1, -5, 6_500);
  t.is(b.runCapMs(2, 6_500), 30, 'a request that cannot make its deadline guards nothing');
  t.is(b.runCapMs(2, 16_002), Infinity, 'DEADLINE_GUARD_MS after the last note the cap is gone');
  t.is(b.runCapMs(3, 16_002), Infinity);
});
