// Placement across a fleet's nodes (routing/fleet-placement.ts): rendezvous rankings every
// gateway computes alike, bounded loads, replicas by load, little moved when a node joins or
// leaves, and one node for a model nobody has asked for.
import test from 'ava';
import { DEFAULT_FLEET_OPTIONS, givenOverNodes, needsOwnNodes, placeFleet, quantizeLoad, Rankings, replicasFor } from '../../../dist/routing/fleet-placement.js';
import { random } from '../../helpers/mlp-catalog.js';

const GB = 1e9;
/** @param {number} n @param {number} [budget] */
const fleet = (n, budget = 20 * GB) => Array.from({ length: n }, (_, i) => ({ id: `10.0.0.${i}:8001`, budgetBytes: budget }));

/**
 * A catalog: Zipf(1.0) loads over the first `measured` models (device-seconds per second in all:
 * `total`), none over the rest; sizes from 20 to 400 MB.
 * @param {number} count @param {number} measured @param {number} total
 */
function catalog(count, measured, total, seed = 3) {
  const next = random(seed);
  const h = Array.from({ length: measured }, (_, k) => 1 / (k + 1)).reduce((a, b) => a + b, 0);
  return Array.from({ length: count }, (_, k) => ({ name: `model-${k}`, bytes: Math.round(20e6 * Math.exp(next() * Math.log(20))), load: k < measured ? total / h / (k + 1) : 0 }));
}

/** Where a placement puts each model, as the nodes would then report their residency. */
const residentAsPlaced = (/** @type {ReturnType<typeof catalog>} */ models, /** @type {ReturnType<typeof placeFleet>} */ p) =>
  models.map((m) => ({ ...m, resident: p.nodes.get(m.name) }));

/** Models whose placement gained a node between two placements. */
function gained(/** @type {ReturnType<typeof placeFleet>} */ a, /** @type {ReturnType<typeof placeFleet>} */ b) {
  let n = 0;
  for (const [model, nodes] of b.nodes) if (nodes.some((id) => !a.nodes.get(model)?.includes(id))) n++;
  return n;
}

test('the same reports place alike, whatever order they come in: two gateways agree', (t) => {
  const nodes = fleet(16);
  const models = catalog(2000, 1200, 6);
  const a = placeFleet(models, nodes);
  const b = placeFleet([...models].reverse(), [...nodes].reverse());
  t.deepEqual([...a.nodes].sort(), [...b.nodes].sort());
  t.is(a.nodes.size, 2000, 'every model placed');
});

test('loads within the bounds of the fair share, the heavy models on several nodes', (t) => {
  const nodes = fleet(32);
  const models = catalog(5000, 3000, 12);
  const p = placeFleet(models, nodes);
  const loads = [...p.load.values()];
  const mean = loads.reduce((s, l) => s + l, 0) / loads.length;
  // (1 + epsilon + stickiness), but for a replica that fits nowhere within it: the least full node
  // takes it (here a heavy model at 0.4 of a node's share on a node at 0.8: 1.21x). The gateway's
  // shares then even what its models on several nodes can (fleet-shares.test.js, bench/fleet-sim.js).
  const bound = 1 + DEFAULT_FLEET_OPTIONS.epsilon + DEFAULT_FLEET_OPTIONS.stickiness + 0.05;
  t.true(Math.max(...loads) <= mean * bound + 1e-9, `busiest ${(Math.max(...loads) / mean).toFixed(3)}x the mean`);
  // The most popular model takes about 13% of 12 devices' work: spread so that no replica is over a quarter of a node's share.
  const top = p.nodes.get('model-0') ?? [];
  t.true(top.length >= 4, `${top.length} replicas`);
  t.is(new Set(top).size, top.length, 'on distinct nodes');
  t.deepEqual(p.nodes.get('model-4999'), [new Rankings(nodes).first('model-4999').id], 'a model with no load: its ranking\'s first node');
});

