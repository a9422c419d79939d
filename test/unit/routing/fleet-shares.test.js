// How a pooled gateway splits a model's requests between its nodes (routing/fleet-shares.ts): its
// load poured to the lowest measured levels (what it and the other split models ran taken out
// first), a node without a fresh report kept at the even split, devices weighed, a floor on every
// node, and the same shares whatever order the models come in.
import test from 'ava';
import { SHARE_FLOOR, splitShares } from '../../../dist/routing/fleet-shares.js';

/** @param {[string, number, number?][]} rows node, measured load, devices */
const measured = (rows) => new Map(rows.map(([id, load, devices = 1]) => [id, { load, devices }]));
const sum = (/** @type {number[]} */ xs) => xs.reduce((a, b) => a + b, 0);

test('a model on two nodes pours its load into the lower: both end at one level', (t) => {
  // Measured 1.2 and 0.8, of which the model ran 0.3 on each: the rest is 0.9 and 0.5. Its 0.6 at
  // one level over both: 1.0 each, 0.1 on a and 0.5 on b.
  const shares = splitShares([{ name: 'm', nodes: ['a', 'b'], load: 0.6, ranOn: ['a', 'b'], ranLoad: [0.3, 0.3] }], measured([['a', 1.2], ['b', 0.8]]));
  const [a, b] = shares.get('m') ?? [];
  t.true(Math.abs(a - 1 / 6) <= 1 / 256 && Math.abs(b - 5 / 6) <= 1 / 256, `${a} ${b}`);
  t.true(Math.abs(0.9 + 0.6 * a - (0.5 + 0.6 * b)) < 0.01, 'one level');
});

test('every node keeps the floor, even one far above the others', (t) => {
  const shares = splitShares([{ name: 'm', nodes: ['hot', 'cold'], load: 0.2, ranOn: ['hot', 'cold'], ranLoad: [0.1, 0.1] }], measured([['hot', 3], ['cold', 0.1]]));
  const [hot, cold] = shares.get('m') ?? [];
  t.true(Math.abs(hot - SHARE_FLOOR / 2) <= 1 / 256, `the hot node keeps the floor: ${hot}`);
  t.true(Math.abs(sum([hot, cold]) - 1) <= 2 / 256);
});

test('a node without a fresh report keeps the even split; the rest is poured over the others', (t) => {
  const shares = splitShares([{ name: 'm', nodes: ['a', 'unknown', 'b'], load: 0.9, ranOn: ['a', 'b'], ranLoad: [0.3, 0.3] }], measured([['a', 1.0], ['b', 0.4]]));
  const [a, unknown, b] = shares.get('m') ?? [];
  t.true(Math.abs(unknown - 1 / 3) <= 1 / 256, `${unknown}`);
  t.true(b > a, `${a} < ${b}`);
});

test('what a model ran on a node it has left comes off that node, and a node with twice the devices fills to twice the load', (t) => {
  // m ran 0.4 on `old`, which it left; its 0.6 goes over `one` (1 device) and `two` (2 devices), each with nothing else.
  const shares = splitShares([{ name: 'm', nodes: ['one', 'two'], load: 0.6, ranOn: ['old'], ranLoad: [0.4] }], measured([['old', 0.4], ['one', 0], ['two', 0, 2]]));
  const [one, two] = shares.get('m') ?? [];
  t.true(Math.abs(one - 1 / 3) <= 1 / 256 && Math.abs(two - 2 / 3) <= 1 / 256, `${one} ${two}`);
});

test('two models share the low node between them; the same shares whatever order they come in', (t) => {
  const models = [
    { name: 'x', nodes: ['a', 'c'], load: 0.4, ranOn: ['a', 'c'], ranLoad: [0.2, 0.2] },
    { name: 'y', nodes: ['b', 'c'], load: 0.4, ranOn: ['b', 'c'], ranLoad: [0.2, 0.2] },
  ];
  const nodes = measured([['a', 1.0], ['b', 1.0], ['c', 0.6]]);
  const one = splitShares(models, nodes);
  const other = splitShares([...models].reverse(), new Map([...nodes].reverse()));
  t.deepEqual([...one].sort(), [...other].sort());
  // Without them: a 0.8, b 0.8, c 0.2. Poured, every node at one level L: a takes L - 0.8 of x, b
  // as much of y, c the rest of both, 0.8 - 2 (L - 0.8) = L - 0.2: L = 2.6 / 3.
  const level = (/** @type {string} */ id) => {
    const base = { a: 0.8, b: 0.8, c: 0.2 }[id] ?? 0;
    return base + models.reduce((s, m) => s + (m.nodes.includes(id) ? m.load * (one.get(m.name) ?? [])[m.nodes.indexOf(id)] : 0), 0);
  };
  for (const id of ['a', 'b', 'c']) t.true(Math.abs(level(id) - 2.6 / 3) < 0.01, `${id} at ${level(id)}`);
  t.true(splitShares([{ name: 'single', nodes: ['a'], load: 1, ranOn: ['a'], ranLoad: [1] }], nodes).size === 0, 'a model on one node is not split');
});

test('a model on one node counts where it is routed now: one moved since the window fills its new node, not its old', (t) => {
  // `moved` ran 0.8 on `a` over the window and is routed to `c` now; `m` (0.6) is split over `b` and
  // `c`, each measured 0.3 besides. Read from the window, `b` and `c` stand level and take half each;
  // with `moved` counted on `c` (1.1 there), m is poured into `b`: 0.3 + 0.6 of m reaches 0.9 before
  // c's 1.1, and c keeps its floor (a tenth of the even split: a share of 0.05).
  const models = [
    { name: 'moved', nodes: ['c'], load: 0.8, ranOn: ['a'], ranLoad: [0.8] },
    { name: 'm', nodes: ['b', 'c'], load: 0.6, ranOn: ['b', 'c'], ranLoad: [0.3, 0.3] },
  ];
  const nodes = measured([['a', 0.8], ['b', 0.6], ['c', 0.6]]);
  const [b, c] = splitShares(models, nodes).get('m') ?? [];
  t.true(Math.abs(c - SHARE_FLOOR / 2) <= 1 / 256 && Math.abs(b - (1 - SHARE_FLOOR / 2)) <= 1 / 256, `${b} ${c}`);
  const unmoved = splitShares(models.slice(1), nodes).get('m') ?? [];
  t.true(Math.abs(unmoved[0] - 0.5) <= 1 / 256, `without the move, two nodes at one level take half each: ${unmoved}`);
  t.is(splitShares(models, nodes).has('moved'), false, 'a model on one node gets no shares');
});
