// A fleet of simulated nodes driven by the real placement and routing code (src/routing/
// fleet-placement.ts, and placement.ts's packing for the ideal partition): how well each way of
// routing a catalog over a fleet pools the fleet's memory.
//
// Each node is one device with a weight budget and an LRU cache of whole models: a cold model
// costs its bytes at the host-to-device rate, evicting least recently used models; a batch runs in
// RUN_MS + ROW_MS per row; queued requests for the model that runs next are coalesced (up to
// MAX_BATCH), models taking turns oldest first. Requests arrive as a Poisson process over a catalog
// of mixed sizes, Zipf(1.0) by a popularity order that drifts (part of the popular set replaced
// every DRIFT_SECONDS), through GATEWAYS gateways each with its own view: its placement is
// recomputed every REPORT_SECONDS from what the nodes report, read at its own moment (the gateways'
// readings are skewed): each model's load over the node's last wall-clock window and its residency
// as that window ended, published by the node's real node/load-windows.ts, as ModelControlStatus
// does. A node fails and one joins during the run.
//
// Policies: round_robin (what a gateway-only process does today: any node), affinity (each model's
// first rendezvous node, no bounds, no replicas), placement (fleet-placement.ts: bounded loads,
// replicas by load), ideal (an oracle partition by true popularity, repacked at every drift).
//
//   npm run build && node bench/fleet-sim.js [--nodes 64] [--models 10000] [--seconds 60]
//     [--rate 12000] [--gateways 3] [--seed 1] [--report 2] [--policies round_robin,affinity,placement,ideal]
import { parseArgs } from 'node:util';
import { DEFAULT_FLEET_OPTIONS, placeFleet, Rankings } from '../dist/routing/fleet-placement.js';
import { pack } from '../dist/routing/placement.js';
import { LoadWindows } from '../dist/node/load-windows.js';
import { random } from '../test/helpers/mlp-catalog.js';
import { percentile } from './timing.js';

const { values: args } = parseArgs({
  options: {
    nodes: { type: 'string', default: '64' },
    models: { type: 'string', default: '10000' },
    seconds: { type: 'string', default: '60' },
    rate: { type: 'string', default: '12000' },
    gateways: { type: 'string', default: '3' },
    seed: { type: 'string', default: '1' },
    policies: { type: 'string', default: 'round_robin,affinity,placement,ideal' },
    report: { type: 'string', default: '2' },
    json: { type: 'boolean', default: false },
  },
});

const NODES = Number(args.nodes);
const MODELS = Number(args.models);
const SECONDS = Number(args.seconds);
const RATE = Number(args.rate);
const GATEWAYS = Number(args.gateways);
const SEED = Number(args.seed);

const MB = 1e6;
/** A model's run: a fixed cost and a cost per row, in ms (a mid-size vision model on one GPU). */
const RUN_MS = 2;
const ROW_MS = 0.25;
const MAX_BATCH = 16;
/** Host-to-device copy rate, bytes per ms (25 GB/s, pinned memory on PCIe 5). */
const COPY_BYTES_PER_MS = 25e9 / 1000;
/** A node's queue bound: past it a request is refused (counted), as max_queue_depth does. */
const MAX_QUEUE = 2000;
/** How often each gateway reads the nodes' counters and places again: gateway.health_seconds, 2 by default. */
const REPORT_SECONDS = Number(args.report);
const DRIFT_SECONDS = 10;
/** The gateways read the nodes this far apart (ms), halfway through the nodes' windows as they do. */
const GATEWAY_SKEW_MS = 300;
const WARMUP_SECONDS = Math.min(15, SECONDS / 4);
const FAIL_AT = SECONDS * 0.55;
const JOIN_AT = SECONDS * 0.75;

// ---- the catalog: sizes log-uniform from 20 MB to 400 MB ----
const rng = random(SEED);
const models = Array.from({ length: MODELS }, (_, i) => ({ name: `m${String(i).padStart(5, '0')}`, bytes: Math.round(20 * MB * Math.exp(rng() * Math.log(20))) }));
const catalogBytes = models.reduce((s, m) => s + m.bytes, 0);
/** One node's budget: the fleet's memory is the catalog's size (the catalog is NODES x one budget). */
const BUDGET = Math.floor(catalogBytes / NODES);

