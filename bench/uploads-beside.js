// Uploads beside execution (runtime.upload_beside_execution) on a backend, against all resident:
// the density case that decides each backend's default. Zipf(1.0) traffic over a catalog of MLPs
// from several clients, a weight budget of a small share of the catalog with uploads beside on and
// off, and a budget that holds it all; the three servers run in turn, ROUNDS times, so that the
// machine's noise falls on all of them alike. Prints each run and the medians' ratios to all
// resident (throughput, p50, p99).
//
//   npm run build && node bench/uploads-beside.js [--models 200] [--share 0.05] [--clients 8]
//     [--requests 3000] [--rounds 2] [--hidden 1024] [--inline-below-ms 0]
import path from 'node:path';
import { parseArgs } from 'node:util';
import { InferenceClient } from '../dist/client/client.js';
import { mlpWeightBytes, random, writeCatalog } from '../test/helpers/mlp-catalog.js';
import { makeRepository, scrapeMetrics, startServer, tempDir } from '../test/helpers/server.js';
import { driveClients, percentile } from './timing.js';

const { values: args } = parseArgs({
  options: {
    models: { type: 'string', default: '200' },
    share: { type: 'string', default: '0.05' },
    clients: { type: 'string', default: '8' },
    requests: { type: 'string', default: '3000' },
    rounds: { type: 'string', default: '2' },
    hidden: { type: 'string', default: '1024' },
    // Runs made on the device thread (learned cost under it) have nothing beside them: 0 sends
    // every run to one of libuv's threads, where an upload can go beside it.
    'inline-below-ms': { type: 'string', default: '0' },
  },
});
const MODELS = Number(args.models);
const SHARE = Number(args.share);
const CLIENTS = Number(args.clients);
const REQUESTS = Number(args.requests);
const ROUNDS = Number(args.rounds);
const SIZES = [64, Number(args.hidden), 8];
const INLINE_BELOW_MS = Number(args['inline-below-ms']);
const MB = 1e6;

const temp = tempDir('stowage-bench-');
const repo = path.join(temp.dir, 'repo');
const catalog = writeCatalog(repo, { count: MODELS, sizes: SIZES, prefix: 'z' });
const total = MODELS * mlpWeightBytes(SIZES);
// Zipf(1.0): the model of rank k is called with probability proportional to 1/k.
const cumulative = [];
catalog.map((_, k) => 1 / (k + 1)).reduce((sum, w, k) => (cumulative[k] = sum + w), 0);
const pick = (u) => cumulative.findIndex((c) => c >= u * cumulative[cumulative.length - 1]);
const next = random(2026);
const picks = Array.from({ length: REQUESTS }, () => catalog[pick(next())].name);
const x = () => [{ name: 'x', datatype: 'FP32', shape: [1, SIZES[0]], data: new Float32Array(SIZES[0]).fill(0.5) }];

const RUNS = [
  { label: 'all resident', budget: Math.ceil(total * 1.2), beside: false },
  { label: `${SHARE * 100}%, uploads beside`, budget: Math.floor(total * SHARE), beside: true },
  { label: `${SHARE * 100}%, at each turn`, budget: Math.floor(total * SHARE), beside: false },
];

/** One run: the catalog's traffic through a server with `run`'s budget. */
async function measure(run, round) {
  const root = path.join(temp.dir, `${run.label.replace(/\W+/g, '-')}-${round}`);
  makeRepository(root, {});
  const server = await startServer({
    model_repo: repo,
    global: { runtime: { cpu_device_memory_bytes: run.budget, mem_fraction: 1, weight_cache_wiggle_fraction: 0, inline_run_below_ms: INLINE_BELOW_MS, upload_beside_execution: run.beside } },
  }, { root });
  try {
    for (const m of catalog) await server.client.infer(m.name, x()); // every model once: compiled, learned
    const before = await scrapeMetrics(server.adminPort);
    const clients = Array.from({ length: CLIENTS }, () => new InferenceClient(server.address));
    const { latencies, seconds } = await driveClients(clients, picks, (c, model) => c.infer(model, x()));
    for (const c of clients) c.close();
    const after = await scrapeMetrics(server.adminPort);
    const sum = (m, name) => Object.entries(m).filter(([k]) => k.startsWith(`${name}{`)).reduce((s, [, v]) => s + v, 0);
    const delta = (name) => sum(after, name) - sum(before, name);
    return { rps: REQUESTS / seconds, p50: percentile(latencies, 0.5), p99: percentile(latencies, 0.99), misses: delta('stowage_weight_cache_misses_total'), beside: delta('stowage_weight_cache_uploads_beside_total') };
  } finally {
    await server.stop();
  }
}

console.log(`uploads beside execution on backend cpu: ${MODELS} MLPs ${SIZES.join('-')} (${(total / MB).toFixed(1)} MB of weights), Zipf(1.0), ${CLIENTS} clients, ${REQUESTS} requests a run, ${ROUNDS} rounds, inline_run_below_ms ${INLINE_BELOW_MS}`);
console.log('run                          round   req/s     p50 (ms)   p99 (ms)   cold loads   of them beside');
const results = new Map(RUNS.map((r) => [r.label, []]));
for (let round = 0; round < ROUNDS; round++) {
  // Alternated: each round in another order, so that drift in the machine favours none.
  for (const run of round % 2 ? [...RUNS].reverse() : RUNS) {
    const r = await measure(run, round);
    results.get(run.label).push(r);
    console.log(`${run.label.padEnd(28)} ${String(round + 1).padStart(5)}  ${r.rps.toFixed(0).padStart(6)}  ${r.p50.toFixed(2).padStart(10)} ${r.p99.toFixed(2).padStart(10)}  ${String(r.misses).padStart(10)}  ${String(r.beside).padStart(14)}`);
  }
}
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)];
const base = results.get(RUNS[0].label);
console.log('\nagainst all resident (medians over rounds)   throughput   p50     p99');
for (const run of RUNS.slice(1)) {
  const r = results.get(run.label);
  const ratio = (key) => (median(r.map((v) => v[key])) / median(base.map((v) => v[key]))).toFixed(2);
  console.log(`${run.label.padEnd(44)} ${ratio('rps').padStart(6)}x   ${ratio('p50').padStart(5)}x  ${ratio('p99').padStart(5)}x`);
}
temp.cleanup();
