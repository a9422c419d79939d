// Warm-up data: one batch row of a tensor repeated to a batch, whichever axis is the batch axis.
import test from 'ava';
import { repeatRow } from '../../../../dist/actors/device/warmup.js';

test('a row repeats along a leading batch axis as whole copies', (t) => {
  const row = Uint8Array.of(1, 2, 3);
  t.deepEqual(Array.from(repeatRow(row, [3, 3], 0, 3)), [1, 2, 3, 1, 2, 3, 1, 2, 3]);
  t.is(repeatRow(row, [3], -1, 1), row, 'an unbatched tensor is its row');
});

test('a row repeats along an inner batch axis block by block', (t) => {
  // dims [2, rows, 2] of one-byte elements, batch axis 1: the row is [[a, b], [c, d]].
  const row = Uint8Array.of(10, 11, 20, 21);
  t.deepEqual(Array.from(repeatRow(row, [2, 3, 2], 1, 3)), [10, 11, 10, 11, 10, 11, 20, 21, 20, 21, 20, 21]);
  // The batch axis last: each element repeated in place.
  t.deepEqual(Array.from(repeatRow(Uint8Array.of(1, 2), [2, 2], 1, 2)), [1, 1, 2, 2]);
});
