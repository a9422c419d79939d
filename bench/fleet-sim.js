// A fleet of simulated nodes driven by the gateway's real routing code: each simulated gateway is
// a src/remote/fleet-routes.ts FleetRoutes (placement by src/routing/fleet-placement.ts), fed
// simulated nodes through a simulated transport, and the nodes report through their real
// node/load-windows.ts, as ModelControlStatus does.
//
// Each node is one device with a weight budget and an LRU cache of whole models: a cold model
// costs its bytes at the host-to-device rate, evicting least recently used models; a batch runs in
// RUN_MS + ROW_MS per row; queued requests for the model that runs next are coalesced (up to
// MAX_BATCH), models taking turns oldest first. A prefetch (FleetRoutes asking a node that gains a
// model to load it first) takes the copy's time on that device. Requests arrive as a Poisson process
// over a catalog of mixed sizes, Zipf(1.0) by a popularity order that drifts (part of the popular
// set replaced every --drift seconds; 0: never), through GATEWAYS gateways.
//
// The transport, as a gateway's health check meets it (--transport streams, the default: each
// gateway holds each node's status stream, answered just after each window's boundary, and a check
// places from the answers held, decoded as they came; --transport reads: one status read per node per
// check, a node without the stream, its answers decoded within the check): each gateway's clock is off by up to
// --skew seconds (each its own, fixed), so each reads the nodes' wall-clock windows at its own
// "halfway"; each status read fails with probability --fail-reads and is slow with probability
// --slow-reads (200 ms to 2 s: past the 1 s probe timeout it fails too); over streams, each window's
// answer to a gateway is lost with probability --fail-reads (the stream died: found silent past a
// window and the timeout, a failed read, opened again at the next check, its first answer drawn as a
// read) and late with --slow-reads (waited for up to the timeout, then placed by the window before); a node whose reads fail
// keeps serving and placement goes on with its last report for REPORT_MAX_AGE_MS, then keeps it
// placed without its loads, as node-status.ts and fleet-routes.ts do. The check's routes change once the slowest read that answered is in and
// every report is decoded: the decode cost per model is measured on real ModelControlStatus bytes
// (proto-loader, as the gateway decodes them) and charged for the active models each node answers
// (active_only, as a pooled gateway asks). The RepositoryIndex is not read per check (the nodes'
// repository digest does not change in the run).
//
// Policies: round_robin (any node), affinity (each model's first rendezvous node, no bounds, no
// replicas), pooled (FleetRoutes, each request to the node its `pick` gives: a split model's shares,
// else the least outstanding; the nodes report the time batches waited for weights), oracle (a partition by true popularity, known at once and
// repacked at every drift by placement.ts's greedy packing: a strong reference, not a bound).
// The hit-rate *bound* is exact: in each drift period no policy's expected hit rate exceeds the
// request share of the most popular-per-byte models that fit in the fleet's memory (a fractional
// knapsack of the true popularity), since a request hits only a model resident at its arrival and
// arrivals do not depend on what is resident. It ignores cold loads, replicas and balance.
//
//   npm run build && node bench/fleet-sim.js [--nodes 64] [--models 10000] [--seconds 60]
//     [--rate 12000] [--gateways 3] [--seeds 11,12,13] [--report 2] [--drift 10] [--skew 1]
//     [--fail-reads 0.02] [--slow-reads 0.1] [--transport streams|reads] [--policies round_robin,affinity,pooled,oracle]
//     [--hot 10: the most popular model also gets 10 nodes' capacity of requests; "hot on" says on how many nodes it is]
//     [--epsilon 0.1] [--stickiness 0.1] (gateway.scheduling.pooled's)
//     [--hashed-homes: the nodes give no model bytes, so the homes are hashed, not bounded (routing/fleet-homes.ts)]
//     [--charge-decode yes|no|MS: the status decode charged as measured here, not at all, or MS a model (a run repeatable exactly)]
//
// Seeds 1-3 were the ones placement's options were tuned on (2026-11-27); 11-13 were not.
// Quiet moves and the worst quiet window are also given after the first minute (--seconds 180: the
// start's own settling left out); quiet moves are classified by kind (heavy or light, a replica added or
// elsewhere, the model active or idle) and counted for active models alone; SIM_DETAIL=1 adds each kind's evidence (where
// the model ran and was resident, whether the other gateways agree), the most-moved and some
// disagreed-on models' placements check by check, and the busiest node's models, on stderr;
// SIM_GIVEN=1 prints, at each of gateway 0's checks, the models given nodes of their own and the most
// popular model's rate and capacity as the nodes reported them. SIM_WINDOWS=1 prints, at each 5 s
// window, the busiest node's busy time over the mean, its weight loads, its placed load and the models
// it ran most with how many nodes gateway 0 gives each (SIM_WINDOWS=node-08: that node too).
// SIM_LOADS=1 prints each policy's weight loads per node over the run, and for pooled each node's
// loads beside the bytes of the models whose home it is (the first node of their ranking) over its budget.
// SIM_NODES=1 prints, per policy, the busiest and least busy nodes over the whole run: busy time over the mean, weight
// copies (cold loads, then prefetches) over the mean busy time, placed load over the placed mean (pooled, at the end)
// and how many models on several nodes (the shares' levers) each holds: a node busy over the whole run, not in one window.
// SIM_TRACE=m00012,m00345 prints each change of those models' placement at gateway 0 (SIM_TRACE_ALL=1: every gateway), on stderr.
import { parseArgs } from 'node:util';
import pino from 'pino';
import { DEFAULT_FLEET_OPTIONS, Rankings } from '../dist/routing/fleet-placement.js';
import { FleetRoutes } from '../dist/remote/fleet-routes.js';
import { Router } from '../dist/routing/routing.js';
import { readStatusReport } from '../dist/remote/status-report.js';
import { pack } from '../dist/routing/placement.js';
import { LoadWindows } from '../dist/node/load-windows.js';
import { loadControlClient } from '../dist/protocol/proto.js';
import { random } from '../test/helpers/mlp-catalog.js';
import { percentile, median } from './timing.js';

const { values: args } = parseArgs({
  options: {
    nodes: { type: 'string', default: '64' },
    models: { type: 'string', default: '10000' },
    seconds: { type: 'string', default: '60' },
    rate: { type: 'string', default: '12000' },
    gateways: { type: 'string', default: '3' },
    seeds: { type: 'string', default: '11,12,13' },
    policies: { type: 'string', default: 'round_robin,affinity,pooled,oracle' },
    report: { type: 'string', default: '2' },
    drift: { type: 'string', default: '10' },
    skew: { type: 'string', default: '1' },
    'fail-reads': { type: 'string', default: '0.02' },
    'slow-reads': { type: 'string', default: '0.1' },
    transport: { type: 'string', default: 'streams' },
    'charge-decode': { type: 'string', default: 'yes' },
    hot: { type: 'string', default: '0' },
    // gateway.scheduling.pooled's epsilon and stickiness (node.yaml), to weigh them against each other.
    epsilon: { type: 'string', default: String(DEFAULT_FLEET_OPTIONS.epsilon) },
    stickiness: { type: 'string', default: String(DEFAULT_FLEET_OPTIONS.stickiness) },
    json: { type: 'boolean', default: false },
    // The homes hashed, not bounded by bytes (the members give the gateways no model bytes): as before 2026-12-01.
    'hashed-homes': { type: 'boolean', default: false },
  },
});

