// What a pooled gateway's checks cost it as the fleet grows (issue 64): a real gateway-only process
// (gateway.scheduling.mode pooled, a check every 2 s) in front of stand-in nodes
// (bench/fleet-stand-ins.js: real gRPC servers answering what a pooled gateway asks of a node, on a
// thread of the bench's own, so that the requests the bench sends never wait behind them), at
// 4 nodes x 100 models and 64 nodes x 10,000 models (or the scales given), each node holding twice
// its share of the catalog. For each scale, three phases:
//   steady           the checks alone, every node answering, once a check has left the placement
//                    standing (the start's prefetches and placements done);
//   node restart     one node comes back as a new process on the same repository (its status read
//                    whole from a new version, nothing resident: its models placed anew; the same
//                    repository digest, as a real node's, which hashes its models: its index not read);
//   node restart, new repository
//                    the same with a new digest (a node back with a changed repository): its whole
//                    RepositoryIndex and every model's bytes read again as well;
//   gateway restart  the gateway stopped and a new one started (every node's index read, every model
//                    placed from nothing); its start-up until it serves is reported apart.
// Each phase is the event and a window with no requests, where the gateway's CPU per check is read
// (/proc: its main thread, which forwards requests, and the whole process, its placement thread
// and V8's helper threads (garbage collection, compilation) included, those two also apart; no
// /metrics scrape in it: one costs more than a check at 10,000 models, printed apart
// as the CPU the scrape call took), then a window with a trickle of inference requests (100/s, Zipf over the catalog)
// through the gateway: a check that holds the main thread's event loop delays them (a node restarts
// again at its start). Per phase it prints those CPUs, the placement's time per check on its thread
// (stowage_gateway_placement_seconds), the main event loop's delay (prom-client's p99 and max over
// the phase) and the trickle's p50/p99/max, beside the p99 of the same trickle sent straight to one
// stand-in (what the stand-ins' own answering adds: at 64 nodes they encode 64 status answers per
// check), then each scale's ratios to the first.
//
// The stand-ins answer versioned status reads, as nodes do: with `--churn=F` a share F of the
// catalog (the busiest) reports new loads at every window, so those rows are read and the placement
// made again at every check; 0 (the default) is a calm fleet, where a check reads and places nothing
// new. Per phase it also prints the checks that left the placement as it stood (unchanged). They
// keep the status stream and the health Watch open, as nodes do; `--unary`: they answer both
// UNIMPLEMENTED, as nodes before them, and the gateway reads and probes each node at every check.
//
//   npm run build && node bench/gateway-checks.js [--churn=F] [--unary] [phase seconds, default 20] [nodes x models ...]
import * as grpc from '@grpc/grpc-js';
import { loadInferenceClient } from '../dist/protocol/proto.js';
import { StandInFleetThread } from './fleet-stand-ins-thread.js';
import { cpuUs, threadCpuUs } from './proc-cpu.js';
import { scrapeMetrics, startServer } from '../test/helpers/server.js';
import { percentile } from './timing.js';

/** --unary: the stand-ins answer as nodes from before the status stream and the health Watch (a read and a probe per node per check). */
const UNARY = process.argv.includes('--unary');
const CHURN = Number(process.argv.find((a) => a.startsWith('--churn='))?.slice('--churn='.length) ?? 0);
const ARGS = process.argv.slice(2).filter((a) => !a.startsWith('--'));
const PHASE_S = Number(ARGS[0] ?? 20);
const SCALES = (ARGS.length > 1 ? ARGS.slice(1) : ['4x100', '64x10000']).map((s) => s.split('x').map(Number));
const HEALTH_S = 2;
/** After a /metrics scrape, before a CPU window: what the scrape left for the collector. */
const SCRAPE_SETTLE_MS = 10_000;
const RATE = 100;
const WEIGHT_BYTES = 16 * 2 ** 20;

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function startGateway(addresses) {
  return startServer({
    gateway: { endpoints: addresses, health_seconds: HEALTH_S, scheduling: { mode: 'pooled' } },
    global: { endpoints: { max_concurrent_requests: 4096 } },
  });
}

