// The device's ledger of its backlog (shared/backlog.ts, BacklogLedger) over the shared Backlog: each
// waiting request adds its share of a run at its level and takes it back when it leaves; a model that
// must be brought on first adds that load once, with the first of its requests to wait.
import test from 'ava';
import { Backlog, BacklogLedger } from '../../../dist/shared/backlog.js';

/** A command as the ledger reads it. */
const cmd = (/** @type {number} */ id, /** @type {string} */ instance) => /** @type {any} */ ({ id, instance, rows: 1, priority: 1 });

test('the first waiting request of a model to be brought on carries its load; the rest their runs; each takes back what it added', (t) => {
  const backlog = new Backlog(Backlog.create(2));
  const cold = new Set(['cold#1']);
  const ledger = new BacklogLedger(backlog, (c, first) => ({ level: 1, ms: 2 + (first && cold.has(c.instance) ? 50 : 0) }));
  ledger.queued(cmd(1, 'cold#1'));
  ledger.queued(cmd(2, 'cold#1'));
  ledger.queued(cmd(3, 'warm#1'));
  t.is(backlog.aheadMs(1, 0), 50 + 2 + 2 + 2, 'the load once, and three runs');
  ledger.left(1);
  t.is(backlog.aheadMs(1, 0), 4, 'the load leaves with the request that carried it (its batch brought the model on)');
  ledger.left(2);
  ledger.queued(cmd(4, 'cold#1'));
  t.is(backlog.aheadMs(1, 0), 2 + 52, 'none of its model waiting, the next request is first again');
  ledger.left(3);
  ledger.left(4);
  ledger.left(4);
  t.is(backlog.aheadMs(1, 0), 0, 'everything taken back once');
});