test('replicas of a quarter of a node\'s share while the heavy models\' copies take at most half the fleet\'s memory, else of a half', (t) => {
  const nodes = fleet(4, 1 * GB);
  // One heavy model at ~0.42 of a node's share among 35 light ones at ~0.1: a quarter of the bounded
  // share (0.30 on the grid) gives it two replicas, a half (0.59) one.
  const models = (/** @type {number} */ bytes) => [{ name: 'a', bytes, load: 0.45 }, ...Array.from({ length: 35 }, (_, k) => ({ name: `f${k}`, bytes: 10e6, load: 0.1 }))];
  const ample = placeFleet(models(100e6), nodes);
  t.true(ample.heavy.has('a'));
  t.is(ample.nodes.get('a')?.length, 2, 'two copies of 100 MB in 4 GB: the finer replicas');
  const tight = placeFleet(models(1.2 * GB), nodes);
  t.true(tight.heavy.has('a'));
  t.is(tight.nodes.get('a')?.length, 1, 'two copies of 1.2 GB would be over half of 4 GB: half a share a replica');
});

test('a replica per replicaLoad of load, at most every node; loads on a quarter-octave grid', (t) => {
  t.is(replicasFor(0, 8, 0.5), 1);
  t.is(replicasFor(0.4, 8, 0.5), 1);
  t.is(replicasFor(0.6, 8, 0.5), 2);
  t.is(replicasFor(1.6, 8, 0.5), 4);
  t.is(replicasFor(100, 8, 0.5), 8);
  // Hysteresis: on 3 replicas it keeps them until its load is clearly below 2 replicas' worth (0.75 under 1.0).
  t.is(replicasFor(0.9, 8, 0.5, 3), 3);
  t.is(replicasFor(0.8, 8, 0.5, 3), 3);
  t.is(replicasFor(0.7, 8, 0.5, 3), 2);
  t.is(replicasFor(1.2, 8, 0.5, 2), 3, 'it grows at once');
  t.is(replicasFor(0.9, 2, 0.5, 3), 2, 'never more than the nodes');
  t.is(quantizeLoad(0), 0);
  t.is(quantizeLoad(1), 1);
  t.is(quantizeLoad(2.05), 2, 'a reading 2.5% off rounds alike');
  t.is(quantizeLoad(1.95), 2);
  t.true(Math.abs(quantizeLoad(1.19) - 2 ** 0.25) < 1e-12);
});

test('a model whose placement lapsed counts its replicas from those it was given, not from every node it ran on', (t) => {
  const nodes = fleet(6, 1 * GB);
  // Replicas of a quarter of a node's share, the grid this scenario is made for (the default is a fifth).
  const quarter = { ...DEFAULT_FLEET_OPTIONS, replicaPart: 1 / 4 };
  // At 0.35 among 50 light models it wants two replicas (of 0.21 at most: a quarter of a node's bounded share, on
  // the grid); its reports show it on three nodes (one it left, or another gateway's apart). Counted from those
  // three, the hysteresis keeps three.
  const models = (/** @type {object} */ extra) => [{ name: 'a', bytes: 100e6, load: 0.35, ...extra }, ...Array.from({ length: 50 }, (_, k) => ({ name: `f${k}`, bytes: 10e6, load: 0.08 }))];
  const ran = nodes.slice(0, 3).map((n) => n.id);
  t.is(placeFleet(models({}), nodes, quarter).nodes.get('a')?.length, 2, 'placed afresh: two');
  t.is(placeFleet(models({ serving: ran }), nodes, quarter).nodes.get('a')?.length, 3, 'from where it ran alone: three, a node gained');
  t.is(placeFleet(models({ serving: ran, placedReplicas: 2 }), nodes, quarter).nodes.get('a')?.length, 2, 'from the two it was given: two');
  t.is(placeFleet(models({ serving: ran, placedReplicas: 3 }), nodes, quarter).nodes.get('a')?.length, 3, 'given three, it keeps three');
});

