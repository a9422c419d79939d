// The device's session pool (actors/device/sessions.ts) by itself, over sessions that record their
// opens and closes and a measure the test sets: sharing by key, the last user closing, the budget
// closing the least recently used idle session (never a pinned one, never the one in use) and a
// reopen on the next use, an open that runs out of memory retried once after closing another; and
// the sharing key (actors/device/sessions.ts, `sharingKey`): equal graphs and options share, a provider option
// such as tf32 or CUDA graphs on or off does not.
import test from 'ava';
import { PooledSession, reopenExhausted, SessionPool } from '../../../../dist/actors/device/sessions.js';
import { sharingKey } from '../../../../dist/actors/device/sessions.js';
import { sharingOff } from '../../../../dist/actors/device/models.js';
import { initOrt, ortAddon } from '../../../../dist/native/ort.js';

/** A pool whose sessions are plain objects, each open adding `bytes` to the measure. */
function pool(budgetBytes = 0) {
  let held = 0;
  const log = /** @type {string[]} */ ([]);
  /** @type {Error | null} */
  let failNext = null;
  const sessions = new SessionPool({ budgetBytes, measure: () => held });
  /** @param {string} key @param {number} bytes */
  const make = (key, bytes) => {
    /** @type {PooledSession} */
    const pooled = new PooledSession(key, key, null, () => {
      if (failNext) {
        const err = failNext;
        failNext = null;
        throw err;
      }
      held += bytes;
      log.push(`open ${key}`);
      const s = { inputs: [], outputs: [], release: () => { held -= bytes; log.push(`close ${key}`); } };
      return /** @type {import('../../../../dist/native/ort.js').OrtSession} */ (/** @type {unknown} */ (s));
    });
    return pooled;
  };
  /** @param {string} model @param {boolean} [pinned] */
  const user = (model, pinned = false) => ({ model, pinned, closed: 0, onClose() { this.closed++; } });
  return { sessions, make, user, log, fail: (/** @type {Error} */ err) => { failNext = err; } };
}

test('executables of one key share one session; the last to leave closes it', async (t) => {
  const { sessions, make, user, log } = pool();
  const a = user('a');
  const b = user('b');
  const pa = await sessions.join('g1', a, () => make('g1', 100));
  const pb = await sessions.join('g1', b, () => make('g1', 100));
  t.is(pa, pb);
  t.deepEqual(log, ['open g1']);
  t.is(pa.bytes, 100, 'measured across its open');
  t.is(pa.describe(), 'shared with 2 models (graph g1)');
  t.like(sessions.report(), { open: 1, sessions: 1, users: 2, bytes: 100, opens: { load: 1, reopen: 0 } });
  sessions.leave(a, pa);
  t.is(a.closed, 1, 'the leaver lets go of its binding');
  t.deepEqual(log, ['open g1']);
  t.is(pb.describe(), 'own session, no other loaded model has its graph (graph g1)');
  sessions.leave(b, pb);
  t.deepEqual(log, ['open g1', 'close g1']);
  t.like(sessions.report(), { open: 0, sessions: 0, users: 0, closes: { unload: 1, budget: 0, memory: 0 } });
});

test('beyond the budget the least recently used idle session closes, never a pinned one or the one in use, and opens again on its next use', async (t) => {
  const { sessions, make, user, log } = pool(250);
  const pinned = user('p', true);
  const users = ['a', 'b', 'c'].map((m) => user(m));
  const pp = await sessions.join('gp', pinned, () => make('gp', 100));
  const joined = [];
  for (const [i, u] of users.entries()) joined.push(await sessions.join(`g${i}`, u, () => make(`g${i}`, 100)));
  // gp, g0 open (200); g1 opens: 300 > 250, so g0 (not gp: pinned) closes; g2 opens: g1 closes.
  t.deepEqual(log, ['open gp', 'open g0', 'open g1', 'close g0', 'open g2', 'close g1']);
  t.is(users[0].closed, 1, 'its users let go of their bindings');
  t.false(joined[0].open);
  t.regex(joined[0].describe(), /closed until its next call/);
  t.true(pp.open);
  t.is(sessions.openBytes, 200);
  // g0's next use opens it again (a reopen), closing the least recently used idle one (g2).
  t.true(await sessions.use(joined[0]) >= 0);
  t.deepEqual(log.slice(6), ['open g0', 'close g2']);
  t.true(joined[0].open);
  t.is(await sessions.use(joined[0]), 0, 'open: nothing to pay');
  t.like(sessions.report(), { open: 2, sessions: 4, users: 4, opens: { load: 4, reopen: 1 }, closes: { unload: 0, budget: 3, memory: 0 } });
});

