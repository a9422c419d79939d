// The leases every thread takes on a model's instance in shared memory (shared/leases.ts): once the
// main thread has closed a slot and seen no lease held, no edge holds one, whatever the threads'
// timing; a slot reused under another tag never passes for the old instance; a dead edge's leases
// are given back; the main thread holds in a row of its own; slots never run out (a segment is
// added and sent to the edges); every count given back on a closed slot that may be the last tells
// the main thread's drain, a lost race's take-back too; tags past 2^31 still compare.
import { Worker } from 'node:worker_threads';
import test from 'ava';
import { SEGMENT_SLOTS, Leases, word } from '../../../dist/shared/leases.js';

test('a lease is taken only on an open slot under its tag, counted per thread, and a dead edge\'s are given back', (t) => {
  const main = Leases.create(2);
  const slot = main.take();
  const other = main.take();
  const edge0 = new Leases(main.shape, 0);
  const edge1 = new Leases(main.shape, 1);
  t.false(edge0.acquire(slot, 1), 'closed slot');
  main.open(slot, 7);
  t.false(edge0.acquire(slot, 6), 'another instance\'s tag');
  t.true(edge0.acquire(slot, 7));
  t.true(edge1.acquire(slot, 7));
  t.true(edge1.acquire(slot, 7));
  t.true(main.acquire(slot, 7), 'the main thread takes its own, in its row');
  t.is(main.held(slot), 4);
  t.is(main.heldHere(slot), 1);
  t.is(main.held(other), 0, 'slots are apart');
  main.close(slot);
  t.false(edge0.acquire(slot, 7), 'closed: no new lease');
  t.false(main.acquire(slot, 7), 'not even the main thread\'s');
  t.is(main.held(slot), 4, 'those held stay counted');
  edge0.release(slot, 7);
  main.release(slot, 7);
  t.is(main.held(slot), 2);
  main.forget(1);
  t.is(main.held(slot), 0, 'edge 1 died: its two leases are given back');
});

test('when every slot is taken a segment is added, told before any slot in it is named; a slot given back is taken again', (t) => {
  /** @type {SharedArrayBuffer[]} */
  const grown = [];
  const main = Leases.create(1, (segment) => grown.push(segment));
  const edge = new Leases(main.shape, 0);
  const first = main.take();
  t.is(grown.length, 1, 'the first segment, made at the first take');
  edge.adopt(grown[0]);
  const taken = [first];
  for (let i = 1; i < SEGMENT_SLOTS; i++) taken.push(main.take());
  t.is(grown.length, 1);
  t.is(new Set(taken).size, SEGMENT_SLOTS, 'every slot of the segment, once');
  const beyond = main.take();
  t.is(grown.length, 2, 'a second segment');
  t.true(beyond >= SEGMENT_SLOTS);
  main.open(beyond, 9);
  t.false(edge.acquire(beyond, 9), 'an edge that has not adopted it takes nothing there');
  edge.adopt(grown[1]);
  t.true(edge.acquire(beyond, 9));
  t.is(main.held(beyond), 1);
  t.is(main.held(first), 0, 'the segments are apart');
  const late = new Leases(main.shape, 0);
  t.true(late.isOpen(beyond, 9), 'an edge started later gets every segment in its shape');
  main.give(taken[5]);
  t.is(main.take(), taken[5], 'a freed slot is taken before a new segment is made');
  t.is(grown.length, 2);
});