const NODES = Number(args.nodes);
const MODELS = Number(args.models);
const SECONDS = Number(args.seconds);
const RATE = Number(args.rate);
const GATEWAYS = Number(args.gateways);
const SEEDS = args.seeds.split(',').map(Number);
const HASHED_HOMES = args['hashed-homes'];
/**
 * --charge-decode as a number: that many ms a model charged per status answer, the same on every run
 * and machine. Measured (yes), the charge follows this machine's speed at the moment, and the
 * delay it adds to every check moves the whole run: one seed's worst window was 1.13 in three runs
 * of one build and 1.18 in a fourth (2026-12-01).
 */
const CHARGE = args['charge-decode'];
const FIXED_DECODE_MS = /^[0-9]*\.?[0-9]+$/.test(CHARGE) ? Number(CHARGE) : undefined;
if (FIXED_DECODE_MS === undefined && CHARGE !== 'yes' && CHARGE !== 'no') {
  console.error(`--charge-decode ${CHARGE}: expected yes, no or a number of ms a model (0.0006, say)`);
  process.exit(2);
}
/** The decode charged a model, from this seed's measured decode. */
const decodeCharge = (measured) => FIXED_DECODE_MS ?? (CHARGE === 'yes' ? measured.msPerModel : 0);
const DECODE_CHARGE_SAID = FIXED_DECODE_MS !== undefined ? `${FIXED_DECODE_MS} ms a model as given` : CHARGE === 'yes' ? 'as measured' : 'nothing';
const FLEET_OPTIONS = { ...DEFAULT_FLEET_OPTIONS, epsilon: Number(args.epsilon), stickiness: Number(args.stickiness) };
let SEED = SEEDS[0];

const MB = 1e6;
/** A model's run: a fixed cost and a cost per row, in ms (a mid-size vision model on one GPU). */
const RUN_MS = 2;
const ROW_MS = 0.25;
const MAX_BATCH = 16;
/** One node's capacity for one model run busy: full batches back to back, requests per second. */
const NODE_CAPACITY = (MAX_BATCH / (RUN_MS + ROW_MS * MAX_BATCH)) * 1000;
/** --hot: the most popular model gets this many nodes' capacity of requests on top of its Zipf share. */
const HOT = Number(args.hot);
const HOT_RATE = HOT * NODE_CAPACITY;
/** Host-to-device copy rate, bytes per ms (25 GB/s, pinned memory on PCIe 5). */
const COPY_BYTES_PER_MS = 25e9 / 1000;
/** A node's queue bound: past it a request is refused (counted), as max_queue_depth does. */
const MAX_QUEUE = 2000;
/** How often each gateway reads the nodes' counters and places again: gateway.health_seconds, 2 by default. */
const REPORT_SECONDS = Number(args.report);
const DRIFT_SECONDS = Number(args.drift);
/** Each gateway's clock is off by up to this (ms), either way. */
const SKEW_MS = Number(args.skew) * 1000;
const FAIL_READS = Number(args['fail-reads']);
const SLOW_READS = Number(args['slow-reads']);
/**
 * streams: each gateway holds each node's status stream (WatchModelControlStatus), which the node
 * answers ANSWER_OFFSET_MS after each window's boundary; reads: one status read per node per check
 * (a node without the stream).
 */
const STREAMS = args.transport === 'streams';
if (!STREAMS && args.transport !== 'reads') throw new Error(`--transport is streams or reads, not ${args.transport}`);
/** When a node's stream answers, after its window's boundary (protocol/status-watch.ts answerOffsetMs at 2 s). */
const ANSWER_OFFSET_MS = 100;
/** What a gateway gives a status read (remote/gateway-server.ts's PROBE_TIMEOUT_MS). */
const PROBE_TIMEOUT_MS = 1000;
/** gateway.scheduling.pooled.report_max_age_seconds's default. */
const REPORT_MAX_AGE_MS = 10_000;
/** Membership changes: windows this long after one count as "changing" (busiest/mean, quiet moves). */
const SETTLE_MS = 10_000;
const WARMUP_SECONDS = Math.min(15, SECONDS / 4);
const FAIL_AT = SECONDS * 0.55;
// Quiet moves and the busiest node's quiet windows are also given from here on (with --seconds 180 or
// more): the first minute holds the start's own settling (every model placed at once, then moved as
// its first loads are read, each move pinned for the minimum age), which a fleet running for hours
// does not see again.
const SETTLED_MS = 60_000;
const JOIN_AT = SECONDS * 0.75;

// ---- the catalog: sizes log-uniform from 20 MB to 400 MB, drawn from the seed ----
let models = [];
let catalogBytes = 0;
/** One node's budget: the fleet's memory is the catalog's size (the catalog is NODES x one budget). */
let BUDGET = 0;
let catalogNames = [];
/** Each model's weight bytes, as a node reads them with its index (node-status.ts): what bounds the homes. */
let catalogModelBytes = new Map();
function makeCatalog(seed) {
  const rng = random(seed);
  models = Array.from({ length: MODELS }, (_, i) => ({ name: `m${String(i).padStart(5, '0')}`, bytes: Math.round(20 * MB * Math.exp(rng() * Math.log(20))) }));
  catalogBytes = models.reduce((s, m) => s + m.bytes, 0);
  BUDGET = Math.floor(catalogBytes / NODES);
  catalogNames = models.map((m) => m.name);
  catalogModelBytes = HASHED_HOMES ? undefined : new Map(models.map((m) => [m.name, m.bytes]));
}

/**
 * What decoding a ModelControlStatus answer costs a gateway, per model in it (ms): real bytes for
 * a node serving the whole catalog, read as the gateway reads them (remote/status-report.ts), the
 * median of a few. A pooled gateway asks active_only, so an answer holds the node's active models
 * only (those with load or weights resident), and a check costs this times the active models of
 * every node read.
 */
function measureDecodeMs() {
  const { ModelControlStatus: rpc } = loadControlClient().service;
  const reply = {
    weight_budget_bytes: BUDGET, devices: 1, queue_depth: 3, node_name: 'node-00', started_unix_ms: Date.now(), snapshot_age_seconds: 0.2,
    models: models.map((m, i) => ({
      name: m.name, state: 'READY', reason: '', instance: `${m.name}#1`, residency: 'system', resident_bytes: i % 50 === 0 ? m.bytes : 0, device: -1,
      queue_depth: 0, learned_cost: [{ batch_size: 1, ms: 2.1 }], weight: 1, max_batch_size: 16, placed_devices: [0], session_device_bytes: 0, cuda_graphs: '',
      weight_bytes: m.bytes, compute_seconds: i * 0.01, weight_hits: i, weight_misses: 1, window_load: i % 7 === 0 ? 0.01 : 0, window_resident_bytes: i % 50 === 0 ? m.bytes : 0,
      session: 'own session', session_bytes: 1000,
    })),
  };
  const bytes = rpc.responseSerialize(reply);
  const ms = [];
  for (let k = 0; k < 12; k++) {
    const t0 = performance.now();
    readStatusReport(bytes);
    if (k >= 4) ms.push(performance.now() - t0); // after the JIT's warm-up
  }
  return { msPerModel: median(ms) / MODELS, fullMs: median(ms), bytes: bytes.length };
}

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
    this.inflightBy = new Map(); // gateway index -> what that gateway sent here and has not had answered
    this.compute = new Map(); // model index -> ms of device time, cumulative
    this.weightWaits = new Map(); // model index -> ms its batches waited for its weights (cold loads), cumulative
    this.rows = new Map(); // model index -> rows answered, cumulative
    this.refusedRows = new Map(); // model index -> rows refused with the queue full, cumulative
    this.largest = new Map(); // model index -> the largest batch it ran (what its learned costs know)
    this.smallest = new Map(); // model index -> the smallest: two sizes learned give its cost line
    this.windows = new LoadWindows(); // what the node reports: loads and residency over windows
    this.busyMs = 0;
    this.copyMs = 0; // weight copies of cold batches over the measured run (SIM_NODES)
    this.prefetchMs = 0; // weight copies of prefetches over the measured run (SIM_NODES)
    this.windowBusyMs = 0; // device time in the current 5 s sample window
    this.loads = 0;
    this.reports = new Map(); // window index -> the report it gives every reader of that window
  }
}

