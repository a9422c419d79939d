// Density on one device: a catalog whose weights are 10× the weight budget, under Zipf(1.0)
// traffic from several clients, against the same catalog and traffic with a budget that holds it
// all. The target on a GPU: p99 at most 2× the all-resident p99. The tight budget runs
// twice: with the fair scheduler preferring models already on the device (the default) and
// strictly least-charged first (scheduler.prefer_resident: false). Each model is an MLP
// (test/helpers/mlp-catalog.js) with weights of its own, so every answer can be checked here: one
// in CHECK_EVERY is, and a wrong answer fails the bench.
//
//   npm run build && node bench/gpu-density.js [--backend cuda|cpu] [--models 40] [--hidden 1024]
//                                              [--requests 4000] [--clients 8] [--ratio 10]
//
// --backend cpu runs the same thing on the CPU device (the weight budget then in host memory):
// how this bench is checked on a machine without a GPU.
import path from 'node:path';
import { parseArgs } from 'node:util';
import { InferenceClient } from '../dist/client/client.js';
import { gpuReport, loadCuda } from '../dist/native/cuda.js';
import { mlpExpected, mlpWeightBytes, random, writeCatalog } from '../test/helpers/mlp-catalog.js';
import { makeRepository, metric, scrapeMetrics, startServer, tempDir } from '../test/helpers/server.js';
import { percentile } from './timing.js';

const { values: opts } = parseArgs({
  options: {
    backend: { type: 'string', default: 'cuda' },
    models: { type: 'string', default: '40' },
    hidden: { type: 'string', default: '1024' },
    requests: { type: 'string', default: '4000' },
    clients: { type: 'string', default: '8' },
    ratio: { type: 'string', default: '10' },
  },
});
const backend = opts.backend;
if (backend !== 'cuda' && backend !== 'cpu') throw new Error(`--backend ${backend}: cuda or cpu`);
const MODELS = Number(opts.models);
const REQUESTS = Number(opts.requests);
const CLIENTS = Number(opts.clients);
const RATIO = Number(opts.ratio);
const SIZES = [256, Number(opts.hidden), Number(opts.hidden), 16];
const CHECK_EVERY = 25;


const temp = tempDir('stowage-bench-density-');
const repo = path.join(temp.dir, 'repo');
const catalog = writeCatalog(repo, { count: MODELS, sizes: SIZES, prefix: 'd' });
// Each of a model's six tensors takes up to one alignment more in the arena.
const modelBytes = mlpWeightBytes(SIZES) + 6 * 64;
const catalogBytes = MODELS * modelBytes;
// Zipf(1.0): the model of rank k is called with probability proportional to 1/k; the same picks for both budgets.
const cumulative = [];
catalog.reduce((sum, _, k) => (cumulative[k] = sum + 1 / (k + 1)), 0);
const next = random(2026);
const picks = Array.from({ length: REQUESTS }, () => {
  const u = next() * cumulative[cumulative.length - 1];
  return catalog[cumulative.findIndex((c) => c >= u)];
});
const rows = picks.map(() => Float32Array.from({ length: SIZES[0] }, () => next() * 2 - 1));

/** The node file's runtime block for a weight budget of `bytes` on this backend. */
const runtime = (/** @type {number} */ bytes) => (backend === 'cuda'
  ? { backend: 'cuda', cuda: { tf32: false, weight_cache_bytes: bytes } }
  : { cpu_device_memory_bytes: bytes, mem_fraction: 1, weight_cache_wiggle_fraction: 0 });

