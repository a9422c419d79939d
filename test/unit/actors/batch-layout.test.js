import test from 'ava';
import { firstRows, firstRowsArray, padRows, padRowsArray } from '../../../dist/actors/batch-layout.js';

const bytes = (...v) => Uint8Array.from(v);

test('padding along axis 0 appends zero rows', (t) => {
  t.deepEqual(padRows(bytes(1, 2, 3, 4), [2, 2], 0, 1, 3), bytes(1, 2, 3, 4, 0, 0));
});

test('padding along an inner axis pads every outer block', (t) => {
  // shape [2, 2] padded along axis 1 to 3: [[1,2],[3,4]] -> [[1,2,0],[3,4,0]]
  t.deepEqual(padRows(bytes(1, 2, 3, 4), [2, 2], 1, 1, 3), bytes(1, 2, 0, 3, 4, 0));
});

test('element width is respected', (t) => {
  const f = new Uint8Array(Float32Array.from([1, 2]).buffer);
  const out = new Float32Array(padRows(f, [2], 0, 4, 4).buffer);
  t.deepEqual([...out], [1, 2, 0, 0]);
});

test('the first rows along axis 0 are a view, along an inner axis a gathered copy', (t) => {
  const data = bytes(1, 2, 3, 4, 5, 6);
  const view = firstRows(data, [3, 2], 0, 1, 2);
  t.deepEqual(view, bytes(1, 2, 3, 4));
  t.is(view.buffer, data.buffer);
  t.deepEqual(firstRows(data, [2, 3], 1, 1, 2), bytes(1, 2, 4, 5));
});

test('the same for element arrays (strings)', (t) => {
  t.deepEqual(padRowsArray(['a', 'b'], [1, 2], 1, 3, ''), ['a', 'b', '']);
  t.deepEqual(firstRowsArray(['a', 'b', 'c', 'd'], [2, 2], 1, 1), ['a', 'c']);
});