/** The simulation's clock (ms): what a member's report ages by. */
let simNow = 0;
const silent = pino({ level: 'silent' });

/**
 * A node as one gateway sees it (node-status.ts's part FleetRoutes reads): up while the node is;
 * its last report, kept for REPORT_MAX_AGE_MS while reads fail; a prefetch asks the node to load.
 */
class SimMember {
  constructor(node, index, prefetch, gateway = 0) {
    this.node = node;
    this.gateway = gateway;
    this.address = `10.0.${index >> 8}.${index & 255}:8001`;
    this.name = node.id;
    this.draining = false;
    this.models = catalogNames;
    this.modelBytes = catalogModelBytes;
    this.last = null;
    this.lastAt = -Infinity;
    this.prefetchOn = prefetch;
  }
  get up() { return this.node.up; }
  /**
   * Requests this gateway sent to the node and has not had answered: what its least-outstanding
   * router reads (remote-node.ts counts its own calls; it cannot see the other gateways'). Until
   * 2026-12-02 the simulator gave every gateway the node's whole count, which no gateway has: with
   * its own count the worst quiet window's mean over 19 seeds moved 1.151 -> 1.159.
   */
  get inflight() { return this.node.inflightBy.get(this.gateway) ?? 0; }
  get report() { return this.node.up && this.last && simNow - this.lastAt <= REPORT_MAX_AGE_MS ? this.last : null; }
  /** Its last report however old, while up: placement keeps a node whose reads fail placed by it (node-status.ts). */
  get lastReport() { return this.node.up ? this.last : null; }
  prefetch(model) { return this.prefetchOn(this.node, model); }
}

/** The hit-rate bound for popularity `order` (rank -> model): the fractional knapsack of request share per byte into `memory`. */
function hitBound(order, memory) {
  const H = cumulative[MODELS - 1];
  // Shares of all requests: the Zipf stream's, and the hot one's on top for the first rank.
  const zipf = RATE / (RATE + HOT_RATE);
  const items = Array.from(order, (m, k) => ({ p: (zipf / (k + 1)) / H + (k === 0 ? 1 - zipf : 0), bytes: models[m].bytes }));
  items.sort((a, b) => b.p / b.bytes - a.p / a.bytes);
  let left = memory;
  let share = 0;
  for (const it of items) {
    if (left <= 0) break;
    const take = Math.min(1, left / it.bytes);
    share += it.p * take;
    left -= it.bytes * take;
  }
  return share;
}

