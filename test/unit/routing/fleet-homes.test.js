// Homes bounded by the catalog's bytes and count (routing/fleet-homes.ts, through Rankings.boundHomes):
// no node the home of much more than its share of the weights or of the models, most models at
// their hashed first node, the same homes whatever order the nodes come in, and little moved when
// a node leaves or a model joins.
import test from 'ava';
import { HOME_BYTES_SLACK, HOME_COUNT_SLACK } from '../../../dist/routing/fleet-homes.js';
import { Rankings } from '../../../dist/routing/fleet-placement.js';
import { random } from '../../helpers/mlp-catalog.js';

const GB = 1e9;
/** @param {number} n @param {(i: number) => number} [budget] */
const fleet = (n, budget = () => 20 * GB) => Array.from({ length: n }, (_, i) => ({ id: `node-${String(i).padStart(2, '0')}`, budgetBytes: budget(i) }));

/**
 * A sorted catalog of `count` models of 20 to 400 MB (log-uniform), as a gateway reads it.
 * @param {number} count
 * @returns {{ names: string[], bytes: Map<string, number> }}
 */
function catalogOf(count, seed = 7) {
  const next = random(seed);
  const names = Array.from({ length: count }, (_, k) => `m${String(k).padStart(5, '0')}`);
  return { names, bytes: new Map(names.map((name) => [name, Math.round(20e6 * Math.exp(next() * Math.log(20)))])) };
}

/** @typedef {{ names: string[], bytes: Map<string, number> }} Catalog */

/**
 * Each node's homes: bytes and count, by `rankings.first`.
 * @param {Rankings} rankings @param {Catalog} catalog
 * @returns {Record<string, { bytes: number, count: number }>}
 */
function homesOf(rankings, catalog) {
  /** @type {Record<string, { bytes: number, count: number }>} */
  const per = Object.fromEntries(rankings.nodes.map((n) => [n.id, { bytes: 0, count: 0 }]));
  for (const name of catalog.names) {
    const home = per[rankings.first(name).id];
    home.bytes += catalog.bytes.get(name) ?? 0;
    home.count++;
  }
  return per;
}

/**
 * Each node's share of the catalog by its budget: bytes and count.
 * @param {{ id: string, budgetBytes: number }[]} nodes @param {Catalog} catalog
 * @returns {Record<string, { bytes: number, count: number }>}
 */
function sharesOf(nodes, catalog) {
  const total = catalog.names.reduce((s, n) => s + (catalog.bytes.get(n) ?? 0), 0);
  const budgets = nodes.reduce((s, n) => s + n.budgetBytes, 0);
  return Object.fromEntries(nodes.map((n) => [n.id, { bytes: total * (n.budgetBytes / budgets), count: catalog.names.length * (n.budgetBytes / budgets) }]));
}

test('bounded homes hold every node within its share of the catalog\'s bytes and count, where hashing alone does not; most models keep their hashed first node', (t) => {
  const nodes = fleet(32);
  const catalog = catalogOf(5000);
  const shares = sharesOf(nodes, catalog);
  const hashed = new Rankings(nodes);
  const hashedHomes = homesOf(hashed, catalog);
  const worstHashed = Math.max(...Object.entries(hashedHomes).map(([id, h]) => h.bytes / shares[id].bytes));
  t.true(worstHashed > 1 + HOME_BYTES_SLACK + 0.05, `hashing alone puts ${worstHashed.toFixed(2)}x a node's share of the bytes on it (the case the bound is for)`);

  const bounded = new Rankings(nodes);
  bounded.boundHomes(catalog);
  for (const [id, h] of Object.entries(homesOf(bounded, catalog))) {
    t.true(h.bytes <= (1 + HOME_BYTES_SLACK) * shares[id].bytes + 1, `${id}: ${(h.bytes / shares[id].bytes).toFixed(3)}x its share of the bytes`);
    t.true(h.count <= (1 + HOME_COUNT_SLACK) * shares[id].count, `${id}: ${(h.count / shares[id].count).toFixed(3)}x its share of the models`);
  }
  const kept = catalog.names.filter((name) => bounded.first(name) === hashed.first(name)).length;
  t.true(kept / catalog.names.length > 0.75, `${kept} of ${catalog.names.length} models at their hashed first node`);
  // A model's ranking leads with its home, then the rest in hashed order.
  for (const name of catalog.names.slice(0, 200)) {
    const ranked = bounded.of(name);
    t.is(ranked[0], bounded.first(name));
    t.deepEqual(ranked.slice(1), hashed.of(name).filter((n) => n !== ranked[0]));
    t.is(ranked.length, nodes.length);
  }
});

