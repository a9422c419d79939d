// A real fleet on one machine (issue "a fleet that pools its memory"): four Stowage nodes serving
// one repository of 16 MLPs whose weights are four times one node's budget, two gateway-only
// processes in front of them, Zipf(1.0) traffic from 16 clients through both; for round_robin
// (every node churns the whole catalog) and pooled (each model placed on a few nodes,
// routing/fleet-placement.ts). Each mode gets a fresh fleet, a warm-up (pooled: time to measure
// the loads and place by them), then the measured requests. Prints throughput, p50/p99, cold
// loads (every node's weight-cache misses, prefetches included) and the hit rate, the busiest
// node's share of the requests over the mean, how often both gateways routed a model to the same
// nodes (their placements read every two seconds during the run, in both modes), how many nodes a minute the
// first gateway gave models that it did not route them to at the read before (moves), and the ratios.
//
//   npm run build && node bench/fleet.js [measured requests per mode, default 4000] [--only round_robin|pooled] [--small]
//     [--health-seconds 1] [--new-order] [--rounds 1] [--modes round_robin,pooled]
//
// --small: MLPs of 2.1 MB (issue 64: "with 2 MiB models not below round robin"; a cold load then
// costs little more than a run) instead of 17.1 MB; the same count, so the catalog is still four
// times one node's budget.
// The measured requests ask for the models as often as the warm-up did (the same popularity order,
// another sequence of picks). --new-order: over another order (how this bench ran before 2026-12-01,
// by mistake: the most popular model of the measured requests was the third of the warm-up, and
// pooled placed the catalog again at their start). --health-seconds: the gateways' check interval,
// which is also the length of the load windows placement reads (1, the default here, for a short
// warm-up; gateway.health_seconds defaults to 2). FLEET_MOVES=1 prints each change of the first
// gateway's placement as the run reads it, on stderr.
// --rounds N: the modes N times, every other round in reverse order (round robin, pooled; pooled,
// round robin; ...), so that a machine getting slower or faster over the run weighs on both alike;
// prints each round's ratio and their median. On this shared 2-core machine one mode's requests/s
// wander by 10-20% from run to run (2026-12-01), so one pair's ratio says little of a gap under
// that. --modes: the modes of a round, in order; `--modes round_robin,round_robin` measures that
// spread itself (the same mode against itself: what a ratio of two runs is worth here).
import { parseArgs } from 'node:util';
import { coldLoads, drive, placements, startFleet, startGateway, zipfPicks } from '../test/helpers/fleet.js';
import { mlpWeightBytes } from '../test/helpers/mlp-catalog.js';
import { scrapeMetrics, tempDir } from '../test/helpers/server.js';
import { percentile } from './timing.js';

const { values: args, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    only: { type: 'string' },
    small: { type: 'boolean', default: false },
    'health-seconds': { type: 'string', default: '1' },
    'new-order': { type: 'boolean', default: false },
    rounds: { type: 'string', default: '1' },
    modes: { type: 'string' },
  },
});
const MODES = (args.modes ?? args.only ?? 'round_robin,pooled').split(',');
for (const m of MODES) if (m !== 'round_robin' && m !== 'pooled') throw new Error(`--modes lists round_robin and pooled, not ${m}`);
const ROUNDS = Number(args.rounds);
if (!(Number.isInteger(ROUNDS) && ROUNDS >= 1)) throw new Error(`--rounds is a whole number of at least 1, not ${args.rounds}`);
const REQUESTS = Number(positionals[0] ?? 4000);
const SMALL = args.small;
const NEW_ORDER = args['new-order'];
const WARMUP = Math.max(1000, Math.round(REQUESTS / 2));
const SIZES = SMALL ? [256, 2048, 16] : [1024, 4096, 16];
const COUNT = 16;
const NODES = 4;
const CLIENTS = 16;
const HEALTH_SECONDS = Number(args['health-seconds']);
const MB = 1e6;
/** How often both gateways' placements are read during the measured requests. */
const SAMPLE_MS = 2000;

/** Requests each node executed so far (nv_inference_count summed over its models). */
async function served(nodes) {
  return Promise.all(nodes.map(async (n) => Object.entries(await scrapeMetrics(n.server.adminPort))
    .filter(([k]) => k.startsWith('nv_inference_count{')).reduce((s, [, v]) => s + v, 0)));
}

