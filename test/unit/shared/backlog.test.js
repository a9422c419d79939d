// A device's published backlog (shared/backlog.ts) and the refusal at admission it feeds
// (shared/deadline-admission.ts), by themselves: what a request of a level waits for is the batch
// running now and the work waiting at its level and above; a request whose wait and run would end
// past its deadline is refused, naming the figures; a model not seen run yet, or a request without a
// deadline, never is; a request's level is its own, else its model's, else the default.
import test from 'ava';
import { Backlog } from '../../../dist/shared/backlog.js';
import { DeadlineAdmission } from '../../../dist/shared/deadline-admission.js';

const ran = (/** @type {number} */ ms) => ({ computeInputNs: 0, computeInferNs: ms * 1e6, computeOutputNs: 0, batchRows: 1, executedBatchSize: 1, requests: 1 });

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
  const d = new DeadlineAdmission({ defaultLevel: 2, models: { urgent: 1 } });
  /** @type {number[]} */
  const levels = [];
  const ahead = (/** @type {number} */ level) => { levels.push(level); return level === 1 ? 5 : 80; };
  t.is(d.refusal({ name: 'm' }, 0, 1_050, ahead, 1_000), null, 'a model not seen run yet is never refused here');
  d.learn('m', ran(10));
  t.is(d.refusal({ name: 'm' }, 0, Infinity, ahead, 1_000), null, 'nor a request without a deadline');
  const err = d.refusal({ name: 'm' }, 0, 1_050, ahead, 1_000);
  t.is(err?.code, 'STOWAGE_DEADLINE_EXCEEDED');
  t.is(err?.message, 'request for model "m" refused before it ran: its deadline is 50 ms away, and the device has 80 ms of work ahead of it at priority 2 and above, then its run takes about 10 ms');
  t.is(d.refusal({ name: 'm' }, 1, 1_050, ahead, 1_000), null, 'at priority 1 only 5 ms are ahead of it');
  d.learn('urgent', ran(10));
  t.is(d.refusal({ name: 'urgent' }, 0, 1_050, ahead, 1_000), null, 'its model\'s level, 1');
  t.deepEqual(levels, [2, 1, 1]);
  // The manifest's level (scheduling.priority) where the node file gives none; the node file's wins.
  t.is(d.refusal({ name: 'm', priority: 1 }, 0, 1_050, ahead, 1_000), null, 'its manifest\'s level, 1');
  t.is(d.refusal({ name: 'urgent', priority: 3 }, 0, 1_050, ahead, 1_000), null, 'the node file\'s level, 1, over the manifest\'s 3');
  t.deepEqual(levels.slice(3), [1, 1]);
  d.learn('m', ran(60));
  t.regex(d.refusal({ name: 'm' }, 1, 1_020, ahead, 1_000)?.message ?? '', /5 ms of work ahead of it at priority 1 and above, then its run takes about 20 ms/, 'a moving average of its runs');
});
