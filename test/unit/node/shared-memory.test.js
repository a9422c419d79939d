// The main thread's registry of shared-memory regions, CUDA regions beside system ones: one
// namespace, each kind's status and unregister their own, a registration that the devices refuse
// leaves nothing behind, and a region in use closes only with its last request, here or on an
// thread's rooms (their holds in shared memory, actors/rooms/regions.ts).
import test from 'ava';
import { SharedMemoryRegistry } from '../../../dist/node/shared-memory.js';
import { createRegion, destroyRegion } from '../../../dist/client/shared-memory.js';
import { Regions } from '../../../dist/actors/rooms/regions.js';
import { Leases } from '../../../dist/shared/leases.js';

const key = `/stowage_unit_registry_${process.pid}`;
test.before(() => createRegion(key, 4096));
test.after.always(() => destroyRegion(key));

const handle = Uint8Array.from({ length: 64 }, (_, i) => i);

test('a CUDA region is opened by the devices before it is registered, and its slices carry its GPU and handle', async (t) => {
  /** @type {number[]} */
  const forgotten = [];
  /** @type {Regions | undefined} */
  let grows;
  const holds = Leases.create(0, (segment) => grows?.adopt(segment)); // segments go to the rooms as the server sends them
  const registry = new SharedMemoryRegistry((id) => forgotten.push(id), holds);
  const rooms = new Regions(holds.shape, 0, () => registry.released()); // the main thread's rooms
  grows = rooms;
  registry.watch((name, region) => rooms.set(name, region));
  /** @type {import('../../../dist/shared/channels/inference.js').RegionSlice[]} */
  const opened = [];
  const region = await registry.registerCuda('gpu_in', 1, handle, 1024, async (whole) => {
    t.false(rooms.knows('gpu_in'), 'the rooms hear of it only once its GPU\'s devices have it open');
    opened.push(whole);
  });
  t.true(rooms.knows('gpu_in'));
  t.is(region.kind, 'cuda');
  t.is(opened.length, 1);
  t.like(opened[0], { offset: 0, byteSize: 1024, fd: -1, cuda: { gpu: 1 } });
  t.deepEqual([...(opened[0].cuda?.handle ?? [])], [...handle]);
  const slice = rooms.slice('input "x"', 'gpu_in', 256, 512);
  t.like(slice, { offset: 256, byteSize: 512, key: `cuda:${region.id}`, cuda: { gpu: 1 } });
  t.throws(() => rooms.slice('input "x"', 'gpu_in', 768, 512), { message: /offset 768 \+ byte_size 512 is outside region "gpu_in" of 1024 bytes/ });
  // Held by a request in flight, unregistered: closed only once the request is answered.
  rooms.hold([slice]);
  registry.unregister('gpu_in', 'cuda');
  t.deepEqual(forgotten, []);
  t.deepEqual(registry.status('', 'cuda'), []);
  rooms.release([slice]);
  t.deepEqual(forgotten, [region.id]);
});

test('system and CUDA regions share one namespace, and each kind sees only its own', async (t) => {
  const registry = new SharedMemoryRegistry(() => undefined);
  registry.register('sys', key, 0, 4096);
  await registry.registerCuda('gpu', 0, handle, 64, async () => undefined);
  await t.throwsAsync(registry.registerCuda('sys', 0, handle, 64, async () => undefined), { message: /already/ });
  t.throws(() => registry.register('gpu', key, 0, 64), { message: /already/ });
  t.deepEqual(registry.status('').map((r) => r.name), ['sys']);
  t.deepEqual(registry.status('', 'cuda').map((r) => r.name), ['gpu']);
  t.throws(() => registry.status('gpu'), { message: /gpu/ }, 'a CUDA region is not a system one');
  registry.unregister('gpu'); // the system kind: not this one
  t.is(registry.status('', 'cuda').length, 1);
  registry.unregister('', 'cuda');
  t.deepEqual(registry.status('', 'cuda'), []);
  t.is(registry.status('').length, 1, 'the system region stays');
  registry.unregister('');
});

test('a CUDA registration the devices refuse leaves nothing: the name is free again and the devices forget it', async (t) => {
  /** @type {number[]} */
  const forgotten = [];
  const registry = new SharedMemoryRegistry((id) => forgotten.push(id));
  await t.throwsAsync(registry.registerCuda('bad', 0, handle, 64, async () => {
    throw new Error('GPU 0 cannot open its IPC handle');
  }), { message: 'GPU 0 cannot open its IPC handle' });
  t.deepEqual(registry.status('', 'cuda'), []);
  t.is(forgotten.length, 1, 'a device that did open it drops it');
  await registry.registerCuda('bad', 0, handle, 64, async () => undefined);
  t.is(registry.status('bad', 'cuda').length, 1);
  await t.throwsAsync(registry.registerCuda('zero', 0, handle, 0, async () => undefined), { message: /byte_size 0 must be whole numbers, byte_size > 0/ });
});