test('a model grows to more nodes as its load grows, and shrinks back', (t) => {
  const nodes = fleet(16);
  const models = catalog(500, 300, 4);
  const at = (/** @type {number} */ load) => placeFleet(models.map((m) => (m.name === 'model-7' ? { ...m, load } : m)), nodes).nodes.get('model-7')?.length;
  const small = at(0.01);
  const big = at(1.5);
  t.is(small, 1);
  t.true((big ?? 0) >= 3, `${big} replicas at 1.5 devices' load`);
  t.is(at(0.01), small, 'back to one');
});

test('a node leaving moves its own models and few others; a node joining moves almost none that are resident', (t) => {
  const nodes = fleet(64);
  const models = catalog(10000, 6000, 24);
  const before = placeFleet(models, nodes);
  const resident = residentAsPlaced(models, before);
  const steady = placeFleet(resident, nodes);
  t.is(gained(before, steady), 0, 'nothing moves when nothing changed');
  const left = placeFleet(resident, nodes.slice(1));
  const onLeaver = [...steady.nodes.values()].filter((ids) => ids.includes(nodes[0].id)).length;
  const movedLeft = gained(steady, left);
  t.log(`a node left: ${movedLeft} of 10000 models moved (${onLeaver} were on it)`);
  t.true(movedLeft <= (2 * 10000) / 64, `${movedLeft} moved: at most 2/N`);
  const joined = placeFleet(resident, [...nodes, { id: '10.0.0.200:8001', budgetBytes: 20 * GB }]);
  const movedJoin = gained(steady, joined);
  t.log(`a node joined: ${movedJoin} models moved`);
  t.true(movedJoin <= 10000 / 64, `${movedJoin} moved: at most 1/N`);
});

test('a model nobody holds or has asked for goes to one node, the same for every gateway: a burst of first requests loads it once', (t) => {
  const nodes = fleet(64);
  const views = [0, 1, 2].map(() => placeFleet([{ name: 'brand-new', bytes: 1e8, load: 0 }], nodes).nodes.get('brand-new'));
  t.is(views[0]?.length, 1);
  t.deepEqual(views[1], views[0]);
  t.deepEqual(views[2], views[0]);
});

test('a node with twice the budget wins about twice the models', (t) => {
  const nodes = [{ id: 'big', budgetBytes: 40 * GB }, { id: 'small-a', budgetBytes: 20 * GB }, { id: 'small-b', budgetBytes: 20 * GB }];
  const rankings = new Rankings(nodes);
  /** @type {Record<string, number>} */
  const wins = { big: 0, 'small-a': 0, 'small-b': 0 };
  for (let i = 0; i < 20000; i++) wins[rankings.first(`m${i}`).id]++;
  t.true(Math.abs(wins.big / 20000 - 0.5) < 0.02, JSON.stringify(wins));
  t.true(Math.abs(wins['small-a'] / 20000 - 0.25) < 0.02, JSON.stringify(wins));
});

/** Eight nodes, a catalog, and one light model of it on a single node (its home). */
function lightOnEight() {
  const nodes = fleet(8);
  const models = catalog(200, 100, 2);
  const base = placeFleet(models, nodes);
  const light = models.find((m) => m.load > 0 && (base.nodes.get(m.name)?.length ?? 0) === 1 && m.load < 0.01);
  if (!light) throw new Error('the catalog has a light model');
  return { nodes, models, light, home: /** @type {string[]} */ (base.nodes.get(light.name))[0] };
}

test('a model stays where it ran over the last window, before where its weights are', (t) => {
  const { nodes, models, light, home } = lightOnEight();
  const other = nodes.map((n) => n.id).find((id) => id !== home) ?? '';
  // Resident on both (a move left it on its old node too), run on `other` only: it stays on `other`.
  const ran = placeFleet(models.map((m) => (m === light ? { ...m, resident: [home, other], serving: [other] } : m)), nodes);
  t.deepEqual(ran.nodes.get(light.name), [other]);
  const residentOnly = placeFleet(models.map((m) => (m === light ? { ...m, resident: [home, other] } : m)), nodes);
  t.deepEqual(residentOnly.nodes.get(light.name), [home], 'by residency alone, its ranking decides between the two');

});

