// The weight cache's residency rules, on a real arena with an in-memory stand-in for weights.bin.
import test from 'ava';
import { Arena } from '../../../../dist/actors/device/arena.js';
import { WeightCache } from '../../../../dist/actors/device/weight-cache.js';
import { allocateDeviceMemory } from '../../../../dist/native/ort.js';
import { stowageThrows } from '../../../helpers/errors.js';
import { present } from '../../../helpers/checks.js';

/** A catalog: model name -> tensors { key, byteLength, file }, with the bytes of each key. */
function catalog() {
  /** @type {Map<string, Uint8Array>} */
  const bytes = new Map();
  /** @type {string[]} */
  const reads = [];
  /**
   * @param {string} key
   * @param {number} byteLength
   * @param {number} fill
   */
  const tensor = (key, byteLength, fill) => {
    bytes.set(key, new Uint8Array(byteLength).fill(fill));
    return { key, byteLength, file: `/cache/${key}` };
  };
  /**
   * @param {import('../../../../dist/actors/device/weight-cache.js').TensorSource} source
   * @param {Uint8Array} into
   */
  const readTensor = (source, into) => {
    reads.push(source.key);
    into.set(present(bytes.get(source.key)));
  };
  return { tensor, readTensor, reads };
}

/**
 * @param {number} capacity
 * @param {(source: import('../../../../dist/actors/device/weight-cache.js').TensorSource, into: Uint8Array) => void} readTensor
 * @param {Partial<import('../../../../dist/actors/device/weight-cache.js').WeightCacheOptions>} [options]
 */
function cacheOf(capacity, readTensor, options = {}) {
  let now = 0;
  const cache = new WeightCache(new Arena(capacity), { readTensor, compactionInterval: 0, thrashWindowMs: 10_000, now: () => now, ...options });
  return { cache, advance: (/** @type {number} */ ms) => { now += ms; } };
}

test('least recently used models are evicted, and resident bytes never exceed the budget', (t) => {
  const c = catalog();
  const { cache } = cacheOf(64 * 3, c.readTensor);
  for (const [i, name] of ['a', 'b', 'c', 'd'].entries()) cache.add(`${name}#1`, name, 'system', [c.tensor(name, 64, i + 1)]);
  t.false(cache.isResident('a#1'), 'system models come on only when used');
  for (const name of ['a', 'b', 'c']) t.false(cache.ensureResident(`${name}#1`).hit);
  cache.ensureResident('a#1'); // a is now more recent than b
  const outcome = cache.ensureResident('d#1');
  t.deepEqual(outcome.evicted, ['b#1']);
  t.is(outcome.loadedBytes, 64);
  t.true(cache.residentBytes <= cache.budget);
  t.true(cache.deviceView('d').every((v) => v === 4));
  t.true(cache.ensureResident('a#1').hit);
});

test('system models are read from disk once; unpinned ones on every load', (t) => {
  const c = catalog();
  const { cache } = cacheOf(64, c.readTensor);
  cache.add('s#1', 's', 'system', [c.tensor('s', 64, 1)]);
  cache.add('u#1', 'u', 'unpinned', [c.tensor('u', 64, 2)]);
  t.deepEqual(c.reads, ['s'], 'the system model is read into host RAM at load');
  for (let i = 0; i < 3; i++) {
    t.is(cache.ensureResident('s#1').diskBytes, 0);
    t.is(cache.ensureResident('u#1').diskBytes, 64);
  }
  t.deepEqual(c.reads, ['s', 'u', 'u', 'u']);
  t.is(cache.hostBytes, 64);
});

