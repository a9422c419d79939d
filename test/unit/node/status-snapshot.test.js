// The node's status snapshot (node/status-snapshot.ts): answers without waiting for a device once
// background reads run, says how old it is, `fresh` waits for a read begun after the call, a slow
// read never holds an answer, and reads stop when nobody asks.
import test from 'ava';
import { StatusSnapshot } from '../../../dist/node/status-snapshot.js';

const sleep = (/** @type {number} */ ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** A device read the test controls: each call counted, answered with the count, held while `hold` is set. */
function reader() {
  const r = {
    calls: 0,
    /** @type {Promise<void> | null} */ hold: null,
    /** @type {Error | null} */ fail: null,
    read: async () => {
      const n = ++r.calls;
      if (r.hold) await r.hold;
      if (r.fail) throw r.fail;
      return n;
    },
  };
  return r;
}

test('the first call waits for a read; later calls answer from the snapshot while background reads run', async (t) => {
  const r = reader();
  const s = new StatusSnapshot(r.read, { periodMs: 20, idleMs: 1000 });
  const first = await s.get();
  t.is(first.value, 1);
  t.is(r.calls, 1);
  const second = await s.get();
  t.is(r.calls, 1, 'answered from the snapshot, no read');
  t.is(second.value, 1);
  await sleep(100);
  const later = await s.get();
  t.true(later.value > 1, 'background reads kept it recent');
});

test('a slow read never holds an answer: the last snapshot comes back at once, with its age', async (t) => {
  const r = reader();
  const s = new StatusSnapshot(r.read, { periodMs: 10, idleMs: 1000 });
  await s.get();
  /** @type {() => void} */
  let release = () => {};
  r.hold = new Promise((resolve) => { release = resolve; });
  await sleep(150); // a background read started and is held
  const answer = await s.get(); // resolves while the read is held: had it waited, this would hang
  t.is(r.calls, 2, 'the held read is still the one in flight');
  t.is(answer.value, 1);
  t.true(answer.ageMs >= 100, `its age says how stale: ${answer.ageMs} ms`);
  r.hold = null;
  release();
  await sleep(50);
  t.true((await s.get()).value >= 2);
});

test('fresh waits for a read begun after the call; a failed read fails it and keeps the snapshot', async (t) => {
  const r = reader();
  const s = new StatusSnapshot(r.read, { periodMs: 10_000, idleMs: 60_000 });
  t.is((await s.get()).value, 1);
  const fresh = await s.get(true);
  t.is(fresh.value, 2);
  t.is(r.calls, 2);
  r.fail = new Error('device gone');
  await t.throwsAsync(s.get(true), { message: 'device gone' });
  r.fail = null;
  t.is((await s.get()).value, 2, 'the last good snapshot stays');
});

test('background reads stop once nobody has asked for idleMs, and the next call waits for a new read', async (t) => {
  const r = reader();
  const s = new StatusSnapshot(r.read, { periodMs: 10, idleMs: 50 });
  await s.get();
  await sleep(200);
  const stopped = r.calls;
  await sleep(100);
  t.is(r.calls, stopped, 'no reads while nobody asks');
  const next = await s.get();
  t.is(next.value, stopped + 1, 'a quiet spell ends with a read, not a stale answer');
});