test('a Rankings remembers each model\'s first node and says whether another node set ranks alike', (t) => {
  const nodes = fleet(16);
  const r = new Rankings(nodes);
  for (let k = 0; k < 50; k++) {
    const model = `model-${k}`;
    t.is(r.first(model).id, r.of(model)[0].id);
    t.is(r.first(model), r.first(model), 'the same node object, remembered');
  }
  t.true(r.sameNodes(fleet(16)));
  t.false(r.sameNodes(fleet(17)), 'a node more');
  t.false(r.sameNodes(fleet(16, 40 * GB).map((n, i) => (i === 0 ? n : { ...n, budgetBytes: 20 * GB }))), 'a budget changed');
  const models = catalog(300, 100, 2);
  t.deepEqual(placeFleet(models, nodes, DEFAULT_FLEET_OPTIONS, r).nodes, placeFleet(models, nodes).nodes, 'placing with a kept Rankings places alike');
});

test('a model stays on its current nodes before where it ran; of several it ran on, where it ran most', (t) => {
  const { nodes, models, light, home } = lightOnEight();
  const [a, b] = nodes.map((n) => n.id).filter((id) => id !== home);
  // Its reports still show where it ran before it moved to `a`: current wins.
  const kept = placeFleet(models.map((m) => (m === light ? { ...m, serving: [home], resident: [home], current: [a] } : m)), nodes);
  t.deepEqual(kept.nodes.get(light.name), [a]);
  // Ran on two (listed most load first, as the gateway lists them): the first, whatever the ranking.
  for (const serving of [[a, b], [b, a]]) {
    t.deepEqual(placeFleet(models.map((m) => (m === light ? { ...m, serving } : m)), nodes).nodes.get(light.name), [serving[0]]);
  }
});

test('a node the light models alone take past its sticky bound sheds its busiest ones to the next nodes of their rankings', (t) => {
  const nodes = fleet(4);
  // 40 light models (none worth bounding: 100 alike), every one anchored on node 0 by where it ran.
  const models = Array.from({ length: 100 }, (_, k) => ({ name: `light-${k}`, bytes: 20e6, load: 0.01, ...(k < 40 ? { serving: [nodes[0].id] } : {}) }));
  const p = placeFleet(models, nodes);
  const mean = [...p.load.values()].reduce((s, l) => s + l, 0) / nodes.length;
  const bound = (1 + DEFAULT_FLEET_OPTIONS.epsilon + DEFAULT_FLEET_OPTIONS.stickiness) * mean;
  t.true(/** @type {number} */ (p.load.get(nodes[0].id)) <= bound + 1e-9, `node 0 at ${p.load.get(nodes[0].id)} of ${bound}`);
  const moved = models.slice(0, 40).filter((m) => p.nodes.get(m.name)?.[0] !== nodes[0].id);
  t.true(moved.length > 0, 'some of its models went elsewhere');
  t.deepEqual(placeFleet(models, nodes).nodes, p.nodes, 'the same reports shed the same models');
});

test('heavy models larger than an even share of the heavy bytes still fit their nodes (bounded by half the fleet\'s memory)', (t) => {
  const nodes = fleet(16);
  // Two hot models of 400 MB among many light ones: an even share of their bytes is 55 MB a node.
  const models = [
    { name: 'hot-a', bytes: 400e6, load: 0.8 },
    { name: 'hot-b', bytes: 400e6, load: 0.6 },
    ...Array.from({ length: 300 }, (_, k) => ({ name: `tail-${k}`, bytes: 50e6, load: 0.002 })),
  ];
  const first = placeFleet(models, nodes);
  const again = placeFleet(models.map((m) => ({ ...m, resident: first.nodes.get(m.name), serving: first.nodes.get(m.name) })), nodes);
  for (const name of ['hot-a', 'hot-b']) {
    t.true(first.heavy.has(name), `${name} is bounded`);
    t.deepEqual(again.nodes.get(name), first.nodes.get(name), `${name} stays where it was placed`);
    t.is(first.nodes.get(name)?.[0], new Rankings(nodes).first(name).id, `${name} on its ranking's first node: it fits there`);
  }
});

