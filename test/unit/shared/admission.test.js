// The admission's counts are one for the whole process: edges on other threads count with the
// same shared memory, so the caps hold for all of them together, and a dead edge's share is given back.
import { Worker } from 'node:worker_threads';
import test from 'ava';
import { Admission } from '../../../dist/shared/admission.js';

/**
 * Threads that each try `tries` times to take a place, hold it a moment and leave, counting with
 * `memory` in their own slots; each reports how many it got and the most requests and bytes it saw
 * admitted at once. Those are counted by the threads themselves, once admitted and until they leave:
 * the admission's own words also hold, for an instant, a refused attempt's count before it is taken
 * back (a thread preempted there on a loaded machine showed 4 of a cap of 3 in flight).
 * @param {SharedArrayBuffer} memory
 */
async function contend(memory, { threads = 4, tries = 2000, cap = 3, maxBytes = 0, bytes = 0 } = {}) {
  const source = `
    const { parentPort, workerData: { memory, held, slot, tries, cap, maxBytes, bytes, url } } = require('node:worker_threads');
    import(url).then(({ Admission }) => {
      const admission = new Admission(cap, maxBytes, memory, slot);
      const admittedNow = new Int32Array(held);
      let admitted = 0, most = 0, mostBytes = 0;
      for (let i = 0; i < tries; i++) {
        try { admission.enter(bytes); } catch { continue; }
        admitted++;
        const n = Atomics.add(admittedNow, 0, 1) + 1;
        const b = Atomics.add(admittedNow, 1, bytes) + bytes;
        most = Math.max(most, n);
        mostBytes = Math.max(mostBytes, b);
        for (let k = 0; k < 5000; k++); // held a moment (long enough for two threads to overlap)
        Atomics.sub(admittedNow, 0, 1);
        Atomics.sub(admittedNow, 1, bytes);
        admission.leave(bytes);
      }
      parentPort.postMessage({ admitted, most, mostBytes });
    });`;
  const url = new URL('../../../dist/shared/admission.js', import.meta.url).href;
  const held = new SharedArrayBuffer(2 * Int32Array.BYTES_PER_ELEMENT);
  const workers = Array.from({ length: threads }, (_, k) => new Worker(source, { eval: true, workerData: { memory, held, slot: k + 1, tries, cap, maxBytes, bytes, url } }));
  return Promise.all(workers.map((w) => new Promise((resolve, reject) => {
    w.once('message', resolve);
    w.once('error', reject);
  })));
}

test('edges on four threads never take the process past max_concurrent_requests, and every place is given back', async (t) => {
  // A cap of 1: two threads running at once (on two cores or more) contend for it at every try.
  const admission = new Admission(1, 0);
  const results = /** @type {{ admitted: number, most: number }[]} */ (await contend(admission.memory, { cap: 1 }));
  t.true(results.every((r) => r.most <= 1), `the most in flight seen: ${results.map((r) => r.most)}`);
  t.true(results.reduce((n, r) => n + r.admitted, 0) > 0);
  t.is(admission.inflight, 0, 'all left');
  t.is(admission.shed, 4 * 2000 - results.reduce((n, r) => n + r.admitted, 0), 'every refusal counted once, by whichever thread refused');
});

test('nor past max_inflight_bytes (a lone request always passes)', async (t) => {
  // Room for one request of 300 bytes in 500: two threads running at once contend for it at every try.
  const admission = new Admission(0, 500, undefined);
  const results = /** @type {{ admitted: number, mostBytes: number }[]} */ (await contend(admission.memory, { cap: 0, maxBytes: 500, bytes: 300 }));
  t.true(results.every((r) => r.mostBytes <= 300), `the most bytes seen: ${results.map((r) => r.mostBytes)}`);
  t.is(admission.inflightBytes, 0);
  const lone = new Admission(0, 100);
  t.notThrows(() => lone.enter(5000), 'alone, past the cap');
  t.throws(() => lone.enter(1), { message: /past endpoints\.max_inflight_bytes = 100/ });
});

test('a request is alone only when no bytes are held as it adds its own, not when no request was counted before it', (t) => {
  // The state a first request meets when three others were admitted beside it after it counted
  // itself and before its bytes landed: 900 bytes held, no request counted ahead of it. Reached
  // here with another edge's request that grew to 900 bytes and then stopped counting itself.
  const main = new Admission(0, 1000);
  const other = new Admission(0, 1000, main.memory, 1);
  other.enter(0);
  other.grow(900);
  other.leave(0);
  t.deepEqual([main.inflight, main.inflightBytes], [0, 900]);
  t.throws(() => main.enter(300), { message: /max_inflight_bytes = 1000/ }, 'not alone: 900 bytes are held');
  t.deepEqual([main.inflight, main.inflightBytes], [0, 900], 'the refusal took nothing');
});

test('an edge that is gone has its share given back, and no one else\'s', (t) => {
  const main = new Admission(0, 0);
  const edge1 = new Admission(0, 0, main.memory, 1);
  const edge2 = new Admission(0, 0, main.memory, 2);
  main.enter(10);
  edge1.enter(100);
  edge1.enter(200);
  edge1.grow(50);
  edge2.enter(1000);
  t.deepEqual([main.inflight, main.inflightBytes], [4, 1360]);
  main.forget(1); // edge 1's thread died with its two requests in flight
  t.deepEqual([main.inflight, main.inflightBytes], [2, 1010]);
  edge2.leave(1000);
  main.leave(10);
  t.deepEqual([main.inflight, main.inflightBytes], [0, 0]);
});
