import test from 'ava';
import { concatRows, concatRowsArray, sliceRows, sliceRowsArray } from '../../../../dist/actors/device/batch-layout.js';
import { Staging } from '../../../../dist/actors/device/execution.js';

const bytes = (/** @type {number[]} */ ...v) => Uint8Array.from(v);

test('joining along axis 0 appends parts, then zero rows up to the target', (t) => {
  const out = concatRows([{ data: bytes(1, 2), shape: [1, 2] }, { data: bytes(3, 4, 5, 6), shape: [2, 2] }], 0, 1, 4);
  t.deepEqual(out, bytes(1, 2, 3, 4, 5, 6, 0, 0));
});

test('joining along an inner axis interleaves every outer block', (t) => {
  // [[1],[2]] and [[3,4],[5,6]] joined on axis 1, padded to 4 columns
  const out = concatRows([{ data: bytes(1, 2), shape: [2, 1] }, { data: bytes(3, 4, 5, 6), shape: [2, 2] }], 1, 1, 4);
  t.deepEqual(out, bytes(1, 3, 4, 0, 2, 5, 6, 0));
});

test('element width is respected', (t) => {
  const f = new Uint8Array(Float32Array.from([1, 2]).buffer);
  t.deepEqual([...new Float32Array(concatRows([{ data: f, shape: [2] }], 0, 4, 4).buffer)], [1, 2, 0, 0]);
});

test('joined into reused memory, padding rows are zeroed over what the last execution left', (t) => {
  const staging = new Staging();
  const alloc = (/** @type {number} */ n) => staging.take(n);
  staging.beginExecution();
  concatRows([{ data: bytes(9, 9, 9, 9, 9, 9, 9, 9), shape: [2, 4] }], 1, 1, 4, alloc); // dirties the buffer
  staging.beginExecution();
  const out = concatRows([{ data: bytes(1, 2), shape: [2, 1] }, { data: bytes(3, 4), shape: [2, 1] }], 1, 1, 4, alloc);
  t.deepEqual(out, bytes(1, 3, 0, 0, 2, 4, 0, 0));
});

test('staging hands each input of an execution its own memory and reuses it for the next', (t) => {
  const staging = new Staging();
  staging.beginExecution();
  const a = staging.take(1000);
  const b = staging.take(10);
  t.not(a.buffer, b.buffer, 'two inputs of one execution never share memory');
  t.is(a.byteLength, 1000);
  staging.beginExecution();
  const a2 = staging.take(600);
  t.is(a2.buffer, a.buffer, 'the next execution\'s first input reuses the first buffer');
  t.is(a2.byteLength, 600);
  const b2 = staging.take(4000);
  t.not(b2.buffer, b.buffer, 'a larger input gets a larger buffer');
  t.is(staging.keptBytes, 1000 + 4000);
  staging.beginExecution();
  staging.take(100 * 2 ** 20);
  t.is(staging.keptBytes, 1000 + 4000, 'a buffer over 64 MiB is not kept');
});

test('slicing along axis 0 is a view; along an inner axis a gathered copy', (t) => {
  const data = bytes(1, 2, 3, 4, 5, 6);
  const view = sliceRows(data, [3, 2], 0, 1, 1, 2);
  t.deepEqual(view, bytes(3, 4, 5, 6));
  t.is(view.buffer, data.buffer);
  t.deepEqual(sliceRows(data, [2, 3], 1, 1, 1, 2), bytes(2, 3, 5, 6));
});

test('slicing undoes joining, for every part', (t) => {
  const parts = [{ data: bytes(1, 2, 3), shape: [3, 1] }, { data: bytes(4), shape: [1, 1] }, { data: bytes(5, 6), shape: [2, 1] }];
  const joined = concatRows(parts, 0, 1, 8);
  let from = 0;
  for (const p of parts) {
    t.deepEqual(sliceRows(joined, [8, 1], 0, 1, from, p.shape[0]), p.data);
    from += p.shape[0];
  }
});

test('the same for element arrays (strings)', (t) => {
  const joined = concatRowsArray([{ items: ['a', 'b'], shape: [2, 1] }, { items: ['c', 'd'], shape: [2, 1] }], 1, 3, '');
  t.deepEqual(joined, ['a', 'c', '', 'b', 'd', '']);
  t.deepEqual(sliceRowsArray(joined, [2, 3], 1, 1, 1), ['c', 'd']);
  t.deepEqual(sliceRowsArray(['a', 'b', 'c', 'd'], [4], 0, 1, 2), ['b', 'c']);
});