/** Zipf(1.0) over ranks: cumulative weights, and a rank drawn by binary search. */
const cumulative = new Float64Array(MODELS);
for (let k = 0, sum = 0; k < MODELS; k++) cumulative[k] = sum += 1 / (k + 1);
const drawRank = (u) => {
  const x = u * cumulative[MODELS - 1];
  let lo = 0;
  let hi = MODELS - 1;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (cumulative[mid] < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
};

/** A binary min-heap of events by time. */
class Events {
  constructor() { this.heap = []; }
  push(e) {
    const h = this.heap;
    h.push(e);
    for (let i = h.length - 1; i > 0;) {
      const p = (i - 1) >> 1;
      if (h[p].t <= h[i].t) break;
      [h[p], h[i]] = [h[i], h[p]];
      i = p;
    }
  }
  pop() {
    const h = this.heap;
    const top = h[0];
    const last = h.pop();
    if (h.length > 0) {
      h[0] = last;
      for (let i = 0; ;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < h.length && h[l].t < h[m].t) m = l;
        if (r < h.length && h[r].t < h[m].t) m = r;
        if (m === i) break;
        [h[m], h[i]] = [h[i], h[m]];
        i = m;
      }
    }
    return top;
  }
  get size() { return this.heap.length; }
}

/** One simulated node: a device, an LRU weight cache, per-model queues taking turns. */
class SimNode {
  constructor(id) {
    this.id = id;
    this.up = true;
    this.resident = new Map(); // model index -> bytes, in LRU order
    this.residentBytes = 0;
    this.queues = new Map(); // model index -> requests
    this.turns = []; // models with queued requests, oldest first
    this.turnAt = 0;
    this.queued = 0;
    this.busy = false;
    this.inflight = 0; // as a gateway counts: sent, not answered
    this.compute = new Map(); // model index -> ms of device time, cumulative
    this.windows = new LoadWindows(); // what the node reports: loads and residency over windows
    this.busyMs = 0;
    this.loads = 0;
  }
}

