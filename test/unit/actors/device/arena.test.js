// The device arena: first-fit blocks in one buffer, merged holes, compaction that keeps every byte.
import test from 'ava';
import { ARENA_ALIGNMENT, Arena } from '../../../../dist/actors/device/arena.js';
import { present } from '../../../helpers/checks.js';

test('blocks are aligned, counted at their aligned size, and refused when no hole is large enough', (t) => {
  const arena = new Arena(1024);
  const a = present(arena.alloc(10));
  const b = present(arena.alloc(100));
  t.is(a.offset % ARENA_ALIGNMENT, 0);
  t.is(b.offset % ARENA_ALIGNMENT, 0);
  t.is(arena.used, 64 + 128);
  t.is(arena.alloc(1024 - 64 - 128 + 1), null);
  t.truthy(arena.alloc(1024 - 64 - 128));
  t.is(arena.free, 0);
});

test('released neighbours merge into one hole', (t) => {
  const arena = new Arena(64 * 4);
  const blocks = [0, 1, 2, 3].map(() => present(arena.alloc(64)));
  arena.release(blocks[1]);
  arena.release(blocks[3]);
  t.is(arena.largestHole, 64);
  arena.release(blocks[2]);
  t.is(arena.largestHole, 192, 'holes 1, 2 and 3 became one');
  t.throws(() => arena.release(blocks[2]), { message: /not live/ });
});

test('compaction slides blocks down, keeps their bytes and updates their handles', (t) => {
  const arena = new Arena(64 * 8);
  const blocks = Array.from({ length: 8 }, (_, i) => {
    const b = present(arena.alloc(64));
    arena.view(b).fill(i + 1);
    return b;
  });
  for (const i of [0, 2, 4, 6]) arena.release(blocks[i]);
  t.is(arena.largestHole, 64, 'half free, in pieces');
  t.is(arena.alloc(128), null);
  const moved = arena.compact();
  t.is(moved, 4 * 64);
  t.is(arena.largestHole, 4 * 64);
  for (const i of [1, 3, 5, 7]) t.true(arena.view(blocks[i]).every((v) => v === i + 1), `block ${i} kept its bytes`);
  t.deepEqual([1, 3, 5, 7].map((i) => blocks[i].offset), [0, 64, 128, 192]);
  t.truthy(arena.alloc(256));
});

test('preallocation touches the arena; capacity is rounded down to the alignment', (t) => {
  const arena = new Arena(1000, { preallocate: true });
  t.is(arena.capacity, 960);
  t.is(arena.bytes.byteLength, 960);
  t.is(new Arena(0).alloc(1), null);
});
