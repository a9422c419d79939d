// What one pooled placement costs (src/routing/fleet-placement.ts `placeFleet`), the work a gateway's
// check does on its placement thread whenever its inputs changed (issue 64): a synthetic catalog on
// N nodes (200 hot models, 30% of the rest with a little load, 80% resident on one or two nodes),
// in three scenarios:
//   from residency  no model placed yet: each goes where its weights are, else its ranking's first;
//   steady          every model's current nodes are where the last placement put it (a gateway's
//                   checks see this);
//   a node gone     the steady catalog on the fleet less one node (new rankings).
// Prints the median time per call. With --baseline DIR (another checkout of Stowage, built), the
// baseline's placeFleet runs beside this one's, call by call, and every placement is compared
// (models' nodes, nodes' load and bytes): a change meant to be faster must place the same.
//
//   npm run build && node bench/placement.js [--nodes 64] [--models 10000] [--calls 8] [--baseline DIR]
import path from 'node:path';
import { isDeepStrictEqual, parseArgs } from 'node:util';
import { pathToFileURL } from 'node:url';
import * as ours from '../dist/routing/fleet-placement.js';

const { values: args } = parseArgs({
  options: { nodes: { type: 'string', default: '64' }, models: { type: 'string', default: '10000' }, calls: { type: 'string', default: '8' }, baseline: { type: 'string' } },
});
const [N, M, CALLS] = [Number(args.nodes), Number(args.models), Number(args.calls)];
/** @type {typeof ours | undefined} */
const base = args.baseline ? await import(pathToFileURL(path.resolve(args.baseline, 'dist/routing/fleet-placement.js')).href) : undefined;

let seed = 7;
const rnd = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32);
const nodes = Array.from({ length: N }, (_, i) => ({ id: `10.0.${i >> 8}.${i & 255}:8001`, budgetBytes: 2 ** 30 * (1 + (i % 3)) }));
const pick = () => nodes[Math.floor(rnd() * N)].id;
/** @type {import('../dist/routing/fleet-placement.js').FleetModel[]} */
const catalog = Array.from({ length: M }, (_, i) => {
  const hot = i < 200;
  const resident = rnd() < 0.8 ? [pick(), ...(rnd() < 0.3 ? [pick()] : [])] : [];
  return { name: `model-${i}`, bytes: 16 * 2 ** 20, load: hot ? 0.05 + rnd() * 0.5 : rnd() < 0.3 ? rnd() * 0.002 : 0, resident, serving: hot ? resident.slice(0, 1) : [], rate: hot ? 50 : 1, capacity: 1000 };
});
const placed = ours.placeFleet(catalog, nodes).nodes;
const steady = catalog.map((m) => ({ ...m, current: placed.get(m.name) }));

const median = (/** @type {number[]} */ xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
/** @param {import('../dist/routing/fleet-placement.js').FleetPlacement} p */
const asData = (p) => [[...p.nodes], [...p.load], [...p.bytes]];

console.log(`placeFleet: ${N} nodes, ${M} models, ${CALLS} calls per scenario${base ? `, beside ${args.baseline}` : ''}`);
console.log('scenario          this build (ms)' + (base ? '   baseline (ms)   speed-up   placements' : ''));
for (const [label, models, fleet] of /** @type {const} */ ([['from residency', catalog, nodes], ['steady', steady, nodes], ['a node gone', steady, nodes.slice(1)]])) {
  const mine = new ours.Rankings(fleet);
  const theirs = base ? new base.Rankings(fleet) : undefined;
  /** @type {number[]} */
  const [a, b] = [[], []];
  let same = true;
  for (let k = 0; k < CALLS; k++) {
    let t = performance.now();
    const p = ours.placeFleet(models, fleet, ours.DEFAULT_FLEET_OPTIONS, mine);
    a.push(performance.now() - t);
    if (!base || !theirs) continue;
    t = performance.now();
    const q = base.placeFleet(models, fleet, base.DEFAULT_FLEET_OPTIONS, theirs);
    b.push(performance.now() - t);
    same &&= isDeepStrictEqual(asData(p), asData(q));
  }
  const row = `${label.padEnd(18)}${median(a).toFixed(1).padStart(15)}`;
  console.log(base ? `${row}${median(b).toFixed(1).padStart(16)}${(median(b) / median(a)).toFixed(2).padStart(10)}x   ${same ? 'identical' : 'DIFFERENT'}` : row);
}