test('nodes with twice the budget are the homes of twice the bytes', (t) => {
  const nodes = fleet(16, (i) => (i < 4 ? 40 : 20) * GB);
  const catalog = catalogOf(3000, 9);
  const shares = sharesOf(nodes, catalog);
  const rankings = new Rankings(nodes);
  rankings.boundHomes(catalog);
  const homes = homesOf(rankings, catalog);
  for (const [id, h] of Object.entries(homes)) {
    const ratio = h.bytes / shares[id].bytes;
    t.true(ratio <= 1 + HOME_BYTES_SLACK + 1e-9 && ratio > 0.8, `${id}: ${ratio.toFixed(3)}x its share of the bytes`);
  }
  t.true(homes['node-00'].bytes > 1.7 * homes['node-10'].bytes);
});

test('every gateway finds the same homes whatever order the nodes come in; with no bytes known, the count alone bounds them', (t) => {
  const nodes = fleet(24);
  const catalog = catalogOf(4000, 11);
  const a = new Rankings(nodes);
  a.boundHomes(catalog);
  const b = new Rankings([...nodes].reverse());
  b.boundHomes(catalog);
  t.true(catalog.names.every((name) => a.first(name).id === b.first(name).id));

  const unknown = { names: catalog.names, bytes: new Map() };
  const c = new Rankings(nodes);
  c.boundHomes(unknown);
  const mean = catalog.names.length / nodes.length;
  for (const [id, h] of Object.entries(homesOf(c, unknown))) t.true(h.count <= (1 + HOME_COUNT_SLACK) * mean, `${id}: ${h.count} models against a mean of ${mean}`);
});

test('a node leaving changes the homes of its own models and a few others; a model joining the catalog, a few', (t) => {
  const nodes = fleet(32);
  const catalog = catalogOf(5000, 13);
  const before = new Rankings(nodes);
  before.boundHomes(catalog);
  const gone = nodes[5].id;
  const after = new Rankings(nodes.filter((n) => n.id !== gone));
  after.boundHomes(catalog);
  const ownModels = catalog.names.filter((name) => before.first(name).id === gone).length;
  const others = catalog.names.filter((name) => before.first(name).id !== gone && after.first(name).id !== before.first(name).id).length;
  t.true(ownModels > 0);
  // Its own models (1/32 of the catalog) must go; the others whose first choice they fill move on too, far fewer than all.
  t.true(others < 3 * ownModels, `${ownModels} models homed on the node that left, ${others} others rehomed`);

  const grown = { names: [...catalog.names, 'm99999'].sort(), bytes: new Map([...catalog.bytes, ['m99999', 100e6]]) };
  const joined = new Rankings(nodes);
  joined.boundHomes(grown);
  const changed = catalog.names.filter((name) => joined.first(name).id !== before.first(name).id).length;
  t.true(changed < catalog.names.length * 0.02, `${changed} models rehomed by one joining`);
});

test('the rankings without the nodes given over to a model bound their homes too, each model keeping its home where it is not on those nodes', (t) => {
  const nodes = fleet(16);
  const catalog = catalogOf(2000, 17);
  const rankings = new Rankings(nodes);
  rankings.boundHomes(catalog);
  const taken = new Set([nodes[0].id, nodes[1].id]);
  const shared = rankings.excluding(taken);
  const rest = nodes.filter((n) => !taken.has(n.id));
  const shares = sharesOf(rest, catalog);
  for (const [id, h] of Object.entries(homesOf(shared, catalog))) {
    t.false(taken.has(id));
    t.true(h.bytes <= (1 + HOME_BYTES_SLACK) * shares[id].bytes + 1, `${id}: ${(h.bytes / shares[id].bytes).toFixed(3)}x its share`);
  }
  // Placement reads a model's home from both (an idle one from the whole fleet's, the home models
  // from the rest's): apart only where the home is on a node given over, or it flipped between them.
  const moved = catalog.names.filter((name) => !taken.has(rankings.first(name).id) && shared.first(name) !== rankings.first(name));
  t.deepEqual(moved, []);
});