function simulate(policy) {
  const rand = random(SEED + 100);
  const events = new Events();
  const nodes = Array.from({ length: NODES }, (_, i) => new SimNode(`node-${String(i).padStart(2, '0')}`));
  let nextNodeId = NODES;
  /** The popularity order: rank -> model index; drifted in place. */
  const order = Int32Array.from({ length: MODELS }, (_, i) => i);
  for (let i = MODELS - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [order[i], order[j]] = [order[j], order[i]];
  }
  const stats = { arrived: 0, done: 0, refused: 0, hits: 0, misses: 0, loads: 0, latencies: [], moved: [], ratios: [], retried: 0, agree: [] };
  const measuring = (t) => t >= WARMUP_SECONDS * 1000;

  // ---- the gateways' views ----
  const live = () => nodes.filter((n) => n.up);
  const fleetNodes = () => live().map((n) => ({ id: n.id, budgetBytes: BUDGET }));
  const gateways = Array.from({ length: GATEWAYS }, (_, g) => ({ g, rr: g, turn: g, placement: null, loads: new Float64Array(MODELS), resident: new Map() }));
  const byId = new Map(nodes.map((n) => [n.id, n]));
  /** What placement is fed: each model's bytes, and its load and the nodes holding it as the gateway last read them. */
  const modelSpecs = (gw) => models.map((m, i) => ({ name: m.name, bytes: m.bytes, load: gw.loads[i], resident: gw.resident.get(i) ?? [] }));
  /** A node's counters now, for its window: per model, compute seconds so far and bytes resident. */
  const countersOf = (n) => () => {
    const now = new Map();
    for (const [m, ms] of n.compute) now.set(m, { computeSeconds: ms / 1000, residentBytes: 0 });
    for (const [m, bytes] of n.resident) now.set(m, { computeSeconds: (n.compute.get(m) ?? 0) / 1000, residentBytes: bytes });
    return now;
  };
  /** Share of the models every gateway places on the same nodes (measured when the last of them has placed). */
  const agreement = () => {
    const [first, ...rest] = gateways.map((gw) => gw.placement.nodes);
    let same = 0;
    for (const m of models) {
      const a = first.get(m.name);
      if (rest.every((p) => { const b = p.get(m.name); return b.length === a.length && b.every((id) => a.includes(id)); })) same++;
    }
    return same / MODELS;
  };
  /** A gateway's health check: every live node's last window, summed over the nodes, then placement. */
  const read = (gw, t) => {
    gw.loads.fill(0);
    gw.resident = new Map();
    for (const n of live()) {
      for (const [m, w] of n.windows.read(REPORT_SECONDS, t, countersOf(n))) {
        gw.loads[m] += w.load;
        if (w.residentBytes > 0) (gw.resident.get(m) ?? gw.resident.set(m, []).get(m)).push(n.id);
      }
    }
  };
  const replace = (gw, t) => {
    read(gw, t);
    gw.placement = placeFleet(modelSpecs(gw), fleetNodes(), DEFAULT_FLEET_OPTIONS);
  };
  /**
   * The oracle's partition: true popularity, known at once (no measuring, no lag), packed by
   * placement.ts's longest-processing-time packing of load and bytes onto the nodes, each model on
   * as many nodes as its load takes (no replica over half a node's bounded share), staying where it
   * was unless moving is clearly better. Repacked at every drift and membership change.
   */
  let ideal = null;
  const repackIdeal = () => {
    const rate = RATE / cumulative[MODELS - 1];
    const up = live();
    const loadOf = (k) => ((rate / (k + 1)) * (RUN_MS / 4 + ROW_MS)) / 1000; // coalesced runs: a share of the fixed cost
    let total = 0;
    for (let k = 0; k < MODELS; k++) total += loadOf(k);
    const perReplica = Math.min(DEFAULT_FLEET_OPTIONS.replicaLoad, ((1 + DEFAULT_FLEET_OPTIONS.epsilon) * total) / up.length / 2);
    const index = new Map(up.map((n, i) => [n.id, i]));
    const items = [];
    for (let k = 0; k < MODELS; k++) {
      const m = order[k];
      const load = loadOf(k);
      const current = ideal?.get(m)?.map((id) => index.get(id)).filter((i) => i !== undefined);
      items.push({ model: String(m), load, bytes: models[m].bytes, replicas: Math.max(1, Math.ceil(load / perReplica)), ...(current?.length ? { current } : {}) });
    }
    const packed = pack(items, up.map((n, i) => ({ id: i, budget: BUDGET })));
    ideal = new Map([...packed.devices].map(([m, ids]) => [Number(m), ids.map((i) => up[i].id)]));
  };
  let rankings = new Rankings(fleetNodes());

  /** The node a gateway sends a request for model `m` to. */
  const route = (gw, m) => {
    const up = live();
    if (policy === 'round_robin') return up[gw.rr++ % up.length];
    let ids;
    if (policy === 'affinity') ids = [rankings.first(models[m].name).id];
    else if (policy === 'ideal') ids = ideal.get(m);
    else ids = gw.placement.nodes.get(models[m].name);
    const candidates = ids.map((id) => byId.get(id)).filter((n) => n && n.up);
    if (candidates.length === 0) return byId.get(rankings.first(models[m].name).id);
    // The least outstanding replica, ties taken in turn (at low load every replica has none in flight).
    const from = gw.turn++ % candidates.length;
    let best = candidates[from];
    for (let k = 1; k < candidates.length; k++) {
      const n = candidates[(from + k) % candidates.length];
      if (n.inflight < best.inflight) best = n;
    }
    return best;
  };

  // ---- a node's device ----
  const start = (node, t) => {
    if (node.busy || node.queued === 0 || !node.up) return;
    let m;
    let q;
    for (;;) {
      m = node.turns[node.turnAt++];
      q = node.queues.get(m);
      if (q && q.length) break;
    }
    if (node.turnAt > 4096) {
      node.turns = node.turns.slice(node.turnAt);
      node.turnAt = 0;
    }
    const batch = q.splice(0, MAX_BATCH);
    node.queued -= batch.length;
    if (q.length) node.turns.push(m);
    else node.queues.delete(m);
    let ms = RUN_MS + ROW_MS * batch.length;
    const hit = node.resident.has(m);
    if (hit) {
      node.resident.delete(m); // most recently used now
      node.resident.set(m, models[m].bytes);
    } else {
      const bytes = models[m].bytes;
      for (const [victim, b] of node.resident) {
        if (node.residentBytes + bytes <= BUDGET) break;
        node.resident.delete(victim);
        node.residentBytes -= b;
      }
      node.resident.set(m, bytes);
      node.residentBytes += bytes;
      ms += bytes / COPY_BYTES_PER_MS;
      node.loads++;
      if (measuring(t)) stats.loads++;
    }
    for (const r of batch) if (measuring(t)) stats[hit ? 'hits' : 'misses']++;
    node.busy = true;
    node.running = batch;
    node.busyMs += measuring(t) ? ms : 0;
    node.compute.set(m, (node.compute.get(m) ?? 0) + RUN_MS + ROW_MS * batch.length);
    events.push({ t: t + ms, kind: 'done', node, batch });
  };
  const enqueue = (node, r, t) => {
    if (node.queued >= MAX_QUEUE) {
      if (measuring(t)) stats.refused++;
      return;
    }
    let q = node.queues.get(r.m);
    if (!q) {
      node.queues.set(r.m, (q = []));
      node.turns.push(r.m);
    }
    q.push(r);
    node.queued++;
    node.inflight++;
    r.node = node;
    start(node, t);
  };

  // ---- the run ----
  events.push({ t: 0, kind: 'arrive' });
  for (let g = 0; g < GATEWAYS; g++) events.push({ t: (REPORT_SECONDS * 1000) / 2 + g * GATEWAY_SKEW_MS, kind: 'report', gw: gateways[g] });
  events.push({ t: DRIFT_SECONDS * 1000, kind: 'drift' });
  events.push({ t: FAIL_AT * 1000, kind: 'fail' });
  events.push({ t: JOIN_AT * 1000, kind: 'join' });
  for (let s = WARMUP_SECONDS; s < SECONDS; s += 5) events.push({ t: s * 1000 + 1, kind: 'sample' });
  for (const gw of gateways) gw.placement = placeFleet(modelSpecs(gw), fleetNodes(), DEFAULT_FLEET_OPTIONS);
  repackIdeal();
  const end = SECONDS * 1000;
  /**
   * What a membership change moves: the models that gained a node (their requests now go where they
   * did not), and the resident bytes those must load again there (weights that were resident on a
   * node, the one that failed included, and are not on the node they gained), as a share of the
   * fleet's resident bytes. A model that trades one node holding it for another holding it costs
   * nothing, nor does one resident nowhere (its first request is a cold load wherever it goes).
   */
  const membershipMoves = (before, after) => {
    let moved = 0;
    let movedBytes = 0;
    let residentBytes = 0;
    for (const n of nodes) if (n.up) residentBytes += n.residentBytes;
    for (let i = 0; i < MODELS; i++) {
      const a = before(i);
      const gained = after(i).filter((id) => !a.includes(id));
      if (gained.length === 0) continue;
      moved++;
      if (!nodes.some((n) => n.resident.has(i))) continue;
      for (const id of gained) if (!byId.get(id)?.resident.has(i)) movedBytes += models[i].bytes;
    }
    return { models: moved / MODELS, bytes: residentBytes > 0 ? movedBytes / residentBytes : 0 };
  };
  const currentOf = () => {
    const gw0 = gateways[0];
    if (policy === 'affinity') { const r = rankings; return (i) => [r.first(models[i].name).id]; }
    if (policy === 'ideal') { const p = ideal; return (i) => p.get(i); }
    if (policy === 'placement') { const p = gw0.placement; return (i) => p.nodes.get(models[i].name); }
    return null;
  };
  /**
   * A node fails or joins: every gateway places again at once (its health check sees it). What moved
   * is measured on gateway 0's placement from the same reports, before and after the change alone.
   */
  const change = (t, why, apply) => {
    if (policy === 'placement') gateways[0].placement = placeFleet(modelSpecs(gateways[0]), fleetNodes(), DEFAULT_FLEET_OPTIONS);
    const before = currentOf();
    apply();
    rankings = new Rankings(fleetNodes());
    for (const gw of gateways) gw.placement = placeFleet(modelSpecs(gw), fleetNodes(), DEFAULT_FLEET_OPTIONS);
    if (policy === 'ideal') repackIdeal();
    const after = currentOf();
    if (before && after) stats.moved.push({ why, ...membershipMoves(before, after) });
  };

  while (events.size > 0) {
    const e = events.pop();
    const t = e.t;
    if (t > end) break;
    switch (e.kind) {
      case 'arrive': {
        const m = order[drawRank(rand())];
        const gw = gateways[Math.floor(rand() * GATEWAYS)];
        const r = { m, t0: t, gw };
        stats.arrived += measuring(t) ? 1 : 0;
        enqueue(route(gw, m), r, t);
        events.push({ t: t - Math.log(1 - rand()) * (1000 / RATE), kind: 'arrive' });
        break;
      }
      case 'done': {
        const node = e.node;
        if (!node.up) break; // failed meanwhile: its batch was re-sent
        node.busy = false;
        node.running = null;
        for (const r of e.batch) {
          node.inflight--;
          if (measuring(r.t0)) {
            stats.done++;
            stats.latencies.push(t - r.t0);
          }
        }
        start(node, t);
        break;
      }
      case 'report':
        replace(e.gw, t);
        if (policy === 'placement' && e.gw.g === GATEWAYS - 1 && measuring(t)) stats.agree.push(agreement());
        events.push({ t: t + REPORT_SECONDS * 1000, kind: 'report', gw: e.gw });
        break;
      case 'drift': {
        // 5% of the top 1,000 ranks trade places with ranks anywhere: the popular set moves.
        for (let k = 0; k < 50; k++) {
          const a = Math.floor(rand() * 1000);
          const b = Math.floor(rand() * MODELS);
          [order[a], order[b]] = [order[b], order[a]];
        }
        if (policy === 'ideal') repackIdeal();
        events.push({ t: t + DRIFT_SECONDS * 1000, kind: 'drift' });
        break;
      }
      case 'fail': {
        const victim = nodes[Math.floor(rand() * nodes.length)];
        change(t, 'a node failed', () => { victim.up = false; });
        // What it held is re-sent by the gateways to the nodes that serve those models now.
        const pending = [...(victim.running ?? []), ...[...victim.queues.values()].flat()];
        victim.running = null;
        victim.queues.clear();
        victim.queued = 0;
        victim.inflight = 0;
        for (const r of pending) {
          stats.retried++;
          enqueue(route(r.gw, r.m), r, t);
        }
        break;
      }
      case 'join': {
        const node = new SimNode(`node-${String(nextNodeId++).padStart(2, '0')}`);
        change(t, 'a node joined', () => {
          nodes.push(node);
          byId.set(node.id, node);
        });
        break;
      }
      case 'sample': {
        // The fleet's memory pooled: resident bytes over distinct resident bytes.
        let total = 0;
        const distinct = new Set();
        for (const n of live()) {
          total += n.residentBytes;
          for (const m of n.resident.keys()) distinct.add(m);
        }
        let distinctBytes = 0;
        for (const m of distinct) distinctBytes += models[m].bytes;
        stats.ratios.push(total / Math.max(1, distinctBytes));
        break;
      }
    }
  }
  const measuredSeconds = SECONDS - WARMUP_SECONDS;
  const busy = nodes.filter((n) => n.up).map((n) => n.busyMs);
  const meanBusy = busy.reduce((s, b) => s + b, 0) / busy.length;
  return {
    policy,
    hitRate: stats.hits / Math.max(1, stats.hits + stats.misses),
    coldLoadsPerSecond: stats.loads / measuredSeconds,
    throughput: stats.done / measuredSeconds,
    offered: stats.arrived / measuredSeconds,
    refused: stats.refused,
    p50: percentile(stats.latencies, 0.5),
    p99: percentile(stats.latencies, 0.99),
    maxOverMeanBusy: Math.max(...busy) / Math.max(1e-9, meanBusy),
    pooled: stats.ratios.reduce((s, r) => s + r, 0) / Math.max(1, stats.ratios.length),
    agreement: stats.agree.length ? Math.min(...stats.agree) : null,
    moved: stats.moved,
  };
}