/** Requests at RATE a second through the gateway, each to a Zipf-picked model; latencies kept by phase. */
function trickle(fleet) {
  const Client = loadInferenceClient();
  let client = null;
  let active = false;
  let latencies = [];
  let failures = 0;
  /** The errors seen, each with how often: a failure says why. */
  let errors = new Map();
  const weights = fleet.catalog.map((_, k) => 1 / (k + 1));
  const total = weights.reduce((a, b) => a + b);
  let seed = 7;
  const next = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
  const pick = () => {
    let u = next() * total;
    for (let k = 0; k < weights.length; k++) if ((u -= weights[k]) <= 0) return fleet.catalog[k];
    return fleet.catalog[0];
  };
  const timer = setInterval(() => {
    if (!active) return;
    const sent = performance.now();
    const input = { name: 'x', datatype: 'FP32', shape: ['1'], contents: { fp32_contents: [1] } };
    client.ModelInfer({ model_name: pick(), id: '', inputs: [input] }, { deadline: Date.now() + 5000 }, (err) => {
      if (err) {
        failures++;
        const why = `${grpc.status[err.code]}: ${err.details}`.slice(0, 160);
        errors.set(why, (errors.get(why) ?? 0) + 1);
      }
      else latencies.push(performance.now() - sent);
    });
  }, 1000 / RATE);
  return {
    /** Send to the gateway at `address` from now; null: stop sending. */
    to(address) {
      if (!address) {
        active = false;
        return;
      }
      client?.close();
      client = new Client(address, grpc.credentials.createInsecure());
      active = true;
    },
    take() {
      const taken = { latencies, failures, errors };
      latencies = [];
      failures = 0;
      errors = new Map();
      return taken;
    },
    stop() {
      clearInterval(timer);
      client?.close();
    },
  };
}

/**
 * One phase: `event`, then PHASE_S with no requests (the checks' CPU and time alone), then `again`
 * and PHASE_S with the trickle (what requests feel). The event loop's delay is read over both.
 */
async function phase(name, gateway, { traffic, direct, node }, event, again = async () => {}) {
  const before = await scrapeMetrics(gateway.adminPort); // also resets prom-client's event-loop histogram
  // The CPU window holds no scrape: at 10,000 models one costs more than a check (printed apart),
  // and what it leaves is collected within seconds.
  await sleep(SCRAPE_SETTLE_MS);
  const cpu = cpuUs(gateway.child.pid);
  const threads = threadCpuUs(gateway.child.pid);
  await event();
  await sleep(PHASE_S * 1000);
  const cpuNow = cpuUs(gateway.child.pid);
  const threadsNow = threadCpuUs(gateway.child.pid);
  const threadMs = (name) => ((threadsNow.get(name) ?? 0) - (threads.get(name) ?? 0)) / 1000;
  const quiet = await scrapeMetrics(gateway.adminPort);
  const scrapeMs = (cpuUs(gateway.child.pid).process - cpuNow.process) / 1000;
  const cpuMs = (cpuNow.main - cpu.main) / 1000;
  const processCpuMs = (cpuNow.process - cpu.process) / 1000;
  const windowChecks = PHASE_S / HEALTH_S;
  await again();
  traffic.to(gateway.address);
  direct.to(node);
  await sleep(PHASE_S * 1000);
  traffic.to(null);
  direct.to(null);
  await sleep(200); // the last answers
  const after = await scrapeMetrics(gateway.adminPort);
  const { latencies, failures, errors } = traffic.take();
  const straight = direct.take().latencies.sort((a, b) => a - b);
  for (const [why, count] of errors) console.log(`  ${name}: ${count} failed: ${why}`);
  latencies.sort((a, b) => a - b);
  const allChecks = after.stowage_gateway_placement_seconds_count - before.stowage_gateway_placement_seconds_count;
  const placementMs = ((after.stowage_gateway_placement_seconds_sum - before.stowage_gateway_placement_seconds_sum) * 1000) / Math.max(1, allChecks);
  return {
    phase: name, checks: allChecks,
    cpuPerCheckMs: cpuMs / windowChecks,
    processCpuPerCheckMs: processCpuMs / windowChecks,
    placementCpuPerCheckMs: threadMs('placement') / windowChecks,
    helpersCpuPerCheckMs: threadMs('V8Worker') / windowChecks,
    scrapeMs,
    placementMs,
    lagP99Ms: Math.max(quiet.nodejs_eventloop_lag_p99_seconds, after.nodejs_eventloop_lag_p99_seconds) * 1000,
    lagMaxMs: Math.max(quiet.nodejs_eventloop_lag_max_seconds, after.nodejs_eventloop_lag_max_seconds) * 1000,
    requests: latencies.length, failures,
    p50: percentile(latencies, 0.5), p99: percentile(latencies, 0.99), max: latencies.at(-1) ?? NaN,
    directP99: percentile(straight, 0.99),
    moves: after.stowage_gateway_placement_moves_total - before.stowage_gateway_placement_moves_total,
    unchanged: (after.stowage_gateway_placement_unchanged_checks_total ?? 0) - (before.stowage_gateway_placement_unchanged_checks_total ?? 0),
  };
}

/**
 * Until a check leaves the placement standing (at most 60 s): the first placement's prefetches
 * answered, and the placements after them made, so that `steady` is the checks of a settled fleet.
 */