async function run(mode) {
  const temp = tempDir('stowage-bench-');
  const { catalog, nodes, budget } = await startFleet(temp.dir, { count: COUNT, sizes: SIZES, nodes: NODES, budgetShare: 1 / NODES });
  const gateways = await Promise.all([startGateway(nodes, mode, HEALTH_SECONDS), startGateway(nodes, mode, HEALTH_SECONDS)]);
  try {
    const warm = await drive(gateways, zipfPicks(catalog, WARMUP, 3), { clients: CLIENTS });
    if (warm.failed || warm.wrong.length) throw new Error(`${mode} warm-up: ${warm.failed} failed, ${warm.wrong.length} wrong`);
    const loads0 = await coldLoads(nodes);
    const served0 = await served(nodes);
    // Both gateways' placements read every SAMPLE_MS during the run, compared model by model (pooled).
    // Read in both modes alike and not too often: a gateway's /metrics includes every node's, so each
    // read costs every node a scrape. Read every half second in the pooled mode alone, it cost that
    // mode up to 12% of its requests/s and doubled its p99 (2026-11-30, docs/performance.md).
    let sampling = true;
    const samples = { same: 0, all: 0, gained: 0 };
    /** @type {Map<string, string[]> | null} */
    let before = null;
    const sampler = (async () => {
      while (sampling) {
        const [a, b] = await Promise.all(gateways.map((g) => placements(g.adminPort)));
        for (const [m, on] of a) {
          samples.all++;
          if (JSON.stringify(on) === JSON.stringify(b.get(m))) samples.same++;
          // A move: a node the first gateway routes the model to that it did not at the read before.
          if (before) samples.gained += on.filter((n) => !(before.get(m) ?? on).includes(n)).length;
          if (process.env.FLEET_MOVES && before && JSON.stringify(on) !== JSON.stringify(before.get(m) ?? on)) {
            console.error(`${new Date().toISOString().slice(14, 23)} ${m}: ${(before.get(m) ?? []).join(',')} -> ${on.join(',')}`);
          }
        }
        before = a;
        await new Promise((resolve) => setTimeout(resolve, SAMPLE_MS));
      }
    })();
    const result = await drive(gateways, zipfPicks(catalog, REQUESTS, 5, NEW_ORDER ? undefined : 3), { clients: CLIENTS });
    sampling = false;
    await sampler;
    if (result.failed || result.wrong.length) throw new Error(`${mode}: ${result.failed} failed, ${result.wrong.join('; ')}`);
    const loads = (await coldLoads(nodes)) - loads0;
    const perNode = (await served(nodes)).map((s, i) => s - served0[i]);
    const mean = perNode.reduce((a, b) => a + b, 0) / perNode.length;
    const agree = samples.all > 0 ? samples.same / samples.all : null;
    const minutes = result.seconds / 60;
    return {
      mode,
      rps: result.ok / result.seconds,
      p50: percentile(result.latencies, 0.5),
      p99: percentile(result.latencies, 0.99),
      loads,
      hit: 1 - loads / result.ok,
      busiest: Math.max(...perNode) / mean,
      agree,
      moves: mode === 'pooled' ? samples.gained / minutes : null,
      budget,
    };
  } finally {
    await Promise.all(gateways.map((g) => g.stop()));
    await Promise.all(nodes.map((n) => n.server.stop()));
    temp.cleanup();
  }
}

const bytes = mlpWeightBytes(SIZES);
console.log(`${NODES} nodes, ${COUNT} models of ${(bytes / MB).toFixed(1)} MB (catalog ${(COUNT * bytes / MB).toFixed(0)} MB, ${NODES}x one node's budget), 2 gateways, ${CLIENTS} clients, Zipf(1.0)${NEW_ORDER ? " (the measured requests over another popularity order than the warm-up's)" : ""}; ${WARMUP} warm-up then ${REQUESTS} measured requests per mode; checks every ${HEALTH_SECONDS} s`);
/** Each round's runs, in --modes order whatever order the round ran them in. */
const rounds = [];
for (let round = 0; round < ROUNDS; round++) {
  const positions = MODES.map((_, i) => i);
  if (round % 2 === 1) positions.reverse();
  const runs = [];
  for (const i of positions) runs[i] = { ...(await run(MODES[i])), round };
  rounds.push(runs);
  if (ROUNDS > 1) console.error(`round ${round + 1} of ${ROUNDS} done`);
}
console.log('round mode           req/s     p50        p99        cold loads   hit rate   busiest/mean   gateways agree   moves/min');
for (const r of rounds.flat()) {
  console.log(`${String(r.round + 1).padStart(5)} ${r.mode.padEnd(12)} ${r.rps.toFixed(0).padStart(7)}  ${r.p50.toFixed(2).padStart(7)} ms ${r.p99.toFixed(2).padStart(7)} ms ${String(r.loads).padStart(10)}   ${(r.hit * 100).toFixed(1).padStart(6)}%   ${r.busiest.toFixed(2).padStart(10)}     ${(r.agree === null ? '-' : `${(r.agree * 100).toFixed(0)}%`).padStart(14)}   ${r.moves === null ? '-' : r.moves.toFixed(1)}`);
}
if (MODES.length === 2) {
  const [a, b] = MODES;
  const ratios = rounds.map(([x, y]) => ({ rps: y.rps / x.rps, loads: y.loads / Math.max(1, x.loads), p99: y.p99 / x.p99 }));
  for (const [i, r] of ratios.entries()) {
    console.log(`${ROUNDS > 1 ? `round ${i + 1}: ` : ''}${b} / ${a}: throughput ${r.rps.toFixed(2)}x, cold loads ${r.loads.toFixed(2)}x, p99 ${r.p99.toFixed(2)}x`);
  }
  if (ROUNDS > 1) {
    const median = (xs) => percentile(xs, 0.5);
    console.log(`median of ${ROUNDS} rounds, ${b} / ${a}: throughput ${median(ratios.map((r) => r.rps)).toFixed(2)}x (${Math.min(...ratios.map((r) => r.rps)).toFixed(2)}-${Math.max(...ratios.map((r) => r.rps)).toFixed(2)}), cold loads ${median(ratios.map((r) => r.loads)).toFixed(2)}x, p99 ${median(ratios.map((r) => r.p99)).toFixed(2)}x`);
  }
}
