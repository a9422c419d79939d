// Loads over wall-clock windows (node/load-windows.ts): every read within one window gets the same
// numbers, whatever the counters did meanwhile; a new window publishes the load over the one
// before and the residency as it ended; counters that went back give no load; window lengths are
// kept apart, and only a few of them.
import test from 'ava';
import { LoadWindows } from '../../../dist/node/load-windows.js';

/** Counters a test moves by hand, read when a window closes. */
function counters() {
  /** @type {Map<string, { computeSeconds: number, residentBytes: number }>} */
  const now = new Map([['a', { computeSeconds: 0, residentBytes: 100 }], ['b', { computeSeconds: 0, residentBytes: 0 }]]);
  let reads = 0;
  return { now, reads: () => reads, read: () => { reads++; return new Map([...now].map(([k, v]) => [k, { ...v }])); } };
}

test('reads within one window get the same numbers; the next publishes the load over it', (t) => {
  const w = new LoadWindows();
  const c = counters();
  const first = w.read(2, 10_100, c.read); // window 5 of 2 s
  t.deepEqual(first.get('a'), { load: 0, residentBytes: 100, rate: 0, capacity: 0, weightLoad: 0 }, 'nothing measured before the first window');
  c.now.set('a', { computeSeconds: 1, residentBytes: 0 });
  t.is(w.read(2, 11_900, c.read), first, 'the same window: the same numbers, the counters not read again');
  t.is(c.reads(), 1);
  c.now.set('b', { computeSeconds: 0.5, residentBytes: 300 });
  const next = w.read(2, 12_100, c.read); // window 6: 2 s after the first read
  t.deepEqual(next.get('a'), { load: 0.5, residentBytes: 0, rate: 0, capacity: 0, weightLoad: 0 });
  t.deepEqual(next.get('b'), { load: 0.25, residentBytes: 300, rate: 0, capacity: 0, weightLoad: 0 });
  t.is(w.read(2, 13_000, c.read), next);

  // A counter that went back (statistics began again): no load, never a negative one.
  c.now.set('a', { computeSeconds: 0.2, residentBytes: 0 });
  t.is(w.read(2, 14_100, c.read).get('a')?.load, 0);
});

test('window lengths are kept apart, and no more than a few of them', (t) => {
  const w = new LoadWindows();
  const c = counters();
  const two = w.read(2, 10_100, c.read);
  const five = w.read(5, 10_100, c.read);
  t.not(two, five);
  t.is(w.read(2, 11_000, c.read), two);
  for (const s of [7, 11, 13, 17]) w.read(s, 10_100, c.read); // pushes out the least recently read
  const reads = c.reads();
  t.not(w.read(5, 10_200, c.read), five, 'forgotten: read afresh');
  t.is(c.reads(), reads + 1);
});

test('a window\'s rate is the rows answered plus what the queue grew by; its capacity as it ended', (t) => {
  const w = new LoadWindows();
  /** @type {Map<string, import('../../../dist/node/load-windows.js').ModelReading>} */
  let now = new Map([['hot', { computeSeconds: 0, residentBytes: 1, rows: 100, queued: 10, capacity: 2000 }]]);
  w.read(2, 10_000, () => now);
  // 2 s later: 3,000 rows answered and the queue 500 longer: 3,500 came, 1,750 a second (answers alone would say 1,500).
  now = new Map([['hot', { computeSeconds: 1.8, residentBytes: 1, rows: 3100, queued: 510, capacity: 2500 }]]);
  const behind = w.read(2, 12_000, () => now).get('hot');
  t.is(behind?.rate, 1750);
  t.is(behind?.capacity, 2500);
  t.is(behind?.load, 0.9);
  // The queue drains: answers above what came, and the rate is what came.
  now = new Map([['hot', { computeSeconds: 3.8, residentBytes: 1, rows: 6100, queued: 10, capacity: 2500 }]]);
  t.is(w.read(2, 14_000, () => now).get('hot')?.rate, 1250);
  // Counters begun again (a new statistics): no rate, never a negative one.
  now = new Map([['hot', { computeSeconds: 0.1, residentBytes: 1, rows: 20, queued: 0, capacity: 2500 }]]);
  t.is(w.read(2, 16_000, () => now).get('hot')?.rate, 0);
});

test('a window\'s rate counts the rows a full queue refused: a queue at its cap grows no more', (t) => {
  const w = new LoadWindows();
  /** @type {Map<string, import('../../../dist/node/load-windows.js').ModelReading>} */
  let now = new Map([['jumped', { computeSeconds: 0, residentBytes: 1, rows: 0, queued: 2000, refused: 0, capacity: 2500 }]]);
  w.read(2, 10_000, () => now);
  // 2 s at the cap: 5,000 rows answered, the queue as long, 40,000 refused: 22,500 a second came, not 2,500.
  now = new Map([['jumped', { computeSeconds: 2, residentBytes: 1, rows: 5000, queued: 2000, refused: 40_000, capacity: 2500 }]]);
  t.is(w.read(2, 12_000, () => now).get('jumped')?.rate, 22_500);
  // Without refusals (a node before them reports none): what was answered.
  now = new Map([['jumped', { computeSeconds: 4, residentBytes: 1, rows: 10_000, queued: 2000, refused: 40_000, capacity: 2500 }]]);
  t.is(w.read(2, 14_000, () => now).get('jumped')?.rate, 2500);
});

test('a window\'s weight load is the seconds its batches waited for its weights, per second of the window', (t) => {
  const w = new LoadWindows();
  /** @type {Map<string, import('../../../dist/node/load-windows.js').ModelReading>} */
  let now = new Map([['cold', { computeSeconds: 0, residentBytes: 0, weightLoadSeconds: 0.1 }], ['old', { computeSeconds: 0, residentBytes: 0 }]]);
  w.read(2, 10_000, () => now);
  // 2 s later: 0.3 s more waited for its weights (cold loads beside 0.4 s of executions).
  now = new Map([['cold', { computeSeconds: 0.4, residentBytes: 1, weightLoadSeconds: 0.4 }], ['old', { computeSeconds: 0.2, residentBytes: 0 }]]);
  const window = w.read(2, 12_000, () => now);
  t.true(Math.abs((window.get('cold')?.weightLoad ?? NaN) - 0.15) < 1e-12, `${window.get('cold')?.weightLoad}`);
  t.true(Math.abs((window.get('cold')?.load ?? NaN) - 0.2) < 1e-12, 'its executions apart');
  t.is(window.get('old')?.weightLoad, 0, 'a reading without the counter (a node older than it): none');
  // Counters begun again: none, never a negative one.
  now = new Map([['cold', { computeSeconds: 0.5, residentBytes: 1, weightLoadSeconds: 0 }], ['old', { computeSeconds: 0.2, residentBytes: 0 }]]);
  t.is(w.read(2, 14_000, () => now).get('cold')?.weightLoad, 0);
});