/** Throughput, p50 and p99 of the picks against a server with a weight budget of `budget` bytes. */
async function measure(/** @type {string} */ label, /** @type {number} */ budget, preferResident = true) {
  const root = path.join(temp.dir, label.replace(/\W+/g, '-'));
  makeRepository(root, {});
  const server = await startServer({ model_repo: repo, cache_dir: path.join(root, 'cache'), global: { runtime: runtime(budget), scheduler: { prefer_resident: preferResident } } }, { root });
  try {
    const x = (/** @type {Float32Array} */ row) => [{ name: 'x', datatype: /** @type {const} */ ('FP32'), shape: [1, SIZES[0]], data: row }];
    for (const m of catalog) await server.client.infer(m.name, x(rows[0])); // every model's first run, outside the figures
    const before = await scrapeMetrics(server.adminPort);
    const clients = Array.from({ length: CLIENTS }, () => new InferenceClient(server.address));
    /** @type {number[]} */
    const latencies = [];
    let wrong = null;
    const t0 = performance.now();
    await Promise.all(clients.map(async (c, i) => {
      for (let k = i; k < picks.length; k += CLIENTS) {
        const started = performance.now();
        const reply = await c.infer(picks[k].name, x(rows[k]));
        latencies.push(performance.now() - started);
        if (k % CHECK_EVERY === 0) {
          const want = mlpExpected(picks[k].layers, rows[k]);
          const got = /** @type {Float32Array} */ (reply.outputs[0].data);
          const bad = Array.from(want).findIndex((w, j) => !(Math.abs(got[j] - w) <= 1e-3 * (1 + Math.abs(w))));
          if (bad >= 0) wrong ??= `${picks[k].name} request ${k} output ${bad}: got ${got[bad]}, its weights give ${want[bad]}`;
        }
      }
    }));
    const seconds = (performance.now() - t0) / 1000;
    for (const c of clients) c.close();
    if (wrong) throw new Error(`a wrong answer under the ${label} budget: ${wrong}`);
    const after = await scrapeMetrics(server.adminPort);
    const total = (/** @type {Record<string, number>} */ m, /** @type {string} */ name) => catalog.reduce((s, c) => s + metric(m, name, `model="${c.name}"`), 0);
    const hits = total(after, 'stowage_weight_cache_hits_total') - total(before, 'stowage_weight_cache_hits_total');
    const misses = total(after, 'stowage_weight_cache_misses_total') - total(before, 'stowage_weight_cache_misses_total');
    const loadSeconds = total(after, 'stowage_weight_cache_load_seconds_total') - total(before, 'stowage_weight_cache_load_seconds_total');
    return { label, budget, rps: REQUESTS / seconds, p50: percentile(latencies, 0.5), p99: percentile(latencies, 0.99), hitRate: hits / Math.max(1, hits + misses), misses, loadMs: (loadSeconds * 1000) / Math.max(1, misses) };
  } finally {
    await server.stop();
  }
}

if (backend === 'cuda') loadCuda();
const gpu = backend === 'cuda' ? gpuReport().gpus[0] : null;
const device = gpu ? `${gpu.name} (${(gpu.memoryTotalBytes / 2 ** 30).toFixed(0)} GiB)` : 'the CPU device';
console.log(`${new Date().toISOString().slice(0, 10)}, backend ${backend}, ${device}, Node ${process.versions.node}`);
console.log(`${MODELS} models of ${(modelBytes / 2 ** 20).toFixed(1)} MiB (MLP ${SIZES.join('-')}), ${(catalogBytes / 2 ** 20).toFixed(0)} MiB in all; Zipf(1.0), ${REQUESTS} requests of batch 1 from ${CLIENTS} clients; 1 in ${CHECK_EVERY} answers checked\n`);
try {
  const results = [];
  // Interleaved: the all-resident figure is measured on either side of the tight one.
  results.push(await measure('all resident', Math.ceil(catalogBytes * 1.2)));
  results.push(await measure(`1/${RATIO} of the catalog`, Math.floor(catalogBytes / RATIO)));
  results.push(await measure(`1/${RATIO}, strictly fair`, Math.floor(catalogBytes / RATIO), false));
  results.push(await measure('all resident, again', Math.ceil(catalogBytes * 1.2)));
  console.log('| weight budget | MiB | req/s | p50 (ms) | p99 (ms) | hit rate | cold loads | ms per load |');
  console.log('| --- | --- | --- | --- | --- | --- | --- | --- |');
  for (const r of results) {
    console.log(`| ${r.label} | ${(r.budget / 2 ** 20).toFixed(0)} | ${r.rps.toFixed(0)} | ${r.p50.toFixed(2)} | ${r.p99.toFixed(2)} | ${(100 * r.hitRate).toFixed(1)}% | ${r.misses} | ${r.loadMs.toFixed(2)} |`);
  }
  const resident = Math.min(results[0].p99, results[3].p99);
  const residentRps = Math.max(results[0].rps, results[3].rps);
  console.log('');
  for (const tight of [results[1], results[2]]) {
    console.log(`${tight.label}: p99 ${(tight.p99 / resident).toFixed(2)}× the all-resident p99 (target ≤ 2×), throughput ${(tight.rps / residentRps).toFixed(2)}× all-resident's`);
  }
} finally {
  temp.cleanup();
}