async function settled(gateway) {
  const unchanged = async () => (await scrapeMetrics(gateway.adminPort)).stowage_gateway_placement_unchanged_checks_total ?? 0;
  const deadline = Date.now() + 60_000;
  await sleep(2 * HEALTH_S * 1000);
  const before = await unchanged();
  while (Date.now() < deadline && (await unchanged()) === before) await sleep(HEALTH_S * 1000);
}

async function runScale(nodes, models) {
  // Twice the catalog's weights over the fleet: each model on two nodes' worth of memory.
  const fleet = new StandInFleetThread({ nodes, models, capacity: Math.ceil((2 * models) / nodes), weightBytes: WEIGHT_BYTES, fleetLoad: 0.6 * nodes, churn: CHURN, windowMs: HEALTH_S * 1000, streams: !UNARY });
  const addresses = await fleet.start();
  // The same trickle straight to one stand-in beside it: what the stand-ins' own answering adds.
  const streams = { traffic: trickle(fleet), direct: trickle(fleet), node: addresses[0] };
  const rows = [];
  let gateway = null;
  try {
    let started = performance.now();
    gateway = await startGateway(addresses);
    const startupMs = performance.now() - started;
    await settled(gateway); // the first placement's prefetches and the placements after them
    rows.push(await phase('steady', gateway, streams, async () => {}));
    rows.push(await phase('node restart', gateway, streams, () => fleet.nodes[1].restart(), () => fleet.nodes[2].restart()));
    const changed = { repositoryChanged: true };
    rows.push(await phase('node restart, new repository', gateway, streams, () => fleet.nodes[3 % nodes].restart(changed), () => fleet.nodes[1 % nodes].restart(changed)));
    await gateway.stop();
    started = performance.now();
    gateway = await startGateway(addresses);
    const restartMs = performance.now() - started;
    const startup = await scrapeMetrics(gateway.adminPort); // the new gateway's start-up, its first full read
    rows.push(await phase('gateway restart', gateway, streams, async () => {}));
    const { statusReads, prefetches } = await fleet.counts();
    console.log(`\n${nodes} nodes x ${models} models, churn ${CHURN}${UNARY ? ', unary' : ''}: first start ${startupMs.toFixed(0)} ms, restart ${restartMs.toFixed(0)} ms to serving `
      + `(its start-up: event loop p99 ${(startup.nodejs_eventloop_lag_p99_seconds * 1000).toFixed(1)} ms, max ${(startup.nodejs_eventloop_lag_max_seconds * 1000).toFixed(1)} ms); `
      + `${statusReads} status reads, ${prefetches} prefetches; active models a node reports: ${fleet.capacity}`);
    console.table(rows.map((r) => ({
      phase: r.phase, checks: r.checks, unchanged: r.unchanged, 'cpu/check ms': r.cpuPerCheckMs.toFixed(1), 'process cpu/check ms': r.processCpuPerCheckMs.toFixed(1),
      'of it placement thread': r.placementCpuPerCheckMs.toFixed(1), 'V8 helpers': r.helpersCpuPerCheckMs.toFixed(1), 'placement ms': r.placementMs.toFixed(1), 'scrape cpu ms': r.scrapeMs.toFixed(0),
      'loop p99 ms': r.lagP99Ms.toFixed(1), 'loop max ms': r.lagMaxMs.toFixed(1), moves: r.moves,
      requests: r.requests, failed: r.failures, 'p50 ms': r.p50.toFixed(2), 'p99 ms': r.p99.toFixed(2), 'max ms': r.max.toFixed(1), 'direct p99 ms': r.directP99.toFixed(2),
    })));
    return rows;
  } finally {
    streams.traffic.stop();
    streams.direct.stop();
    await gateway?.stop();
    await fleet.stop();
  }
}

const results = [];
for (const [nodes, models] of SCALES) results.push({ nodes, models, rows: await runScale(nodes, models) });
const [base] = results;
for (const r of results.slice(1)) {
  console.log(`\n${r.nodes}x${r.models} against ${base.nodes}x${base.models} (target: at most 2x on CPU per check and on the loop's p99; p99 at most 50 ms through restarts):`);
  for (const [i, row] of r.rows.entries()) {
    const b = base.rows[i];
    console.log(`  ${row.phase}: cpu/check ${(row.cpuPerCheckMs / b.cpuPerCheckMs).toFixed(2)}x (whole process ${(row.processCpuPerCheckMs / b.processCpuPerCheckMs).toFixed(2)}x), placement ${(row.placementMs / b.placementMs).toFixed(2)}x, loop p99 ${(row.lagP99Ms / b.lagP99Ms).toFixed(2)}x (${row.lagP99Ms.toFixed(1)} ms), loop max ${row.lagMaxMs.toFixed(1)} ms`);
  }
}