test('after the main thread closes a slot and sees it free, no edge on another thread holds a lease there', async (t) => {
  const main = Leases.create(4);
  const SLOT = main.take();
  const memory = main.shape; // with the segment the take made
  const TAG = 3;
  main.open(SLOT, TAG);
  // flags[0]: set once the main thread has seen the slot closed and free; flags[1 + k]: thread k started;
  // flags[5 + k]: thread k took a lease. Each thread leases until it is refused after flags[0] is set (so
  // every one of them contends across the close, however the machine schedules them), or 20 s.
  const flags = new Int32Array(new SharedArrayBuffer(4 * 9));
  const source = `
    const { parentPort, workerData: { memory, row, flags, url, slot, tag } } = require('node:worker_threads');
    import(url).then(({ Leases }) => {
      const leases = new Leases(memory, row);
      Atomics.store(flags, 1 + row, 1);
      let taken = 0, violations = 0, refused = 0;
      const until = Date.now() + 20000;
      while (Date.now() < until) {
        if (!leases.acquire(slot, tag)) {
          refused++;
          if (Atomics.load(flags, 0) === 1) break;
          continue;
        }
        taken++;
        Atomics.store(flags, 5 + row, 1);
        if (Atomics.load(flags, 0) === 1) violations++; // held after the main thread saw none held
        for (let k = 0; k < 100; k++); // held a moment
        leases.release(slot, tag);
      }
      parentPort.postMessage({ taken, violations, refused });
    });`;
  const url = new URL('../../../dist/shared/leases.js', import.meta.url).href;
  const workers = Array.from({ length: 4 }, (_, row) => new Worker(source, { eval: true, workerData: { memory, row, flags, url, slot: SLOT, tag: TAG } }));
  const results = Promise.all(workers.map((w) => new Promise((resolve, reject) => {
    w.once('message', resolve);
    w.once('error', reject);
  })));
  while ([5, 6, 7, 8].some((k) => Atomics.load(flags, k) === 0)) await new Promise((resolve) => setTimeout(resolve, 5));
  await new Promise((resolve) => setTimeout(resolve, 100)); // contending
  main.close(SLOT);
  while (main.held(SLOT) > 0) await new Promise((resolve) => setImmediate(resolve));
  Atomics.store(flags, 0, 1);
  const done = /** @type {{ taken: number, violations: number, refused: number }[]} */ (await results);
  t.log(`leases taken per thread: ${done.map((r) => r.taken).join(', ')}; refused after the close: ${done.map((r) => r.refused).join(', ')}`);
  t.true(done.every((r) => r.taken > 0), 'every thread took leases while the slot was open');
  t.deepEqual(done.map((r) => r.violations), [0, 0, 0, 0], 'no lease held once the main thread saw the slot free');
  t.true(done.every((r) => r.refused > 0), 'every thread was refused after the close');
  t.is(main.held(SLOT), 0);
});

test('tags past 2^31 and 2^32 (so many loads or registrations) still open, lease and close: a tag is stored as a word of its own, never 0', (t) => {
  const main = Leases.create(1);
  const slot = main.take();
  const edge = new Leases(main.shape, 0);
  for (const tag of [1, 2 ** 31 - 1, 2 ** 31, 2 ** 31 + 5, 2 ** 32 - 1, 2 ** 32, 2 ** 32 + 1, 2 ** 40 + 3, Number.MAX_SAFE_INTEGER]) {
    t.not(word(tag), 0, `tag ${tag}: a word that is not a closed slot's`);
    main.open(slot, tag);
    t.true(main.isOpen(slot, tag), `tag ${tag}: open`);
    t.true(edge.acquire(slot, tag), `tag ${tag}: leased`);
    t.false(edge.acquire(slot, tag + 1), `tag ${tag}: the next tag is another instance's`);
    edge.release(slot, tag);
    main.close(slot);
    t.false(main.isOpen(slot, tag));
    t.false(edge.acquire(slot, tag), `tag ${tag}: closed`);
  }
  t.is(main.held(slot), 0);
});

