// What a pooled gateway reads of a model's reports (remote/fleet-reports.ts): whether the nodes it
// placed a model on carry their parts of its load, by the shares its requests are split by.
import test from 'ava';
import { carriesItsParts } from '../../../dist/remote/fleet-reports.js';

/** A model of `load` as the reports give it: where it ran over the window and its load there. */
const reported = (/** @type {number} */ load, /** @type {Record<string, number>} */ ran) => ({
  name: 'm', bytes: 1, load, resident: undefined, serving: Object.keys(ran), servingLoad: Object.values(ran),
});

test('a node carries its part of a model: its share where the requests are split by shares, else the even split', (t) => {
  const nodes = ['a', 'b', 'c'];
  // Split 0.45 / 0.45 / 0.1 (node c at the shares' floor), and its traffic ran so.
  const bySharesRan = reported(1, { a: 0.45, b: 0.45, c: 0.1 });
  t.true(carriesItsParts(bySharesRan, nodes, [0.45, 0.45, 0.1], 0.5), 'each node carries its share');
  t.false(carriesItsParts(bySharesRan, nodes, undefined, 0.5), 'against the even split, node c reads as left by the others');
  // Shares are relative weights: the same in any unit.
  t.true(carriesItsParts(bySharesRan, nodes, [115, 115, 26], 0.5));
  // A gateway placed apart: node c carries a third of its share (only this gateway sends there).
  t.false(carriesItsParts(reported(1, { a: 0.5, b: 0.47, c: 0.03 }), nodes, [0.45, 0.45, 0.1], 0.5));
  // A node it did not run on at all, and the even split that holds.
  t.false(carriesItsParts(reported(1, { a: 0.5, b: 0.5 }), nodes, undefined, 0.5));
  t.true(carriesItsParts(reported(0.9, { a: 0.3, b: 0.3, c: 0.3 }), nodes, undefined, 0.5));
});