test('device models come on at load and are never evicted; one that cannot fit fails with the figures', (t) => {
  const c = catalog();
  const { cache } = cacheOf(64 * 2, c.readTensor);
  t.false(present(cache.add('pinned#1', 'pinned', 'device', [c.tensor('p', 64, 9)])).hit);
  t.true(cache.isResident('pinned#1'));
  cache.add('x#1', 'x', 'system', [c.tensor('x', 64, 1)]);
  cache.add('y#1', 'y', 'system', [c.tensor('y', 64, 2)]);
  for (let i = 0; i < 4; i++) {
    cache.ensureResident('x#1');
    cache.ensureResident('y#1');
    t.true(cache.isResident('pinned#1'));
  }
  cache.add('big#1', 'big', 'system', [c.tensor('big', 128, 3)]);
  const err = stowageThrows(t, () => cache.ensureResident('big#1'));
  t.is(err.code, 'STOWAGE_WEIGHTS_TOO_LARGE');
  t.regex(err.message, /model "big" needs 128 bytes of weights on the device, but the device's weight budget is 128 bytes, of which 64 are held by models with residency: device/);
  t.true(cache.isResident('pinned#1'));
  const huge = stowageThrows(t, () => cache.add('huge#1', 'huge', 'device', [c.tensor('huge', 4096, 4)]));
  t.regex(huge.message, /needs 4096 bytes .* budget is 128 bytes/);
  t.false(cache.has('huge#1'), 'a device model that cannot fit is not registered');
});

test('a tensor shared by several models is stored once and freed with its last user', (t) => {
  const c = catalog();
  const { cache } = cacheOf(64 * 4, c.readTensor);
  const backbone = c.tensor('backbone', 128, 7);
  cache.add('m1#1', 'm1', 'system', [backbone, c.tensor('head1', 64, 1)]);
  cache.add('m2#1', 'm2', 'system', [backbone, c.tensor('head2', 64, 2)]);
  cache.ensureResident('m1#1');
  const second = cache.ensureResident('m2#1');
  t.is(second.loadedBytes, 64, 'only the head was copied');
  t.is(cache.residentBytes, 256);
  t.is(cache.logicalResidentBytes, 384);
  t.is(cache.hostBytes, 256, 'host RAM holds the backbone once too');
  cache.remove('m1#1');
  t.is(cache.residentBytes, 192, 'head1 freed, the backbone stays for m2');
  t.true(cache.deviceView('backbone').every((v) => v === 7));
  cache.remove('m2#1');
  t.is(cache.residentBytes, 0);
  t.is(cache.hostBytes, 0);
});

test('a load claims its shared tensors before evicting, so the eviction cannot free them', (t) => {
  const c = catalog();
  const { cache } = cacheOf(64 * 3, c.readTensor);
  const shared = c.tensor('shared', 64, 5);
  cache.add('old#1', 'old', 'system', [shared, c.tensor('old', 64, 1)]);
  cache.add('new#1', 'new', 'system', [shared, c.tensor('new', 128, 2)]);
  cache.ensureResident('old#1');
  const outcome = cache.ensureResident('new#1');
  t.deepEqual(outcome.evicted, ['old#1']);
  t.is(outcome.loadedBytes, 128, 'the shared tensor stayed; only the new one came on');
  t.true(cache.deviceView('shared').every((v) => v === 5));
  t.is(cache.residentBytes, 192);
});

test('fragmented free space is compacted for a load, and views read the right bytes afterwards', (t) => {
  const c = catalog();
  const { cache } = cacheOf(64 * 4, c.readTensor);
  for (const [i, name] of ['a', 'b', 'c', 'd'].entries()) {
    cache.add(`${name}#1`, name, 'system', [c.tensor(name, 64, i + 1)]);
    cache.ensureResident(`${name}#1`);
  }
  cache.remove('a#1');
  cache.remove('c#1');
  const epochBefore = cache.epoch('d#1');
  cache.add('wide#1', 'wide', 'system', [c.tensor('wide', 128, 9)]);
  const outcome = cache.ensureResident('wide#1');
  t.deepEqual(outcome.evicted, []);
  t.true(outcome.compactedBytes > 0);
  t.not(cache.epoch('d#1'), epochBefore, 'moved models get a new epoch');
  t.true(cache.deviceView('b').every((v) => v === 2));
  t.true(cache.deviceView('d').every((v) => v === 4));
  t.true(cache.deviceView('wide').every((v) => v === 9));
});

test('compaction_interval compacts every N on-demand loads', (t) => {
  const c = catalog();
  const { cache } = cacheOf(64 * 4, c.readTensor, { compactionInterval: 2 });
  for (const name of ['a', 'b', 'c', 'd']) cache.add(`${name}#1`, name, 'system', [c.tensor(name, 64, 1)]);
  for (const name of ['a', 'b', 'c']) cache.ensureResident(`${name}#1`); // a at 0, b at 64, c at 128
  cache.remove('a#1');
  cache.remove('b#1');
  // The fourth load lands at 0 and leaves a hole under c: on the interval, so it is closed.
  t.is(cache.ensureResident('d#1').compactedBytes, 64);
  t.is(cache.arena.largestHole, 128);
});

test('thrash is reported once per window when the models in use need more than the budget', (t) => {
  const c = catalog();
  const { cache, advance } = cacheOf(64 * 2, c.readTensor);
  for (const name of ['a', 'b', 'c']) cache.add(`${name}#1`, name, 'system', [c.tensor(name, 64, 1)]);
  t.falsy(cache.ensureResident('a#1').thrash);
  t.falsy(cache.ensureResident('b#1').thrash);
  const report = cache.ensureResident('c#1').thrash;
  t.deepEqual(report, { windowSeconds: 10, models: 3, bytes: 192, budget: 128 });
  t.falsy(cache.ensureResident('a#1').thrash, 'once per window');
  advance(20_000);
  t.falsy(cache.ensureResident('b#1').thrash, 'the old touches left the window');
});

test('residency changes move the host copy and pin or unpin', (t) => {
  const c = catalog();
  const { cache } = cacheOf(64 * 2, c.readTensor);
  cache.add('m#1', 'm', 'unpinned', [c.tensor('m', 64, 3)]);
  t.is(cache.hostBytes, 0);
  cache.setResidency('m#1', 'system');
  t.is(cache.hostBytes, 64);
  cache.setResidency('m#1', 'device');
  t.true(cache.isResident('m#1'));
  t.is(cache.residencyOf('m#1'), 'device');
  t.is(cache.weightBytes('m#1'), 64);
  cache.setResidency('m#1', 'unpinned');
  t.is(cache.hostBytes, 0);
  t.true(cache.isResident('m#1'), 'unpinning does not evict; it makes the model evictable');
});

test('a load that fails on its Nth tensor is undone: the arena, the resident bytes and every reference count are as before', (t) => {
  const c = catalog();
  let failOn = '';
  const readTensor = (/** @type {import('../../../../dist/actors/device/weight-cache.js').TensorSource} */ source, /** @type {Uint8Array} */ into) => {
    if (source.key === failOn) throw new Error(`cannot read ${source.key}`);
    c.readTensor(source, into);
  };
  const { cache } = cacheOf(64 * 8, readTensor);
  // `shared` is held by a resident model; `next` shares it and has three tensors of its own.
  const shared = c.tensor('shared', 64, 9);
  cache.add('held#1', 'held', 'unpinned', [shared, c.tensor('held-own', 64, 1)]);
  cache.ensureResident('held#1');
  cache.add('next#1', 'next', 'unpinned', [shared, c.tensor('n1', 64, 2), c.tensor('n2', 64, 3), c.tensor('n3', 64, 4)]);
  const before = { used: cache.residentBytes, largest: cache.arena.largestHole };
  failOn = 'n3'; // the third missing tensor: two are in the arena when it fails
  t.throws(() => cache.ensureResident('next#1'), { message: 'cannot read n3' });
  t.is(cache.residentBytes, before.used, 'the blocks it took are given back');
  t.is(cache.arena.largestHole, before.largest, 'and the arena is in one piece as before');
  t.false(cache.isResident('next#1'));
  // `shared` was claimed by the failed load: had the claim leaked, evicting `held` would not free it.
  cache.add('big#1', 'big', 'unpinned', [c.tensor('big', 64 * 8, 5)]);
  t.deepEqual(cache.ensureResident('big#1').evicted, ['held#1'], 'the whole arena is free once held is gone');
  t.is(cache.residentBytes, 64 * 8);
  // The failed model loads once its tensor can be read.
  failOn = '';
  cache.ensureResident('next#1');
  t.true(cache.deviceView('n3').every((v) => v === 4));
  t.true(cache.deviceView('shared').every((v) => v === 9));
});

// Uploads beside execution (beginUpload): copied in ahead of the model's turn, reported at it.

test('an upload beside execution copies the missing tensors in ahead, and the model\'s turn reports the load with its hidden copy time', (t) => {
  const c = catalog();
  const { cache } = cacheOf(64 * 4, c.readTensor);
  const shared = c.tensor('shared', 64, 9);
  cache.add('a#1', 'a', 'system', [shared, c.tensor('a', 64, 1)]);
  cache.add('b#1', 'b', 'system', [shared, c.tensor('b', 64 * 2, 2)]);
  cache.ensureResident('a#1');
  t.is(cache.beginUpload('b#1', new Set(['a#1'])), 'started');
  t.true(cache.isUploading('b#1'));
  t.false(cache.isResident('b#1'), 'not resident until its turn waits for it');
  t.is(cache.uploadsInFlight, 1);
  t.is(cache.residentBytes, 64 * 4, 'its blocks are the arena\'s from the start: the budget holds');
  t.is(cache.beginUpload('b#1', new Set()), 'skipped', 'on its way already');
  const outcome = cache.ensureResident('b#1');
  t.false(outcome.hit);
  t.is(outcome.loadedBytes, 64 * 2, 'only what was missing: the shared tensor was claimed');
  t.is(outcome.diskBytes, 0);
  t.true(typeof outcome.hiddenMs === 'number' && outcome.hiddenMs >= 0);
  t.deepEqual(outcome.evicted, []);
  t.true(cache.isResident('b#1'));
  t.false(cache.isUploading('b#1'));
  t.true(cache.deviceView('b').every((v) => v === 2));
  t.true(cache.deviceView('shared').every((v) => v === 9));
  t.true(cache.ensureResident('b#1').hit, 'reported once');
});

test('an upload evicts only least-recently-used models outside what runs and waits ahead of it, else finds no room', (t) => {
  const c = catalog();
  const { cache } = cacheOf(64 * 3, c.readTensor);
  for (const [i, name] of ['a', 'b', 'c', 'd'].entries()) cache.add(`${name}#1`, name, 'system', [c.tensor(name, 64, i + 1)]);
  for (const name of ['a', 'b', 'c']) cache.ensureResident(`${name}#1`);
  // a is the LRU, but it runs (or waits ahead): b goes instead.
  t.is(cache.beginUpload('d#1', new Set(['a#1'])), 'started');
  t.false(cache.isResident('b#1'));
  t.true(cache.isResident('a#1') && cache.isResident('c#1'));
  t.deepEqual(cache.ensureResident('d#1').evicted, ['b#1']);
  // Every resident model is kept: nothing may go, so nothing starts and nothing changed.
  t.is(cache.beginUpload('b#1', new Set(['a#1', 'c#1', 'd#1'])), 'no room');
  t.true(cache.isResident('a#1') && cache.isResident('c#1') && cache.isResident('d#1'));
  t.false(cache.isUploading('b#1'));
  t.is(cache.residentBytes, 64 * 3);
});

test('an upload never compacts: room in pieces is no room, and the arena is left as it was', (t) => {
  const c = catalog();
  const { cache } = cacheOf(64 * 4, c.readTensor);
  for (const [i, name] of ['a', 'b', 'c', 'd'].entries()) cache.add(`${name}#1`, name, 'system', [c.tensor(name, 64, i + 1)]);
  for (const name of ['a', 'b', 'c', 'd']) cache.ensureResident(`${name}#1`);
  cache.remove('b#1');
  cache.remove('d#1'); // free: 128 bytes in two holes of 64
  cache.add('wide#1', 'wide', 'system', [c.tensor('wide', 128, 7)]);
  const offsets = () => [cache.deviceView('a').byteOffset, cache.deviceView('c').byteOffset];
  const before = offsets();
  t.is(cache.beginUpload('wide#1', new Set(['a#1', 'c#1'])), 'no room');
  t.deepEqual(offsets(), before, 'nothing moved');
  t.is(cache.residentBytes, 64 * 2);
  // At its turn the load compacts as always.
  t.true(cache.ensureResident('wide#1').compactedBytes > 0);
  t.true(cache.deviceView('wide').every((v) => v === 7));
});

test('on a device whose host copies are pinned, a model whose copies could not be pinned is not uploaded ahead: its copy would be synchronous', (t) => {
  const c = catalog();
  let pinnable = false;
  const { cache } = cacheOf(64 * 4, c.readTensor, { pinHost: () => (pinnable ? { release() {} } : undefined) });
  cache.add('p#1', 'p', 'system', [c.tensor('p', 64, 1)]); // its host copy could not be pinned
  pinnable = true;
  cache.add('q#1', 'q', 'system', [c.tensor('q', 64, 2)]);
  t.is(cache.beginUpload('p#1', new Set()), 'skipped', 'pageable: loads at its turn');
  t.is(cache.beginUpload('q#1', new Set()), 'started', 'pinned: beside execution');
  t.false(cache.ensureResident('p#1').hit);
  t.true(cache.deviceView('p').every((v) => v === 1));
});

test('unpinned models are not uploaded ahead: they have no host copy to copy from', (t) => {
  const c = catalog();
  const { cache } = cacheOf(64 * 2, c.readTensor);
  cache.add('u#1', 'u', 'unpinned', [c.tensor('u', 64, 1)]);
  t.is(cache.beginUpload('u#1', new Set()), 'skipped');
  t.is(cache.residentBytes, 0);
});

test('a cold load, a compaction or a removal first waits for the uploads in flight; a landed upload reports its load at its model\'s next use', (t) => {
  const c = catalog();
  const { cache } = cacheOf(64 * 4, c.readTensor);
  for (const [i, name] of ['a', 'b', 'c'].entries()) cache.add(`${name}#1`, name, 'system', [c.tensor(name, 64, i + 1)]);
  t.is(cache.beginUpload('a#1', new Set()), 'started');
  // b's cold load waits for a's upload: a becomes resident, its load not yet reported.
  t.false(cache.ensureResident('b#1').hit);
  t.true(cache.isResident('a#1'));
  t.false(cache.isUploading('a#1'));
  const landed = cache.ensureResident('a#1');
  t.false(landed.hit, 'reported at its first use');
  t.is(landed.loadMs, 0, 'its batch waited for none of it');
  t.true(typeof landed.hiddenMs === 'number');
  t.true(cache.ensureResident('a#1').hit);
  // An upload is settled before a compaction and before its model's removal.
  t.is(cache.beginUpload('c#1', new Set()), 'started');
  cache.compact();
  t.false(cache.isUploading('c#1'));
  t.true(cache.deviceView('c').every((v) => v === 3));
  cache.add('d#1', 'd', 'system', [c.tensor('d', 64, 4)]);
  t.is(cache.beginUpload('d#1', new Set()), 'started');
  cache.remove('d#1');
  t.is(cache.uploadsInFlight, 0);
  t.is(cache.residentBytes, 64 * 3, 'its block went with it');
});

test('uploads over device memory (the GPU arena\'s path, on the CPU device) land the bytes and time the copies', (t) => {
  const c = catalog();
  const memory = allocateDeviceMemory(64 * 8, 'cpu');
  const cache = new WeightCache(new Arena(64 * 8, { device: memory }), { readTensor: c.readTensor, compactionInterval: 0, thrashWindowMs: 10_000 });
  cache.add('a#1', 'a', 'system', [c.tensor('a1', 64, 1), c.tensor('a2', 64 * 3, 2)]);
  t.is(cache.beginUpload('a#1', new Set()), 'started');
  const outcome = cache.ensureResident('a#1');
  t.is(outcome.loadedBytes, 64 * 4);
  t.true(typeof outcome.hiddenMs === 'number' && outcome.hiddenMs >= 0);
  const back = new Uint8Array(64 * 4);
  const data = /** @type {import('../../../../dist/native/ort.js').DeviceSlice} */ (cache.deviceData('a2'));
  memory.copyToHost(back.subarray(0, 64 * 3), data.offset);
  t.true(back.subarray(0, 64 * 3).every((v) => v === 2));
  t.throws(() => memory.waitUpload(999), { message: /not in flight/ });
});