test('a model needing more than a device at full batches gets nodes of its own, as many as its requests need', (t) => {
  const nodes = fleet(32);
  // 28,000 requests a second against 2,667 a device at full batches: 10.5 devices, 12 nodes at 90%
  // each. Its measured device time (24 here: small batches on many replicas) no longer decides.
  const hot = { name: 'hot', bytes: 100e6, load: 24, rate: 28_000, capacity: 2667 };
  const models = [hot, ...catalog(2000, 1200, 6)];
  const p = placeFleet(models, nodes);
  const own = p.nodes.get('hot') ?? [];
  t.is(own.length, 12);
  t.true(p.givenOver.has('hot'));
  t.false(p.heavy.has('hot'));
  for (const [name, on] of p.nodes) if (name !== 'hot') t.false(on.some((id) => own.includes(id)), `${name} is not on the hot model's nodes`);
  // The rest bounded among the other 20 nodes as among any 20.
  const rest = nodes.filter((n) => !own.includes(n.id)).map((n) => p.load.get(n.id) ?? 0);
  const mean = rest.reduce((a, b) => a + b, 0) / rest.length;
  t.true(Math.max(...rest) <= mean * (1 + DEFAULT_FLEET_OPTIONS.epsilon + DEFAULT_FLEET_OPTIONS.stickiness) + 1e-9, `busiest of the rest ${(Math.max(...rest) / mean).toFixed(3)}x their mean`);
  // Two gateways given the same reports in another order give it the same nodes.
  t.deepEqual(placeFleet([...models].reverse(), [...nodes].reverse()).nodes.get('hot'), own);
  // Placed again from where it is: the same nodes, and the models that were there stay off them.
  const again = placeFleet(models.map((m) => ({ ...m, current: p.nodes.get(m.name) })), nodes);
  t.deepEqual(again.nodes.get('hot'), own);
  // Needing a node less, it gives one back and keeps the rest; needing more, it gains nodes.
  const fewer = placeFleet([{ ...hot, rate: 25_000, current: own }, ...models.slice(1)], nodes).nodes.get('hot') ?? [];
  t.is(fewer.length, 11);
  t.true(fewer.every((id) => own.includes(id)), 'a subset of the nodes it had');
  const more = placeFleet([{ ...hot, rate: 34_000, current: own }, ...models.slice(1)], nodes).nodes.get('hot') ?? [];
  t.is(more.length, 15);
  t.true(own.every((id) => more.includes(id)), 'the nodes it had, and more');
});

test('a model within one device shares nodes as before; no more than half the fleet is given over', (t) => {
  const nodes = fleet(16);
  const models = catalog(500, 300, 3);
  const within = placeFleet([{ name: 'busy', bytes: 100e6, load: 1.2, rate: 2500, capacity: 2667 }, ...models], nodes);
  t.is(within.givenOver.size, 0);
  t.true(within.heavy.has('busy'), 'bounded among the rest, its replicas from its load');
  // 40 devices' worth on 16 nodes: 45 nodes, more than half the fleet; it is bounded among the rest instead.
  const tooMany = placeFleet([{ name: 'flood', bytes: 100e6, load: 16, rate: 40 * 2667, capacity: 2667 }, ...models], nodes);
  t.is(tooMany.givenOver.size, 0);
  t.true(tooMany.heavy.has('flood'));
  // Unknown capacity (no learned costs), or no rate: never given over.
  t.is(placeFleet([{ name: 'x', bytes: 1e6, load: 3, rate: 9000, capacity: 0 }, ...models], nodes).givenOver.size, 0);
});