test('a count given back on a closed slot tells the drain when it may be the last: a release, and an acquire that found the slot closed as it added its count', (t) => {
  const main = Leases.create(2);
  const slot = main.take();
  /** @type {string[]} */
  const told = [];
  const edge0 = new Leases(main.shape, 0, null, (s) => told.push(`edge0 ${s}`));
  const edge1 = new Leases(main.shape, 1, null, (s) => told.push(`edge1 ${s}`));
  main.open(slot, 5);
  t.true(edge0.acquire(slot, 5));
  t.true(edge1.acquire(slot, 5));
  edge0.release(slot, 5);
  t.deepEqual(told, [], 'open: nobody waits');
  main.close(slot);
  edge1.release(slot, 5);
  t.deepEqual(told, [`edge1 ${slot}`], 'the last release on the closed slot tells');
  // edge1 passing (a count added, not yet taken back) while edge0's last release looks: silent; the take-back then tells.
  main.open(slot, 6);
  t.true(edge0.acquire(slot, 6));
  main.close(slot);
  told.length = 0;
  t.false(edge1.acquire(slot, 6), 'closed before it added its count: refused at the first look, nothing to give back');
  t.deepEqual(told, [], 'nothing added, nothing told');
  edge0.release(slot, 6);
  t.deepEqual(told, [`edge0 ${slot}`]);
});

test('a drain on another thread is always woken: acquires losing the race to a close, and releases, never leave the main thread waiting', async (t) => {
  const main = Leases.create(2);
  const SLOT = main.take();
  // control[0]: the tag the edges lease under now (0: stop); control[1 + k]: edge k started.
  const control = new Int32Array(new SharedArrayBuffer(4 * 3));
  const source = `
    const { parentPort, workerData: { memory, row, control, url, slot } } = require('node:worker_threads');
    import(url).then(({ Leases }) => {
      // As an edge: a count given back that may be the last on a closed slot tells the main thread.
      const leases = new Leases(memory, row, null, () => parentPort.postMessage('lastOut'));
      Atomics.store(control, 1 + row, 1);
      for (;;) {
        const tag = Atomics.load(control, 0);
        if (tag === 0) break;
        if (leases.acquire(slot, tag)) leases.release(slot, tag);
      }
      parentPort.postMessage('done');
    });`;
  const url = new URL('../../../dist/shared/leases.js', import.meta.url).href;
  Atomics.store(control, 0, 1);
  main.open(SLOT, 1);
  /** @type {(() => void)[]} */
  let waiting = [];
  const wake = () => {
    const w = waiting;
    waiting = [];
    for (const resolve of w) resolve();
  };
  const workers = [0, 1].map((row) => {
    const w = new Worker(source, { eval: true, workerData: { memory: main.shape, row, control, url, slot: SLOT } });
    w.on('message', (m) => { if (m === 'lastOut') wake(); });
    return w;
  });
  while (Atomics.load(control, 1) === 0 || Atomics.load(control, 2) === 0) await new Promise((resolve) => setTimeout(resolve, 5));
  // Reloads, as the main thread makes them: a new tag opened, the edges leasing it, the slot closed
  // and drained (ModelSlots.drained: looked at again when an edge says a last count went).
  let stalls = 0;
  const CYCLES = 12000;
  for (let cycle = 2; cycle < CYCLES + 2; cycle++) {
    main.open(SLOT, cycle);
    Atomics.store(control, 0, cycle);
    for (let spin = 0; spin < (cycle % 7) * 200; spin++); // a moment of leasing, of varying length
    main.close(SLOT);
    while (main.held(SLOT) > 0) {
      const woken = await Promise.race([
        new Promise((resolve) => waiting.push(() => resolve(true))),
        new Promise((resolve) => setTimeout(() => resolve(false), 1000)),
      ]);
      if (!woken && main.held(SLOT) === 0) stalls++; // drained, yet nobody said so: a lost wake-up
    }
  }
  Atomics.store(control, 0, 0);
  await Promise.all(workers.map((w) => new Promise((resolve) => w.once('message', function done(m) { if (m === 'done') resolve(undefined); else w.once('message', done); }))));
  await Promise.all(workers.map((w) => w.terminate()));
  t.log(`${CYCLES} closes and drains against two leasing threads: ${stalls} drains left waiting`);
  t.is(stalls, 0, 'every drain was woken by the count that went last');
});
