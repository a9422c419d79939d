// What a pooled gateway's check costs on its placement thread when a report changed (issue 64):
// src/remote/fleet-routes.ts `FleetRoutes.update` at N nodes x M models, fed stand-in members (no
// gRPC: what node-status.ts hands it), one node's report changing at every check, so that every
// check places. Each node reports the models resident on it (twice its share of the catalog) and
// those that ran over the window; `--ran` is the share of the catalog that ran (a load and a rate
// on the nodes it is routed to), drawn anew at every check: 1 is bench/gateway-checks.js's
// stand-ins (every model loaded), 0.5 about the simulator's 12,000 requests a second over 10,000
// models, 0.05 a lab's catalog whose tail is idle in most windows. Halfway, a node restarts (down
// for two checks, then back with its index read anew and nothing resident). Prints the median time
// per check. With --baseline DIR (another checkout of Stowage, built), the baseline's FleetRoutes is fed
// the same members beside this one, check by check, and their routes are compared after each.
//
//   npm run build && node bench/fleet-routes-check.js [--nodes 64] [--models 10000] [--checks 30] [--ran 1,0.5,0.05] [--baseline DIR]
import path from 'node:path';
import { isDeepStrictEqual, parseArgs } from 'node:util';
import { pathToFileURL } from 'node:url';
import pino from 'pino';
import { FleetRoutes } from '../dist/remote/fleet-routes.js';
import { DEFAULT_FLEET_OPTIONS } from '../dist/routing/fleet-placement.js';

const { values: args } = parseArgs({
  options: {
    nodes: { type: 'string', default: '64' }, models: { type: 'string', default: '10000' }, checks: { type: 'string', default: '30' },
    ran: { type: 'string', default: '1,0.5,0.05' }, baseline: { type: 'string' },
  },
});
const [N, M, CHECKS] = [Number(args.nodes), Number(args.models), Number(args.checks)];
/** The first checks place the whole catalog and warm the JIT: left out of the median. */
const WARM = 8;
/** The check at which node 1 goes down (back two checks later). */
const RESTART = Math.floor(CHECKS / 2);
const logger = pino({ level: 'silent' });
/** @type {typeof FleetRoutes | undefined} */
const Baseline = args.baseline ? (await import(pathToFileURL(path.resolve(args.baseline, 'dist/remote/fleet-routes.js')).href)).FleetRoutes : undefined;

const median = (/** @type {number[]} */ xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
const catalog = Array.from({ length: M }, (_, i) => `model-${i}`);

/** One run at `share` of the catalog running: the time per check of this build (and the baseline's), and whether their routes agreed. */
async function run(/** @type {number} */ share) {
  let seed = 7;
  const rnd = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32);
  const nodes = Array.from({ length: N }, (_, i) => `node-${i}`);
  // Twice its share of the catalog resident on each node; at first model k on node k mod N.
  const resident = nodes.map((_, i) => new Set(catalog.filter((_, k) => k % N === i || rnd() < 1 / N)));
  const serials = nodes.map(() => 1);
  const started = nodes.map(() => 1);
  /** Each node's list of models: one object for all, until a node restarts and its index is read anew. */
  const lists = nodes.map(() => catalog);
  /** The node down (-1: none). */
  let down = -1;
  const addresses = nodes.map((_, i) => `10.0.${i >> 8}.${i & 255}:8001`);
  const indexOf = new Map(nodes.map((name, i) => [name, i]));
  /** @type {Map<string, number>[]} node -> model -> its load over the window */
  let loads = nodes.map(() => new Map());
  const members = () => nodes.map((name, i) => {
    const models = new Map();
    for (const m of resident[i]) models.set(m, entry(16 << 20, 0));
    for (const [m, load] of loads[i]) models.set(m, entry(resident[i].has(m) ? 16 << 20 : 0, load));
    const report = { nodeName: name, startedMs: started[i], budgetBytes: 2 ** 32, sessionBudgetBytes: 0, devices: 1, queueDepth: 0, models };
    return { address: addresses[i], name, up: i !== down, draining: false, models: lists[i], report, reportSerial: serials[i], prefetch: async () => {} };
  });
  const make = (/** @type {typeof FleetRoutes} */ Routes) => new Routes({ fleet: DEFAULT_FLEET_OPTIONS, prefetchTimeoutMs: 1000, logger });
  const [ours, theirs] = [make(FleetRoutes), Baseline ? make(Baseline) : undefined];
  const [a, b] = [[], []];
  let same = true;
  for (let check = 0; check < CHECKS; check++) {
    // A Zipf-ish load on the models that ran, split over the nodes (names) this build routes each to.
    loads = nodes.map(() => new Map());
    for (let k = 0; k < M; k++) {
      if (rnd() >= share) continue;
      const on = ours.routes.get(catalog[k]) ?? [nodes[k % N]];
      for (const name of on) loads[/** @type {number} */ (indexOf.get(name))].set(catalog[k], 1 / (k + 10) / on.length);
    }
    serials[check % N]++;
    // A node restarts in the middle of the run: down for two checks, then back with its index read
    // anew (a new list, the same models), a new start and nothing resident.
    if (check === RESTART) down = 1;
    if (check === RESTART + 2) {
      down = -1;
      [lists[1], started[1], serials[1]] = [[...catalog], 2, serials[1] + 1];
      resident[1].clear();
    }
    const fed = members();
    let t = performance.now();
    ours.update(fed);
    if (check >= WARM) a.push(performance.now() - t);
    if (!theirs) continue;
    t = performance.now();
    theirs.update(fed);
    if (check >= WARM) b.push(performance.now() - t);
    same &&= isDeepStrictEqual(Object.fromEntries(ours.routes), Object.fromEntries(theirs.routes));
    await new Promise((resolve) => setImmediate(resolve));
  }
  return { ours: median(a), theirs: b.length ? median(b) : undefined, same };
}

function entry(/** @type {number} */ residentBytes, /** @type {number} */ load) {
  return { weightBytes: 16 << 20, residentBytes, windowLoad: load, windowResidentBytes: residentBytes, hits: 1, misses: 1, sessionBytes: 0, windowRate: load > 0 ? 10 : 0, windowCapacity: load > 0 ? 1000 : 0 };
}

console.log(`FleetRoutes.update: ${N} nodes, ${M} models, ${CHECKS} checks (the first ${WARM} left out), one node's report new at each${Baseline ? `, beside ${args.baseline}` : ''}`);
console.log('ran    this build (ms)' + (Baseline ? '   baseline (ms)   speed-up   routes' : ''));
for (const share of args.ran.split(',').map(Number)) {
  const r = await run(share);
  console.log(`${String(share).padEnd(6)} ${r.ours.toFixed(1).padStart(15)}` + (r.theirs === undefined ? '' : `${r.theirs.toFixed(1).padStart(16)} ${(r.theirs / r.ours).toFixed(2).padStart(9)}x   ${r.same ? 'the same' : 'DIFFER'}`));
}