test('a given-over model keeps its node count while its needs wander within the hysteresis', (t) => {
  t.is(givenOverNodes(10.5, 0), 12);
  t.is(givenOverNodes(10.5, 64), 12, 'spread over every node before: down to what it needs at once');
  t.is(givenOverNodes(9.8, 12), 12, 'a little under 11 nodes at 90%: kept');
  t.is(givenOverNodes(9.6, 12), 11);
  t.is(givenOverNodes(12, 12), 14, 'more than its nodes carry at 90%: more at once');
});

test('a model moved lately (pinned) stays on its node up to (1 + epsilon + 3 stickiness) of its share; unpinned, past (1 + epsilon + stickiness), it moves', (t) => {
  const nodes = fleet(4);
  // Stickiness 0.1 and replicas of a quarter of a node's share (the bounds' arithmetic below is for
  // them, whatever the defaults).
  const options = { ...DEFAULT_FLEET_OPTIONS, stickiness: 0.1, replicaPart: 1 / 4 };
  // Sixteen heavy models of 0.25 device-seconds a second (one replica each: a quarter of a node's
  // bounded share, 0.275, is 0.297 on the quarter-octave grid, over 0.25): a node's fair share is 1;
  // five on node 0 are 1.25x it, past the sticky bound (1.2x), within the pinned one (1.4x).
  const on = [0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3];
  const models = (/** @type {number} */ onZero, /** @type {boolean} */ pinned) => on.concat(Array(onZero - 5).fill(0)).map((i, k) => ({
    name: `h${k}`, bytes: 100e6, load: 0.25, current: [nodes[i].id], ...(pinned && i === 0 ? { pinned } : {}),
  }));
  const zero = (/** @type {ReturnType<typeof placeFleet>} */ p) => [...p.nodes].filter(([, ids]) => ids.includes(nodes[0].id)).length;
  t.true([...placeFleet(models(5, false), nodes, options).nodes.values()].every((ids) => ids.length === 1), 'one replica each');
  t.is(zero(placeFleet(models(5, false), nodes, options)), 4, 'unpinned: one of the five leaves node 0');
  t.is(zero(placeFleet(models(5, true), nodes, options)), 5, 'pinned: all five stay');
  // Six on node 0 (17 models: 1.41x its share): past the pinned bound too, so one leaves.
  t.is(zero(placeFleet(models(6, true), nodes, options)), 5, 'pinned, but far past: one leaves');
});

/**
 * One placement made twice from the same models: those running under 2% of a device's fair share
 * (needing no nodes of their own) given as HomeModels, and each given in full, those with `current`
 * their home (the first node of their ranking among the nodes shared: what the first placement says),
 * as a gateway holds them (remote/fleet-routes.ts). What each gives every model, and each node's
 * load and bytes, to the last bit.
 * @param {{ nodes: { id: string, budgetBytes: number, devices?: number }[], models: import('../../../dist/routing/fleet-placement.js').FleetModel[], options?: typeof DEFAULT_FLEET_OPTIONS }} scenario
 */
function placedBothWays({ nodes, models: given, options = DEFAULT_FLEET_OPTIONS }) {
  // By name, as a gateway's catalog lists them (HomeModels' order).
  const models = [...given].sort((a, b) => (a.name < b.name ? -1 : 1));
  const rankings = new Rankings(nodes);
  const devices = nodes.reduce((sum, n) => sum + (n.devices ?? 1), 0);
  const fair = models.reduce((sum, m) => sum + m.load, 0) / devices;
  const atHome = (/** @type {typeof models[number]} */ m) => !(m.load >= 0.02 * fair) && !needsOwnNodes(m);
  const home = models.filter(atHome);
  let asked = 0;
  const split = placeFleet(models.filter((m) => !atHome(m)), nodes, options, rankings, {
    names: home.map((m) => m.name),
    loads: home.map((m) => m.load),
    full: (indexes) => {
      asked += indexes.length;
      return indexes.map((i) => ({ ...home[i] }));
    },
  });
  const full = models.map((m) => (atHome(m) ? { ...m, current: [split.shared.first(m.name).id] } : m));
  const whole = placeFleet(full, nodes, options, new Rankings(nodes));
  return { whole, split, home, asked, rankings: split.shared };
}