async function simulate(policy, decodeMsPerModel) {
  const rand = random(SEED + 100);
  const faults = random(SEED + 200); // the transport's draws, apart from the traffic's
  const events = new Events();
  const nodes = Array.from({ length: NODES }, (_, i) => new SimNode(`node-${String(i).padStart(2, '0')}`));
  let nextNodeId = NODES;
  /** The popularity order: rank -> model index; drifted in place. */
  const order = Int32Array.from({ length: MODELS }, (_, i) => i);
  for (let i = MODELS - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [order[i], order[j]] = [order[j], order[i]];
  }
  const stats = {
    arrived: 0, done: 0, refused: 0, hits: 0, misses: 0, loads: 0, latencies: [], moved: [], ratios: [], retried: 0, agree: [],
    windows: [], quietMoves: 0, quietActiveMoves: 0, settledMoves: 0, settledMs: 0, moveKinds: new Map(), movesOf: new Map(), trace: new Map(), quietMs: 0, checkMs: [], decodeMs: [], failedReads: 0, reads: 0, bound: [], hottest: 0,
  };
  const measuring = (t) => t >= WARMUP_SECONDS * 1000;
  const changes = []; // times of membership changes
  const changing = (t) => changes.some((c) => t >= c && t < c + SETTLE_MS);
  /**
   * SIM_WINDOWS=1: the busiest node of the 5 s window just ended, on stderr: its device time over the
   * mean, its weight loads, and the models it ran most in the window with where gateway 0 places them.
   */
  const traceWindow = (t, mean) => {
    const pl = gateways[0].routes.placement;
    const watched = process.env.SIM_WINDOWS.startsWith('node-') ? nodes.find((n) => n.id === process.env.SIM_WINDOWS) : null;
    if (watched?.up) traceNode(t, mean, watched, pl);
    traceNode(t, mean, live().reduce((a, b) => (b.windowBusyMs > a.windowBusyMs ? b : a)), pl);
  };
  const traceNode = (t, mean, top, pl) => {
    const placedMean = [...pl.load.values()].reduce((a, b) => a + b, 0) / pl.load.size;
    const ran = [...top.compute].map(([m, ms]) => [m, ms - (top.computeAtSample?.get(m) ?? 0)]).filter(([, ms]) => ms > 0);
    ran.sort((a, b) => b[1] - a[1]);
    const top6 = ran.slice(0, 6).map(([m, ms]) => {
      const name = models[m].name;
      const on = pl.nodes.get(name) ?? [];
      return `${name}${pl.heavy.has(name) ? '(H)' : ''}:${ms.toFixed(0)}ms/${on.length}${on.includes(top.id) ? '' : '!'}`;
    });
    console.error(`t=${(t / 1000).toFixed(0)}s ${top.id} ${(top.windowBusyMs / Math.max(1e-9, mean)).toFixed(3)} (mean ${mean.toFixed(0)} ms)` +
      ` loads ${top.loads - (top.loadsAtSample ?? 0)} placed load ${pl.load.get(top.id)?.toFixed(3)} (mean ${placedMean.toFixed(3)}): ${top6.join(' ')}`);
  };

  const live = () => nodes.filter((n) => n.up);
  const byId = new Map(nodes.map((n) => [n.id, n]));
  const fleetNodes = () => live().map((n) => ({ id: n.id, budgetBytes: BUDGET }));
  let rankings = new Rankings(fleetNodes());

  // ---- prefetches: a node asked to load a model copies it onto its device, then answers ----
  let settle = false;
  const prefetch = (node, m) => new Promise((resolve, reject) => {
    const index = modelIndex.get(m);
    events.push({ t: simNow + models[index].bytes / COPY_BYTES_PER_MS, kind: 'prefetched', node, m: index, resolve, reject });
  });
  const modelIndex = new Map(models.map((m, i) => [m.name, i]));
  const makeResident = (node, m, t) => {
    if (node.resident.has(m)) {
      node.resident.delete(m);
      node.resident.set(m, models[m].bytes);
      return false;
    }
    const bytes = models[m].bytes;
    for (const [victim, b] of node.resident) {
      if (node.residentBytes + bytes <= BUDGET) break;
      node.resident.delete(victim);
      node.residentBytes -= b;
    }
    node.resident.set(m, bytes);
    node.residentBytes += bytes;
    node.loads++;
    if (measuring(t)) stats.loads++;
    return true;
  };

  // ---- the gateways ----
  const gateways = Array.from({ length: GATEWAYS }, (_, g) => {
    const members = nodes.map((n, i) => new SimMember(n, i, prefetch, g));
    return {
      g, rr: g, turn: g, members,
      skew: (faults() * 2 - 1) * SKEW_MS,
      routes: new FleetRoutes({ fleet: FLEET_OPTIONS, prefetchTimeoutMs: 60_000, logger: silent }),
      router: new Router('least_outstanding'),
    };
  });
  /** A node's counters now, for its window: per model, compute seconds so far and bytes resident. */
  /**
   * Rows per second a device answers of model `m` at full batches, as a node's learned costs say
   * (execution-costs.ts fullBatchRate): two batch sizes run give the cost line (exact here), taken to
   * MAX_BATCH; one, the rate at that size.
   */
  const capacityOf = (n, m) => {
    const b = n.largest.get(m) ?? 0;
    const at = b > (n.smallest.get(m) ?? b) ? MAX_BATCH : b;
    return at > 0 ? (at / (RUN_MS + ROW_MS * at)) * 1000 : 0;
  };
  const countersOf = (n) => () => {
    const now = new Map();
    const reading = (m, residentBytes) => ({ computeSeconds: (n.compute.get(m) ?? 0) / 1000, residentBytes, rows: n.rows.get(m) ?? 0, queued: n.queues.get(m)?.length ?? 0, refused: n.refusedRows.get(m) ?? 0, capacity: capacityOf(n, m), weightLoadSeconds: (n.weightWaits.get(m) ?? 0) / 1000 });
    for (const m of n.compute.keys()) now.set(m, reading(m, 0));
    for (const [m, bytes] of n.resident) now.set(m, reading(m, bytes));
    return now;
  };
  /** What a node answers a status read at `t` with: its last whole window, the same to every reader of that window. */
  const reportOf = (n, t) => {
    const window = n.windows.read(REPORT_SECONDS, t, countersOf(n));
    const index = Math.floor(t / (REPORT_SECONDS * 1000));
    let report = n.reports.get(index);
    if (report) return report;
    // active_only, as a pooled gateway asks: the models with load over the window or weights resident.
    const byName = new Map();
    for (const [m, w] of window) {
      if (w.load > 0 || w.residentBytes > 0) byName.set(models[m].name, { weightBytes: models[m].bytes, residentBytes: w.residentBytes, windowLoad: w.load, windowResidentBytes: w.residentBytes, hits: 0, misses: 0, sessionBytes: 0, windowRate: w.rate, windowCapacity: w.capacity, windowWeightLoad: w.weightLoad });
    }
    report = { nodeName: n.id, startedMs: 0, budgetBytes: BUDGET, sessionBudgetBytes: 0, devices: 1, queueDepth: n.queued, models: byName };
    n.reports.clear();
    n.reports.set(index, report);
    return report;
  };
  /** A read's latency (Infinity: it fails), as the transport draws it. */
  const readLatency = () => {
    const u = faults();
    return u < FAIL_READS ? Infinity : u < FAIL_READS + SLOW_READS ? 200 + faults() * 1800 : 2;
  };
  /** A read (a status read, or a stream's first answer): its latency, or null when it fails or times out (counted). */
  const read = () => {
    const latency = readLatency();
    if (latency <= PROBE_TIMEOUT_MS) return latency;
    stats.failedReads++;
    return null;
  };
  /**
   * A gateway's health check at `t` over streams: an open stream's answer for the window that ended
   * where the gateway's own window began (by its clock; the node sends it ANSWER_OFFSET_MS after that
   * boundary by its own, and a gateway whose clock is ahead waits for it) is the report. It is lost
   * with probability --fail-reads (the stream broke, which the gateway sees at once: it opens the
   * stream again, the first answer drawn as a read) and late with --slow-reads (200 ms to 2 s: the
   * check waits for it up to the timeout, as for a read, then places by the window before). A
   * stream not open is opened, its first answer at once, with a read's latency and failures.
   * Decoding happens as answers come, off the check.
   */
  const streamCheck = (gw, t) => {
    const lengthMs = REPORT_SECONDS * 1000;
    // The window this gateway places by: the one that ended where its own window began (by its clock).
    const target = Math.floor((t + gw.skew) / lengthMs) * lengthMs;
    let slowest = 0;
    const answered = [];
    for (const mb of gw.members) {
      if (!mb.node.up) {
        mb.stream = null;
        continue;
      }
      stats.reads++;
      if (mb.stream && mb.stream.heardFor < target) {
        // The answer carrying the window, sent just after it ended: lost with the stream (a broken
        // connection, seen at once: opened again below), or waited for up to the timeout (late past
        // it: the window before's still).
        const sentAt = target + ANSWER_OFFSET_MS;
        const latency = readLatency();
        if (latency === Infinity) mb.stream = null;
        else {
          if (sentAt + latency > t + PROBE_TIMEOUT_MS) continue;
          slowest = Math.max(slowest, sentAt + latency - t);
          mb.stream.heardFor = target;
          // Sent: the window as the node took it. Not yet (this gateway's clock ahead): read when the
          // check places, after the node's 'answer' event took it (and before it takes the next).
          answered.push([mb, sentAt <= t ? reportOf(mb.node, sentAt) : () => reportOf(mb.node, sentAt), sentAt + latency]);
          continue;
        }
      }
      if (!mb.stream) {
        const latency = read();
        slowest = Math.max(slowest, latency ?? PROBE_TIMEOUT_MS);
        if (latency === null) continue;
        mb.stream = { heardFor: Math.floor(t / lengthMs) * lengthMs };
        answered.push([mb, reportOf(mb.node, t), t + latency]);
      }
    }
    events.push({ t: t + slowest, kind: 'placed', gw, answered });
  };
  /**
   * A gateway's health check at `t`: a status read of every live node (some fail, some are slow),
   * then, once the slowest answer that made it is in and every report is decoded, FleetRoutes.update.
   */
  const check = (gw, t) => {
    if (STREAMS) return streamCheck(gw, t);
    let slowest = 0;
    let decoded = 0;
    const answered = [];
    for (const mb of gw.members) {
      if (!mb.node.up) continue;
      stats.reads++;
      const latency = read();
      slowest = Math.max(slowest, latency ?? PROBE_TIMEOUT_MS);
      if (latency === null) continue;
      const report = reportOf(mb.node, t);
      decoded += report.models.size;
      answered.push([mb, report, t]);
    }
    if (gw.g === 0 && measuring(t)) stats.decodeMs.push(decodeMsPerModel * decoded);
    events.push({ t: t + slowest + decodeMsPerModel * decoded, kind: 'placed', gw, answered });
  };
  const place = (gw, answered, t) => {
    for (const [mb, report, at] of answered) {
      mb.last = typeof report === 'function' ? report() : report;
      mb.lastAt = at;
    }
    const t0 = performance.now();
    const movesBefore = gw.routes.moves;
    const before = gw.routes.placement;
    gw.routes.update(gw.members);
    if (process.env.SIM_GIVEN && gw.g === 0) {
      const hot = models[order[0]].name;
      const read = gw.members.map((mb) => mb.last?.models.get(hot)).filter(Boolean);
      const given = [...gw.routes.placement.givenOver].map((name) => `${name} on ${gw.routes.placement.nodes.get(name).length}`).join(', ') || 'none';
      console.error(`${(t / 1000).toFixed(1)} s: given over ${given}; the most popular model read at ${read.reduce((sum, r) => sum + r.windowRate, 0).toFixed(0)} requests/s against ${Math.max(0, ...read.map((r) => r.windowCapacity)).toFixed(0)} a device; ${gw.routes.moves - movesBefore} moves`);
    }
    if (process.env.SIM_TRACE && (gw.g === 0 || process.env.SIM_TRACE_ALL)) {
      for (const name of process.env.SIM_TRACE.split(',')) {
        const a = (before?.nodes.get(name) ?? []).join(','), b = (gw.routes.placement.nodes.get(name) ?? []).join(',');
        if (a !== b) console.error(`${(t / 1000).toFixed(1)} s TRACE gw${gw.g} ${name} ${a} -> ${b} heavy ${gw.routes.placement.heavy.has(name)}`);
      }
    }
    if (gw.g === 0 && measuring(t)) {
      stats.checkMs.push(performance.now() - t0);
      if (!changing(t)) {
        stats.quietMoves += gw.routes.moves - movesBefore;
        if (t >= SETTLED_MS) stats.settledMoves += gw.routes.moves - movesBefore;
        if (before) explainMoves(before, gw.routes.placement, gw.members);
      }
    }
  };
  /**
   * What kind of change each quiet move of gateway 0's placement is: a model that gained a node, by
   * whether placement bounded it (heavy) or not (light), whether it gained a replica or went
   * elsewhere, and whether any node reported it (load or weights resident) or it was idle.
   */
  const explainMoves = (before, after, members) => {
    const reported = new Set();
    const serving = new Map();
    const resident = new Map();
    for (const mb of members) {
      if (!mb.node.up || !mb.last) continue;
      for (const [name, r] of mb.last.models) {
        reported.add(name);
        if (r.windowLoad > 0) serving.set(name, [...(serving.get(name) ?? []), mb.node.id]);
        if (r.windowResidentBytes > 0) resident.set(name, [...(resident.get(name) ?? []), mb.node.id]);
      }
    }
    for (const [name, target] of after.nodes) {
      const old = before.nodes.get(name);
      if (!old) continue;
      const gained = target.filter((id) => !old.includes(id)).length;
      if (gained === 0) continue;
      let kind = `${after.heavy.has(name) ? (before.heavy.has(name) ? 'heavy' : 'became heavy') : (before.heavy.has(name) ? 'became light' : 'light')}, ${target.length > old.length ? 'replica added' : 'elsewhere'}, ${reported.has(name) ? 'active' : 'idle'}`;
      if (process.env.SIM_DETAIL) {
        const sv = serving.get(name) ?? [];
        const rs = resident.get(name) ?? [];
        const others = gateways.slice(1).map((g) => (g.routes.placement?.nodes.get(name) ?? []).join(','));
        kind += ` [others ${others.filter((o) => o === target.join(',')).length}/${others.length} agree with new, ${others.filter((o) => o === old.join(',')).length} with old]`;
        kind += ` [n=${old.length}->${target.length} serving ${sv.length} (old ${old.some((id) => sv.includes(id)) ? 'in' : 'out'}) resident ${rs.length} (old ${old.some((id) => rs.includes(id)) ? 'in' : 'out'})]`;
      }
      stats.moveKinds.set(kind, (stats.moveKinds.get(kind) ?? 0) + gained);
      if (reported.has(name)) stats.quietActiveMoves += gained;
      if (process.env.SIM_DETAIL) stats.movesOf.set(name, (stats.movesOf.get(name) ?? 0) + 1);
    }
    if (process.env.SIM_DETAIL) {
      for (const [name, target] of after.nodes) {
        if (!stats.trace.has(name)) stats.trace.set(name, []);
        const loads = [];
        for (const mb of members) { const r = mb.last?.models.get(name); if (mb.node.up && r && r.windowLoad > 0) loads.push(`${mb.node.id.slice(5)}:${r.windowLoad.toFixed(3)}`); }
        const h = stats.trace.get(name);
        const line = `${after.heavy.has(name) ? 'H' : 'L'} -> ${target.map((id) => id.slice(5)).join(',')} | ran ${loads.join(' ')} | others ${gateways.slice(1).map((g) => (g.routes.placement?.nodes.get(name) ?? []).map((id) => id.slice(5)).join(',')).join(' / ')}`;
        if (h.length < 200) h.push(line);
      }
    }
  };
  /** Share of the models every gateway places on the same nodes. */
  const agreement = () => {
    const [first, ...rest] = gateways.map((gw) => gw.routes.placement.nodes);
    let same = 0;
    for (const m of models) {
      const a = first.get(m.name) ?? [];
      if (rest.every((p) => { const b = p.get(m.name) ?? []; return b.length === a.length && b.every((id) => a.includes(id)); })) same++;
    }
    return same / MODELS;
  };

  /**
   * The oracle's partition: true popularity, known at once (no measuring, no lag), packed by
   * placement.ts's longest-processing-time packing of load and bytes onto the nodes, each model on
   * as many nodes as its load takes (no replica over half a node's bounded share), staying where it
   * was unless moving is clearly better. Repacked at every drift and membership change.
   */
  let oracle = null;
  const repackOracle = () => {
    const rate = RATE / cumulative[MODELS - 1];
    const up = live();
    const loadOf = (k) => ((rate / (k + 1)) * (RUN_MS / 4 + ROW_MS)) / 1000; // coalesced runs: a share of the fixed cost
    let total = 0;
    for (let k = 0; k < MODELS; k++) total += loadOf(k);
    const perReplica = Math.min(FLEET_OPTIONS.replicaLoad, ((1 + FLEET_OPTIONS.epsilon) * total) / up.length / 2);
    const index = new Map(up.map((n, i) => [n.id, i]));
    const items = [];
    for (let k = 0; k < MODELS; k++) {
      const m = order[k];
      const load = loadOf(k);
      const current = oracle?.get(m)?.map((id) => index.get(id)).filter((i) => i !== undefined);
      items.push({ model: String(m), load, bytes: models[m].bytes, replicas: Math.min(up.length, Math.max(1, Math.ceil(load / perReplica))), ...(current?.length ? { current } : {}) });
    }
    const packed = pack(items, up.map((n, i) => ({ id: i, budget: BUDGET })));
    oracle = new Map([...packed.devices].map(([m, ids]) => [Number(m), ids.map((i) => up[i].id)]));
  };

  /** The node a gateway sends a request for model `m` to. */
  const route = (gw, m) => {
    const up = live();
    if (policy === 'round_robin') return up[gw.rr++ % up.length];
    // Pooled: the gateway's own choice (its routes, by the model's shares where it has them, else the least outstanding).
    if (policy === 'pooled') return gw.routes.pick(models[m].name, gw.members.filter((mb) => mb.node.up), gw.router).node;
    let candidates;
    {
      const ids = policy === 'affinity' ? [rankings.first(models[m].name).id] : oracle.get(m);
      candidates = ids.map((id) => byId.get(id)).filter((n) => n && n.up);
      if (candidates.length === 0) return byId.get(rankings.first(models[m].name).id);
    }
    // The least outstanding replica as this gateway counts (what it sent there), ties taken in turn
    // (at low load every replica has none in flight).
    const mine = (n) => n.inflightBy.get(gw.g) ?? 0;
    const from = gw.turn++ % candidates.length;
    let best = candidates[from];
    for (let k = 1; k < candidates.length; k++) {
      const n = candidates[(from + k) % candidates.length];
      if (mine(n) < mine(best)) best = n;
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
    const cold = makeResident(node, m, t);
    if (cold) {
      ms += models[m].bytes / COPY_BYTES_PER_MS;
      if (measuring(t)) node.copyMs += models[m].bytes / COPY_BYTES_PER_MS;
      node.weightWaits.set(m, (node.weightWaits.get(m) ?? 0) + models[m].bytes / COPY_BYTES_PER_MS);
    }
    for (const r of batch) if (measuring(t)) stats[cold ? 'misses' : 'hits']++;
    node.busy = true;
    node.running = batch;
    if (measuring(t)) node.busyMs += ms;
    node.windowBusyMs += ms;
    node.compute.set(m, (node.compute.get(m) ?? 0) + RUN_MS + ROW_MS * batch.length);
    node.rows.set(m, (node.rows.get(m) ?? 0) + batch.length);
    if (batch.length > (node.largest.get(m) ?? 0)) node.largest.set(m, batch.length);
    if (batch.length < (node.smallest.get(m) ?? Infinity)) node.smallest.set(m, batch.length);
    events.push({ t: t + ms, kind: 'done', node, batch });
  };
  const enqueue = (node, r, t) => {
    if (node.queued >= MAX_QUEUE) {
      if (measuring(t)) stats.refused++;
      node.refusedRows.set(r.m, (node.refusedRows.get(r.m) ?? 0) + 1);
      return;
    }
    let q = node.queues.get(r.m);
    if (!q) {
      node.queues.set(r.m, (q = []));
      node.turns.push(r.m);
    }
    q.push(r);
    node.queued++;
    node.inflightBy.set(r.gw.g, (node.inflightBy.get(r.gw.g) ?? 0) + 1);
    r.node = node;
    start(node, t);
  };

  // ---- the run ----
  const windowMs = REPORT_SECONDS * 1000;
  /** Gateway `gw`'s next check after `t`: halfway through a window by its own clock. */
  const nextCheck = (gw, t) => {
    const own = t + gw.skew;
    let at = Math.floor(own / windowMs) * windowMs + windowMs / 2;
    if (at <= own) at += windowMs;
    return at - gw.skew;
  };
  events.push({ t: 0, kind: 'arrive' });
  for (const gw of gateways) events.push({ t: nextCheck(gw, 0), kind: 'check', gw });
  // Streams: each node answers its streams just after each window's boundary, taking the window then.
  if (STREAMS && policy === 'pooled') events.push({ t: ANSWER_OFFSET_MS, kind: 'answer' });
  if (DRIFT_SECONDS > 0) events.push({ t: DRIFT_SECONDS * 1000, kind: 'drift' });
  events.push({ t: FAIL_AT * 1000, kind: 'fail' });
  events.push({ t: JOIN_AT * 1000, kind: 'join' });
  for (let s = WARMUP_SECONDS; s < SECONDS; s += 5) events.push({ t: s * 1000 + 1, kind: 'sample' });
  for (const gw of gateways) gw.routes.update(gw.members); // nothing reported yet: every model on its ranking's first node
  repackOracle();
  let boundSince = WARMUP_SECONDS * 1000;
  let bound = hitBound(order, NODES * BUDGET);
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
    if (policy === 'affinity') { const r = rankings; return (i) => [r.first(models[i].name).id]; }
    if (policy === 'oracle') { const p = oracle; return (i) => p.get(i); }
    if (policy === 'pooled') { const p = new Map(gateways[0].routes.placement.nodes); return (i) => p.get(models[i].name) ?? []; }
    return null;
  };
  /**
   * A node fails or joins: every gateway's routes see it at once (a failed call's probe, or a
   * discovery), from the reports they hold. What moved is measured on gateway 0's placement.
   */
  const change = (t, why, apply) => {
    changes.push(t);
    const before = currentOf();
    apply();
    rankings = new Rankings(fleetNodes());
    for (const gw of gateways) gw.routes.update(gw.members);
    if (policy === 'oracle') repackOracle();
    const after = currentOf();
    if (before && after) stats.moved.push({ why, ...membershipMoves(before, after) });
  };

  while (events.size > 0) {
    const e = events.pop();
    const t = e.t;
    if (t > end) break;
    if (settle && e.kind !== 'prefetched') {
      // FleetRoutes switches a model's requests once its prefetches settle (promise callbacks).
      await new Promise((resolve) => setImmediate(resolve));
      settle = false;
    }
    simNow = t;
    switch (e.kind) {
      case 'arrive': {
        const m = rand() < HOT_RATE / (RATE + HOT_RATE) ? order[0] : order[drawRank(rand())];
        const gw = gateways[Math.floor(rand() * GATEWAYS)];
        const r = { m, t0: t, gw };
        stats.arrived += measuring(t) ? 1 : 0;
        enqueue(route(gw, m), r, t);
        events.push({ t: t - Math.log(1 - rand()) * (1000 / (RATE + HOT_RATE)), kind: 'arrive' });
        break;
      }
      case 'done': {
        const node = e.node;
        if (!node.up) break; // failed meanwhile: its batch was re-sent
        node.busy = false;
        node.running = null;
        for (const r of e.batch) {
          node.inflightBy.set(r.gw.g, node.inflightBy.get(r.gw.g) - 1);
          if (measuring(r.t0)) {
            stats.done++;
            stats.latencies.push(t - r.t0);
          }
        }
        start(node, t);
        break;
      }
      case 'prefetched': {
        const node = e.node;
        if (!node.up) e.reject(new Error('node failed'));
        else {
          makeResident(node, e.m, t);
          const ms = models[e.m].bytes / COPY_BYTES_PER_MS;
          if (measuring(t)) node.prefetchMs += ms;
          if (measuring(t)) node.busyMs += ms;
          node.windowBusyMs += ms;
          e.resolve();
        }
        settle = true;
        break;
      }
      case 'check':
        if (policy === 'pooled') check(e.gw, t);
        events.push({ t: nextCheck(e.gw, t + 1), kind: 'check', gw: e.gw });
        break;
      case 'answer':
        for (const n of nodes) if (n.up) reportOf(n, t);
        events.push({ t: t + REPORT_SECONDS * 1000, kind: 'answer' });
        break;
      case 'placed':
        place(e.gw, e.answered, t);
        if (e.gw.g === GATEWAYS - 1 && measuring(t)) stats.agree.push(agreement());
        break;
      case 'drift': {
        // 5% of the top 1,000 ranks trade places with ranks anywhere: the popular set moves.
        if (measuring(t)) stats.bound.push([bound, t - boundSince]);
        boundSince = Math.max(boundSince, t);
        for (let k = 0; k < 50; k++) {
          const a = Math.floor(rand() * Math.min(1000, MODELS));
          const b = Math.floor(rand() * MODELS);
          [order[a], order[b]] = [order[b], order[a]];
        }
        bound = hitBound(order, live().length * BUDGET);
        if (policy === 'oracle') repackOracle();
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
        victim.inflightBy.clear();
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
          for (const gw of gateways) {
            const mb = new SimMember(node, nodes.length - 1, prefetch, gw.g);
            gw.members.push(mb);
          }
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
        // Balance over the 5 s window just ended, apart for windows with a membership change.
        if (t > WARMUP_SECONDS * 1000 + 1) {
          const busy = live().map((n) => n.windowBusyMs);
          const mean = busy.reduce((a, b) => a + b, 0) / busy.length;
          const quiet = !changing(t - 5000) && !changing(t);
          const settled = t - 5000 >= SETTLED_MS;
          stats.windows.push({ ratio: Math.max(...busy) / Math.max(1e-9, mean), changing: !quiet, settled });
          if (process.env.SIM_WINDOWS && policy === 'pooled') traceWindow(t, mean);
          if (quiet) stats.quietMs += 5000;
          if (quiet && settled) stats.settledMs += 5000;
        }
        for (const n of nodes) {
          n.windowBusyMs = 0;
          if (process.env.SIM_WINDOWS) { n.computeAtSample = new Map(n.compute); n.loadsAtSample = n.loads; }
        }
        break;
      }
    }
  }
  if (policy === 'pooled') {
    const hottest = gateways[0].routes.placement.nodes.get(models[order[0]].name);
    stats.hottest = hottest?.length ?? 0;
  }
  stats.bound.push([bound, end - boundSince]);
  const measuredSeconds = SECONDS - WARMUP_SECONDS;
  const busy = nodes.filter((n) => n.up).map((n) => n.busyMs);
  if (process.env.SIM_NODES) {
    const up = nodes.filter((n) => n.up);
    const mean = up.reduce((a, n) => a + n.busyMs, 0) / up.length;
    const pl = policy === 'pooled' ? gateways[0].routes.placement : null;
    const placedMean = pl ? [...pl.load.values()].reduce((a, b) => a + b, 0) / pl.load.size : 0;
    const split = (id) => (pl ? [...pl.nodes.values()].filter((ids) => ids.length > 1 && ids.includes(id)).length : 0);
    const row = (n) => `${n.id} busy ${(n.busyMs / mean).toFixed(3)} copies ${(n.copyMs / mean).toFixed(3)}/${(n.prefetchMs / mean).toFixed(3)}` +
      (pl ? ` placed ${((pl.load.get(n.id) ?? 0) / placedMean).toFixed(3)} split models ${split(n.id)}` : '');
    const ranked = [...up].sort((a, b) => b.busyMs - a.busyMs);
    console.error(`${policy}, busiest nodes over the run: ${ranked.slice(0, 8).map(row).join('; ')}`);
    console.error(`${policy}, least busy: ${ranked.slice(-3).map(row).join('; ')}`);
  }
  if (process.env.SIM_DETAIL && policy === 'pooled') {
    const up = nodes.filter((n) => n.up);
    const top = up.reduce((a, b) => (b.busyMs > a.busyMs ? b : a));
    const pl = gateways[0].routes.placement;
    const on = [...pl.nodes].filter(([, ids]) => ids.includes(top.id)).map(([name, ids]) => `${name}${pl.heavy.has(name) ? '(H)' : ''}x${ids.length}`);
    console.error(`busiest ${top.id}: busy ${(top.busyMs / 1000).toFixed(1)} s, placed load ${pl.load.get(top.id)?.toFixed(3)} (mean ${([...pl.load.values()].reduce((a, b) => a + b, 0) / pl.load.size).toFixed(3)}), ${on.length} models: ${on.slice(0, 30).join(' ')}`);
    const loads = [...top.compute].sort((a, b) => b[1] - a[1]).slice(0, 8).map(([m, ms]) => `${models[m].name}:${(ms / 1000).toFixed(1)}s`);
    console.error(`  its device time by model: ${loads.join(' ')}`);
  }
  // SIM_LOADS=1: where the weight loads were, and (pooled) whether a node's home models outgrow its budget.
  if (process.env.SIM_LOADS) {
    const up = nodes.filter((n) => n.up).map((n) => n.loads).sort((a, b) => b - a);
    console.error(`${policy} loads per node: top ${up.slice(0, 8).join(' ')} median ${up[up.length >> 1]} least ${up.slice(-4).join(' ')}`);
    if (policy === 'pooled') {
      const shared = gateways[0].routes.placement.shared;
      const homeBytes = new Map();
      for (const m of models) {
        const id = shared.first(m.name).id;
        homeBytes.set(id, (homeBytes.get(id) ?? 0) + m.bytes);
      }
      const rows = nodes.filter((n) => n.up).map((n) => [n.id, n.loads, (homeBytes.get(n.id) ?? 0) / BUDGET]).sort((a, b) => b[1] - a[1]);
      console.error(`pooled per node, most loads first, node:loads:home bytes over budget: ${rows.map(([id, l, h]) => `${id}:${l}:${h.toFixed(3)}`).join(' ')}`);
    }
  }
  const meanBusy = busy.reduce((s, b) => s + b, 0) / busy.length;
  const quiet = stats.windows.filter((w) => !w.changing).map((w) => w.ratio);
  const settled = stats.windows.filter((w) => !w.changing && w.settled).map((w) => w.ratio);
  const boundWeight = stats.bound.reduce((s, [, ms]) => s + ms, 0);
  return {
    policy,
    hitRate: stats.hits / Math.max(1, stats.hits + stats.misses),
    bound: stats.bound.reduce((s, [b, ms]) => s + b * ms, 0) / Math.max(1, boundWeight),
    coldLoadsPerSecond: stats.loads / measuredSeconds,
    throughput: stats.done / measuredSeconds,
    offered: stats.arrived / measuredSeconds,
    refused: stats.refused,
    p50: percentile(stats.latencies, 0.5),
    p99: percentile(stats.latencies, 0.99),
    maxOverMeanBusy: Math.max(...busy) / Math.max(1e-9, meanBusy),
    worstQuietWindow: quiet.length ? Math.max(...quiet) : null,
    medianQuietWindow: quiet.length ? median(quiet) : null,
    worstSettledWindow: settled.length ? Math.max(...settled) : null,
    pooled: stats.ratios.reduce((s, r) => s + r, 0) / Math.max(1, stats.ratios.length),
    agreement: stats.agree.length ? Math.min(...stats.agree) : null,
    meanAgreement: stats.agree.length ? stats.agree.reduce((a, b) => a + b, 0) / stats.agree.length : null,
    ...(process.env.SIM_DETAIL && policy === 'pooled' ? (() => {
      const light = (name) => stats.trace.get(name).filter((l) => l.startsWith('L')).length > stats.trace.get(name).length / 2;
      const top = [...[...stats.movesOf].sort((a, b) => b[1] - a[1]).slice(0, 2), ...[...stats.movesOf].filter(([name]) => light(name)).sort((a, b) => b[1] - a[1]).slice(0, 3)];
      const firsts = gateways.map((gw) => gw.routes.placement.nodes);
      const apart = models.filter((mm) => firsts.slice(1).some((p) => (p.get(mm.name) ?? []).join() !== (firsts[0].get(mm.name) ?? []).join())).slice(0, 4);
      for (const mm of apart) console.error(`${mm.name} apart:\n  ${stats.trace.get(mm.name).slice(0, 30).join('\n  ')}`);
      for (const [name, n] of top) console.error(`${name} moved ${n} times:\n  ${stats.trace.get(name).slice(0, 40).join('\n  ')}`);
      return {};
    })() : {}),
    quietMovesPerMinute: policy === 'pooled' && stats.quietMs > 0 ? stats.quietMoves / (stats.quietMs / 60_000) / MODELS : null,
    settledMovesPerMinute: policy === 'pooled' && stats.settledMs > 0 ? stats.settledMoves / (stats.settledMs / 60_000) / MODELS : null,
    quietActiveMovesPerMinute: policy === 'pooled' && stats.quietMs > 0 ? stats.quietActiveMoves / (stats.quietMs / 60_000) / MODELS : null,
    quietMoveKinds: policy === 'pooled' && stats.quietMs > 0 ? Object.fromEntries([...stats.moveKinds].sort((a, b) => b[1] - a[1]).map(([k, v]) => [k, v / (stats.quietMs / 60_000) / MODELS])) : null,
    checkMs: stats.checkMs.length ? median(stats.checkMs) : null,
    checkDecodeMs: stats.decodeMs.length ? median(stats.decodeMs) : null,
    failedReads: stats.reads ? stats.failedReads / stats.reads : null,
    hottestNodes: stats.hottest,
    // Device time the fleet spent, in devices (device-seconds per second over the measured part): what placement cost it.
    devicesBusy: nodes.reduce((s, n) => s + n.busyMs, 0) / (measuredSeconds * 1000),
    moved: stats.moved,
  };
}