test('shared with the edges: each region in a hold slot tagged with its id; an edge holds what its requests name, and an unregister closes the region at the last hold, here or at an edge', (t) => {
  /** @type {number[]} */
  const forgotten = [];
  const holds = Leases.create(2);
  const registry = new SharedMemoryRegistry((id) => forgotten.push(id), holds);
  /** @type {[string, any][]} */
  const heard = [];
  const before = registry.register('early', key, 0, 1024);
  registry.watch((name, region) => heard.push([name, region]));
  t.deepEqual(heard.map(([name, r]) => [name, r?.id]), [['early', before.id]], 'a region registered before sharing is shared too');
  const region = registry.register('r', key, 1024, 2048);
  const [, sent] = heard[1];
  t.like(sent, { id: region.id, kind: 'system', key, offset: 1024, byteSize: 2048 });
  t.true(holds.isOpen(sent.slot, region.id), 'its slot opened before the edges hear of it');
  t.deepEqual(registry.edgeRegions().map(([name]) => name), ['early', 'r'], 'what a new edge starts with');

  // Edge 1 takes a request naming r.
  let idle = 0;
  const edge = new Regions(holds.shape, 1, () => idle++);
  for (const [name, r] of heard) edge.set(name, r);
  t.true(edge.knows('r'));
  t.false(edge.knows('other'), 'one it has not heard of is the main thread\'s to find');
  const slice = edge.slice('input "x"', 'r', 256, 512);
  t.deepEqual(slice, registry.slice('input "x"', 'r', 256, 512), 'the same slice the main thread makes');
  t.throws(() => edge.slice('input "x"', 'r', 2000, 512), { message: /input "x": offset 2000 \+ byte_size 512 is outside region "r" of 2048 bytes/ });
  edge.hold([slice]);
  t.is(holds.held(sent.slot), 1);

  // Unregistered while the edge's request reads it: closed for new holds, open until its last.
  registry.unregister('r');
  t.deepEqual(heard.at(-1), ['r', null]);
  edge.set('r', null);
  t.deepEqual(forgotten, [], 'an edge still holds it');
  const late = new Regions(holds.shape, 0, () => undefined);
  late.set('r', sent);
  t.throws(() => late.hold([slice]), { message: /no shared-memory region "r" is registered/ }, 'no new hold on an unregistered region');
  // A request checked a moment before its edge heard of the unregister (its region forgotten there
  // at once, no hold of its own on it): refused naming the region, not its id.
  const checking = new Regions(holds.shape, 0, () => undefined);
  checking.set('r', sent);
  const checked = checking.slice('input "x"', 'r', 0, 64);
  checking.set('r', null);
  t.throws(() => checking.hold([checked]), { message: /no shared-memory region "r" is registered/ });
  t.is(holds.held(sent.slot), 1, 'a failed hold holds nothing');
  edge.release([slice]);
  t.is(idle, 1, 'the edge\'s last hold on an unregistered region tells the main thread');
  registry.released();
  t.deepEqual(forgotten, [region.id], 'closed once nothing holds it');

  // The slot goes to the next region, under a new tag: a stale hold on the old one fails.
  const next = registry.register('n', key, 0, 64);
  const [, sentNext] = heard.at(-1) ?? [];
  t.is(sentNext.id, next.id);
  t.false(new Leases(holds.shape, 0).acquire(sent.slot, region.id), 'the old tag opens its slot no more, reused or not');
  registry.unregister('');
});

test('the main thread holds in its own row of the same holds: a region unregistered under its request closes at its release', (t) => {
  /** @type {number[]} */
  const forgotten = [];
  /** @type {Regions | undefined} */
  let grows;
  const holds = Leases.create(1, (segment) => grows?.adopt(segment));
  const registry = new SharedMemoryRegistry((id) => forgotten.push(id), holds);
  // The main thread's rooms: the last row, told in-process, their last release telling the registry.
  const main = new Regions(holds.shape, 1, () => registry.released());
  grows = main;
  registry.watch((name, region) => main.set(name, region));
  t.false(registry.serves('m'));
  const region = registry.register('m', key, 0, 1024);
  t.true(registry.serves('m'));
  t.true(main.knows('m'), 'told before register returns');
  const slice = main.slice('input "x"', 'm', 0, 64);
  main.hold([slice, slice]);
  t.is(holds.heldHere(0), 2, 'two holds in the main thread\'s row of its slot (the first taken)');
  registry.unregister('m');
  t.false(main.knows('m'));
  t.throws(() => main.hold([slice]), { message: /no shared-memory region "m" is registered/ }, 'no new hold once unregistered, here either');
  main.release([slice]);
  t.deepEqual(forgotten, [], 'one hold left');
  main.release([slice]);
  t.deepEqual(forgotten, [region.id], 'closed at the last');
  const again = registry.register('m2', key, 0, 64);
  t.not(again.id, region.id);
  registry.unregister('');
  t.is(forgotten.length, 2);
});