test('models given as HomeModels are placed as they are given in full: each model\'s nodes, each node\'s load and bytes, to the last bit', (t) => {
  const next = random(5);
  const mixed = (/** @type {number} */ n) => Array.from({ length: n }, (_, i) => ({ id: `10.0.1.${i}:8001`, budgetBytes: (1 + (i % 3)) * 10 * GB, devices: 1 + (i % 2) }));
  /** @type {[string, Parameters<typeof placedBothWays>[0], (r: ReturnType<typeof placedBothWays>) => void][]} */
  const scenarios = [
    ['16 nodes, 3,000 models, Zipf loads', { nodes: fleet(16), models: catalog(3000, 2500, 8) }, () => {}],
    ['nodes of one, two and three budgets', { nodes: mixed(12), models: catalog(3000, 3000, 10, 7) }, () => {}],
    ['one node of three times the budget, 600 models running alike: the home models shed from it', {
      nodes: fleet(4).map((n, i) => ({ ...n, budgetBytes: i === 0 ? 30 * GB : 10 * GB })),
      models: catalog(600, 0, 0).map((m) => ({ ...m, load: 1e-3 })),
    }, ({ split, home, rankings }) => {
      const shed = home.filter((m) => split.nodes.has(m.name) && split.nodes.get(m.name)?.[0] !== rankings.first(m.name).id);
      t.true(shed.length > 0, `${shed.length} home models shed`);
    }],
    ['a model needing nodes of its own: the home models go to their first node among the others', {
      nodes: fleet(16),
      models: catalog(3000, 2500, 8).map((m, k) => ({ ...m, ...(k === 0 ? { rate: 4000, capacity: 1000 } : {}), resident: next() < 0.5 ? [`10.0.0.${Math.floor(next() * 16)}:8001`] : undefined })),
    }, ({ split, home, asked }) => {
      t.true(split.givenOver.has('model-0'));
      const given = new Set(split.nodes.get('model-0'));
      const firstGiven = home.filter((m) => given.has(new Rankings(fleet(16)).first(m.name).id));
      t.true(firstGiven.length > 100, `${firstGiven.length} home models ranked first on a node given over`);
      for (const m of firstGiven) t.false(given.has(split.nodes.get(m.name)?.[0] ?? split.shared.first(m.name).id), `${m.name} not on a node given over`);
      t.is(asked, 0);
    }],
    ['a replicaLoad under one home model\'s load: every home model placed in full', {
      nodes: fleet(8), models: catalog(1000, 1000, 8), options: { ...DEFAULT_FLEET_OPTIONS, replicaLoad: 1e-4 },
    }, ({ home, asked }) => t.is(asked, home.length)],
  ];
  for (const [name, scenario, check] of scenarios) {
    const both = placedBothWays(scenario);
    const { whole, split, home, rankings } = both;
    t.true(home.length > scenario.models.length / 2, `${name}: ${home.length} of ${scenario.models.length} models at home`);
    for (const m of scenario.models) t.deepEqual(split.nodes.get(m.name) ?? [rankings.first(m.name).id], whole.nodes.get(m.name), `${name}: ${m.name}`);
    t.deepEqual(split.load, whole.load, `${name}: every node's load`);
    t.deepEqual(split.bytes, whole.bytes, `${name}: every node's bytes`);
    t.deepEqual([...split.heavy].sort(), [...whole.heavy].sort(), `${name}: the heavy models`);
    t.deepEqual(split.givenOver, whole.givenOver, `${name}: the models given over`);
    check(both);
  }
});