/**
 * A burst of first requests for a model nobody has asked for, through every gateway: how many
 * nodes load it, measured on FleetRoutes fed nodes that report nothing of it.
 */
function burstLoads(policy) {
  if (policy === 'round_robin') return Math.min(NODES, GATEWAYS * 8); // a burst of 8 per gateway spreads over as many nodes
  if (policy !== 'pooled') return 1;
  const fleet = Array.from({ length: NODES }, (_, i) => new SimNode(`node-${String(i).padStart(2, '0')}`));
  const chosen = new Set();
  for (let g = 0; g < GATEWAYS; g++) {
    // Nodes that report, but nothing of this model.
    const members = fleet.map((n, i) => Object.assign(new SimMember(n, i, () => Promise.resolve()), {
      models: [], last: { nodeName: n.id, startedMs: 0, budgetBytes: BUDGET, devices: 1, queueDepth: 0, models: new Map() }, lastAt: simNow,
    }));
    const routes = new FleetRoutes({ fleet: FLEET_OPTIONS, prefetchTimeoutMs: 1000, logger: silent });
    routes.update(members);
    for (let k = 0; k < 8; k++) for (const mb of routes.route('never-asked', members)) chosen.add(mb.name);
  }
  return chosen.size;
}

const started = performance.now();
const results = [];
for (const seed of SEEDS) {
  SEED = seed;
  makeCatalog(seed);
  const decode = measureDecodeMs();
  for (const policy of args.policies.split(',')) {
    const t0 = performance.now();
    const r = await simulate(policy, decodeCharge(decode));
    r.seed = seed;
    r.fullDecodeMs = decode.fullMs;
    r.statusBytes = decode.bytes;
    r.burstLoads = burstLoads(policy);
    r.wallSeconds = (performance.now() - t0) / 1000;
    results.push(r);
  }
}
if (args.json) {
  console.log(JSON.stringify({ nodes: NODES, models: MODELS, seconds: SECONDS, rate: RATE, gateways: GATEWAYS, budget: BUDGET, catalogBytes, results }));
} else {
  console.log(`fleet of ${NODES} nodes, ${MODELS} models (${NODES}x one node's budget), Zipf(1.0) drifting every ${DRIFT_SECONDS || '-'} s, ${RATE} req/s offered${HOT ? ` and ${HOT_RATE.toFixed(0)} more to the most popular model (${HOT}x one node's capacity)` : ''}, ${GATEWAYS} gateways with clocks up to ${SKEW_MS / 1000} s off, status reads ${FAIL_READS * 100}% failed and ${SLOW_READS * 100}% slow, ${SECONDS} s (${WARMUP_SECONDS} s warm-up); a node fails at ${FAIL_AT.toFixed(0)} s, one joins at ${JOIN_AT.toFixed(0)} s`);
  console.log('seed policy       hit (bound)     cold/s  req/s (offered)  refused  p50 ms  p99 ms  busiest/mean (5 s quiet: worst, median)  res/distinct  burst  moved at fail  at join  quiet moves/min (active)  agree (least, mean)  check ms (+decode)  hot on  devices busy');
  const pct = (x) => (x === null ? '-' : `${(x * 100).toFixed(1)}%`);
  for (const r of results) {
    const mv = (why) => {
      const m = r.moved.find((x) => x.why === why);
      return m ? `${(m.models * 100).toFixed(1)}%/${(m.bytes * 100).toFixed(1)}%` : '-';
    };
    console.log([
      String(r.seed).padEnd(4), r.policy.padEnd(11), `${pct(r.hitRate)} (${pct(r.bound)})`.padStart(15), r.coldLoadsPerSecond.toFixed(0).padStart(9),
      `${r.throughput.toFixed(0)} (${r.offered.toFixed(0)})`.padStart(16), String(r.refused).padStart(8), r.p50.toFixed(1).padStart(7), r.p99.toFixed(1).padStart(7),
      `${r.maxOverMeanBusy.toFixed(2)} (${r.worstQuietWindow?.toFixed(2) ?? '-'}, ${r.medianQuietWindow?.toFixed(2) ?? '-'})`.padStart(40),
      r.pooled.toFixed(2).padStart(13), String(r.burstLoads).padStart(6), mv('a node failed').padStart(14), mv('a node joined').padStart(8),
      `${pct(r.quietMovesPerMinute)} (${pct(r.quietActiveMovesPerMinute)})`.padStart(25), `${pct(r.agreement)}, ${pct(r.meanAgreement)}`.padStart(20),
      (r.checkMs === null ? '-' : `${r.checkMs.toFixed(0)} (+${r.checkDecodeMs === null ? 'streamed' : r.checkDecodeMs.toFixed(0)})`).padStart(19), String(r.hottestNodes || '-').padStart(7), r.devicesBusy.toFixed(1).padStart(13),
    ].join(' '));
  }
  for (const r of results) {
    if (!r.quietMoveKinds) continue;
    console.log(`seed ${r.seed} quiet moves by kind, share of the catalog a minute: ${Object.entries(r.quietMoveKinds).map(([k, v]) => `${k} ${pct(v)}`).join('; ')}${r.settledMovesPerMinute === null ? '' : `; after the first minute: all kinds ${pct(r.settledMovesPerMinute)}, the busiest node's worst quiet window ${r.worstSettledWindow?.toFixed(2)}`}`);
  }
  console.log(`a node's full status answer: ${(results[0].statusBytes / 1e6).toFixed(2)} MB, decoded in ${results[0].fullDecodeMs.toFixed(1)} ms (x${NODES} nodes per check without active_only; charged ${DECODE_CHARGE_SAID}); failed or timed-out status reads: ${pct(results.find((r) => r.failedReads !== null)?.failedReads ?? null)}`);
  console.log(`(${((performance.now() - started) / 1000).toFixed(1)} s of wall time)`);
}