/** A burst of first requests for a model nobody has asked for, through every gateway: how many nodes load it. */
function burstLoads(policy) {
  const fleet = Array.from({ length: NODES }, (_, i) => ({ id: `node-${String(i).padStart(2, '0')}`, budgetBytes: BUDGET }));
  const fresh = { name: 'never-asked', bytes: 100 * MB, load: 0 };
  const views = Array.from({ length: GATEWAYS }, () => placeFleet([fresh], fleet, DEFAULT_FLEET_OPTIONS).nodes.get(fresh.name));
  if (policy === 'round_robin') return Math.min(NODES, GATEWAYS * 8); // a burst of 8 per gateway spreads over as many nodes
  return new Set(views.map((v) => v[0])).size;
}

const started = performance.now();
const results = [];
for (const policy of args.policies.split(',')) {
  const t0 = performance.now();
  const r = simulate(policy);
  r.burstLoads = burstLoads(policy);
  r.wallSeconds = (performance.now() - t0) / 1000;
  results.push(r);
}
if (args.json) {
  console.log(JSON.stringify({ nodes: NODES, models: MODELS, seconds: SECONDS, rate: RATE, gateways: GATEWAYS, budget: BUDGET, catalogBytes, results }));
} else {
  console.log(`fleet of ${NODES} nodes, ${MODELS} models (${(catalogBytes / 1e9).toFixed(0)} GB, ${NODES}x one node's budget of ${(BUDGET / 1e9).toFixed(1)} GB), Zipf(1.0) drifting every ${DRIFT_SECONDS} s, ${RATE} req/s offered, ${GATEWAYS} gateways, ${SECONDS} s (${WARMUP_SECONDS} s warm-up); a node fails at ${FAIL_AT.toFixed(0)} s, one joins at ${JOIN_AT.toFixed(0)} s`);
  console.log('policy        hit rate  cold loads/s  req/s (offered)     refused   p50 ms   p99 ms  busiest/mean  resident/distinct  burst loads  moved at fail (models, bytes)  moved at join  gateways agree (least)');
  for (const r of results) {
    const mv = (why) => {
      const m = r.moved.find((x) => x.why === why);
      return m ? `${(m.models * 100).toFixed(1)}%, ${(m.bytes * 100).toFixed(1)}%` : '-';
    };
    console.log(`${r.policy.padEnd(12)} ${(r.hitRate * 100).toFixed(1).padStart(7)}%  ${r.coldLoadsPerSecond.toFixed(0).padStart(12)}  ${r.throughput.toFixed(0).padStart(7)} (${r.offered.toFixed(0)})  ${String(r.refused).padStart(9)}  ${r.p50.toFixed(1).padStart(7)}  ${r.p99.toFixed(1).padStart(7)}  ${r.maxOverMeanBusy.toFixed(2).padStart(12)}  ${r.pooled.toFixed(2).padStart(17)}  ${String(r.burstLoads).padStart(11)}  ${mv('a node failed').padStart(29)}  ${mv('a node joined').padStart(13)}  ${r.agreement === null ? '-' : `${(r.agreement * 100).toFixed(1)}%`}`);
  }
  console.log(`(${((performance.now() - started) / 1000).toFixed(1)} s of wall time)`);
}
