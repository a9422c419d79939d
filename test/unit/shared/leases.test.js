// The leases edge threads take on a model's instance in shared memory (shared/leases.ts): once the
// main thread has closed a slot and seen no lease held, no edge holds one, whatever the threads'
// timing; a slot reused under another tag never passes for the old instance; a dead edge's leases
// are given back.
import { Worker } from 'node:worker_threads';
import test from 'ava';
import { LEASE_SLOTS, Leases } from '../../../dist/shared/leases.js';

test('a lease is taken only on an open slot under its tag, counted per edge, and a dead edge\'s are given back', (t) => {
  const memory = Leases.memory(2);
  const main = new Leases(memory);
  const edge0 = new Leases(memory, 0);
  const edge1 = new Leases(memory, 1);
  t.false(edge0.acquire(5, 1), 'closed slot');
  main.open(5, 7);
  t.false(edge0.acquire(5, 6), 'another instance\'s tag');
  t.true(edge0.acquire(5, 7));
  t.true(edge1.acquire(5, 7));
  t.true(edge1.acquire(5, 7));
  t.is(main.held(5), 3);
  t.is(main.held(4), 0, 'slots are apart');
  main.close(5);
  t.false(edge0.acquire(5, 7), 'closed: no new lease');
  t.is(main.held(5), 3, 'those held stay counted');
  edge0.release(5);
  t.is(main.held(5), 2);
  main.forget(1);
  t.is(main.held(5), 0, 'edge 1 died: its two leases are given back');
  main.open(LEASE_SLOTS - 1, 8);
  t.true(edge1.acquire(LEASE_SLOTS - 1, 8), 'the last slot works');
});

test('after the main thread closes a slot and sees it free, no edge on another thread holds a lease there', async (t) => {
  const memory = Leases.memory(4);
  const main = new Leases(memory);
  const SLOT = 17;
  const TAG = 3;
  main.open(SLOT, TAG);
  // flags[0]: set once the main thread has seen the slot closed and free; flags[1 + k]: thread k started.
  const flags = new Int32Array(new SharedArrayBuffer(4 * 5));
  const source = `
    const { parentPort, workerData: { memory, row, flags, url, slot, tag } } = require('node:worker_threads');
    import(url).then(({ Leases }) => {
      const leases = new Leases(memory, row);
      Atomics.store(flags, 1 + row, 1);
      let taken = 0, violations = 0, refused = 0;
      const until = Date.now() + 400;
      while (Date.now() < until) {
        if (!leases.acquire(slot, tag)) { refused++; continue; }
        taken++;
        if (Atomics.load(flags, 0) === 1) violations++; // held after the main thread saw none held
        for (let k = 0; k < 100; k++); // held a moment
        leases.release(slot);
      }
      parentPort.postMessage({ taken, violations, refused });
    });`;
  const url = new URL('../../../dist/shared/leases.js', import.meta.url).href;
  const workers = Array.from({ length: 4 }, (_, row) => new Worker(source, { eval: true, workerData: { memory, row, flags, url, slot: SLOT, tag: TAG } }));
  const results = Promise.all(workers.map((w) => new Promise((resolve, reject) => {
    w.once('message', resolve);
    w.once('error', reject);
  })));
  while ([1, 2, 3, 4].some((k) => Atomics.load(flags, k) === 0)) await new Promise((resolve) => setTimeout(resolve, 5));
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