test('an open that runs out of memory closes the least recently used idle session and tries once more', async (t) => {
  const { sessions, make, user, log, fail } = pool();
  const a = user('a');
  const b = user('b');
  await sessions.join('g0', a, () => make('g0', 100));
  initOrt();
  // The binding's own error for ONNX Runtime's CPU arena refusing a buffer.
  fail(ortAddon().ortFailure(1, 'Failed to allocate memory for requested buffer of size 123'));
  const pb = await sessions.join('g1', b, () => make('g1', 100));
  t.true(pb.open);
  t.deepEqual(log, ['open g0', 'close g0', 'open g1']);
  t.like(sessions.report(), { closes: { memory: 1 } });
  // Any other failure is the caller's: the user leaves, nothing is closed.
  const c = user('c');
  fail(new Error('not a memory failure'));
  await t.throwsAsync(sessions.join('g2', c, () => make('g2', 100)), { message: 'not a memory failure' });
  t.is(sessions.get('g2'), undefined, 'a session that never opened is not kept');
  t.like(sessions.report(), { sessions: 2, users: 2 });
  // A reopen that still finds no memory: the call fails RESOURCE_EXHAUSTED saying so, the model stays READY.
  const exhausted = reopenExhausted('m', ortAddon().ortFailure(1, 'Failed to allocate memory for requested buffer of size 123'));
  t.is(/** @type {any} */ (exhausted).code, 'STOWAGE_DEVICE_MEMORY_EXHAUSTED');
  t.regex(exhausted.message, /closed under runtime\.session_budget_bytes and could not open again: memory ran out even after closing another idle session .*the model stays READY/);
  const other = new Error('no such file');
  t.is(reopenExhausted('m', other), other, 'any other failure is said as it is');
});

test('the sharing key: equal graphs and options share; another graph, a provider option (tf32) or CUDA graphs do not', (t) => {
  const cuda = (/** @type {Record<string, string>} */ options) => ({ cuda: { deviceId: 0, options }, graphs: false });
  t.is(sharingKey('abc', 'basic', { cuda: null }), sharingKey('abc', 'basic', { cuda: null }));
  t.not(sharingKey('abc', 'basic', { cuda: null }), sharingKey('abd', 'basic', { cuda: null }));
  t.not(sharingKey('abc', 'basic', { cuda: null }), sharingKey('abc', 'all', { cuda: null }));
  t.is(sharingKey('abc', 'all', cuda({ use_tf32: '1', cudnn_conv_algo_search: 'EXHAUSTIVE' })), sharingKey('abc', 'all', cuda({ cudnn_conv_algo_search: 'EXHAUSTIVE', use_tf32: '1' })), 'the order of options does not matter');
  t.not(sharingKey('abc', 'all', cuda({ use_tf32: '1' })), sharingKey('abc', 'all', cuda({ use_tf32: '0' })), 'tf32 differing: two sessions');
  t.not(sharingKey('abc', 'all', cuda({})), sharingKey('abc', 'all', { ...cuda({}), graphs: true }), 'graphs on or off: two sessions');
  t.not(sharingKey('abc', 'all', cuda({}), 1), sharingKey('abc', 'all', cuda({}), 8), 'a session per batch size: one per size');
  t.is(sharingKey('abc', 'all', cuda({}), 8), sharingKey('abc', 'all', cuda({}), 8));
});

test('sessions are not shared with CUDA graphs on (a captured graph is its session\'s), nor with runtime.share_sessions off; else they may be', (t) => {
  const init = (/** @type {boolean} */ share, /** @type {boolean | null} */ graphs) => ({
    sessions: { share, sharedActivations: false, budgetBytes: 0, perBatchSize: false },
    cuda: graphs === null ? null : /** @type {any} */ ({ ordinal: 0, providerOptions: {}, libraryDirs: [], graphs, sharedArena: false }),
  });
  t.is(sharingOff(init(true, null)), null);
  t.is(sharingOff(init(true, false)), null);
  t.regex(String(sharingOff(init(true, true))), /runtime\.cuda\.graphs is on/);
  t.regex(String(sharingOff(init(false, true))), /runtime\.share_sessions is false/);
});
