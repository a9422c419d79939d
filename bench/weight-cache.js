// Weight-cache benchmark, three parts, each through the real server (gRPC, device actor, ORT):
//
// (a) Cold call vs warm call for models of 1, 10 and 100 MB of weights. Two models of each size
//     share a budget that holds one of them: calling them in turn makes every call cold (the
//     other model is evicted, this one copied in from host RAM); calling one twice makes the
//     second warm. Printed beside it: copying the same bytes into memory already allocated, and
//     into freshly allocated memory, measured in this process in the same run.
// (b) Zipf(1.0) traffic over 200 models from 8 clients, with a budget of 20% of the catalog's
//     weights and with a budget that holds them all: throughput, p50/p99 latency, hit rate.
// (c) Warm latency with weights held apart (the cache on) against weights embedded (the cache
//     off, runtime.weight_cache_fraction: 0), two servers side by side, calls alternating.
//
//   npm run build && node bench/weight-cache.js [calls per measurement, default 40]
import path from 'node:path';
import { InferenceClient } from '../dist/client/client.js';
import { mlpWeightBytes, random, writeCatalog } from '../test/helpers/mlp-catalog.js';
import { FIXTURES, ROOT, makeRepository, scrapeMetrics, startServer, tempDir } from '../test/helpers/server.js';
import { percentile } from './timing.js';
import { makeBenchModels } from './bench-models.js';

const CALLS = Number(process.argv[2] ?? 40);
const MB = 1e6;
const temp = tempDir('stowage-bench-');
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const fmt = (ms) => `${ms.toFixed(2)} ms`;

async function timed(fn) {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

/** Median time to copy `bytes` into a buffer allocated once, and into a fresh buffer each time. */
function copyTimes(bytes) {
  const src = new Uint8Array(bytes).fill(7);
  const dst = new Uint8Array(bytes).fill(1);
  const into = [];
  const fresh = [];
  for (let i = 0; i < 15; i++) {
    let t0 = performance.now();
    dst.set(src);
    into.push(performance.now() - t0);
    t0 = performance.now();
    new Uint8Array(bytes).set(src);
    fresh.push(performance.now() - t0);
  }
  return { into: median(into.slice(3)), fresh: median(fresh.slice(3)) };
}

// ---- (a) cold minus warm ----
console.log('(a) cold call minus warm call, against copying the same bytes');
console.log('weights    warm p50    cold p50    cold-warm   load (server)   memcpy prealloc   memcpy fresh   (cold-warm)/memcpy');
const INPUTS = 1024;
const OUTPUTS = 16;
for (const mb of [1, 10, 100]) {
  const hidden = Math.round((mb * MB) / 4 / (INPUTS + OUTPUTS));
  const bytes = mlpWeightBytes([INPUTS, hidden, OUTPUTS]);
  const repo = path.join(temp.dir, `cold-${mb}`, 'repo');
  writeCatalog(repo, { count: 2, sizes: [INPUTS, hidden, OUTPUTS], prefix: `w${mb}mb_` });
  // Room for one of the two models (plus alignment), not both.
  const server = await startServer({
    model_repo: repo,
    global: { runtime: { cpu_device_memory_bytes: Math.ceil(bytes * 1.2), mem_fraction: 1, weight_cache_wiggle_fraction: 0 } },
  }, { root: path.dirname(repo) });
  const x = () => [{ name: 'x', datatype: 'FP32', shape: [1, INPUTS], data: new Float32Array(INPUTS).fill(0.25) }];
  const [a, b] = [`w${mb}mb_000`, `w${mb}mb_001`];
  const warm = [];
  const cold = [];
  for (let i = 0; i < 3; i++) for (const m of [a, b]) await server.client.infer(m, x()); // warm up both paths
  const before = await scrapeMetrics(server.adminPort);
  for (let i = 0; i < CALLS; i++) {
    cold.push(await timed(() => server.client.infer(a, x()))); // b was last: a comes on
    warm.push(await timed(() => server.client.infer(a, x()))); // a is resident
    await server.client.infer(b, x()); // evicts a
  }
  const after = await scrapeMetrics(server.adminPort);
  const key = `stowage_weight_cache_load_seconds_total{model="${a}"}`;
  const misses = after[`stowage_weight_cache_misses_total{model="${a}"}`] - before[`stowage_weight_cache_misses_total{model="${a}"}`];
  const loadMs = ((after[key] - before[key]) / misses) * 1000;
  await server.stop();
  const copy = copyTimes(bytes);
  const extra = median(cold) - median(warm);
  console.log(`${(bytes / MB).toFixed(1).padStart(6)} MB  ${fmt(median(warm)).padStart(10)}  ${fmt(median(cold)).padStart(10)}  ${fmt(extra).padStart(10)}  ${fmt(loadMs).padStart(12)}   ${fmt(copy.into).padStart(14)}   ${fmt(copy.fresh).padStart(12)}   ${(extra / copy.into).toFixed(2)}x (load alone ${(loadMs / copy.into).toFixed(2)}x)`);
}

// ---- (b) Zipf traffic ----
console.log('\n(b) Zipf(1.0) over 200 models, 8 clients');
const ZIPF_MODELS = 200;
const Z = { inputs: 64, hidden: 1024, outputs: 8 };
const zipfRepo = path.join(temp.dir, 'zipf', 'repo');
const zipfCatalog = writeCatalog(zipfRepo, { count: ZIPF_MODELS, sizes: [Z.inputs, Z.hidden, Z.outputs], prefix: 'z' });
const modelBytes = mlpWeightBytes([Z.inputs, Z.hidden, Z.outputs]);
const total = ZIPF_MODELS * modelBytes;
// Zipf(1.0): the model of rank k is called with probability proportional to 1/k.
const weights = zipfCatalog.map((_, k) => 1 / (k + 1));
const cumulative = [];
weights.reduce((sum, w, k) => (cumulative[k] = sum + w), 0);
const zipfPick = (u) => cumulative.findIndex((c) => c >= u * cumulative[cumulative.length - 1]);
const REQUESTS = Math.max(2000, CALLS * 50);
console.log(`catalog ${(total / MB).toFixed(1)} MB of weights in ${ZIPF_MODELS} models; ${REQUESTS} requests`);
console.log('budget                 req/s    p50        p99        hit rate');
for (const [label, budget] of [['20% of the catalog', Math.floor(total * 0.2)], ['all of it', Math.ceil(total * 1.1)]]) {
  const root = path.join(temp.dir, 'zipf', label.replace(/\W+/g, '-'));
  makeRepository(root, {});
  const server = await startServer({
    model_repo: zipfRepo,
    global: { runtime: { cpu_device_memory_bytes: budget, mem_fraction: 1, weight_cache_wiggle_fraction: 0 } },
  }, { root });
  const next = random(2024);
  const picks = Array.from({ length: REQUESTS }, () => zipfCatalog[zipfPick(next())].name);
  const x = () => [{ name: 'x', datatype: 'FP32', shape: [1, Z.inputs], data: new Float32Array(Z.inputs).fill(0.5) }];
  for (const m of zipfCatalog) await server.client.infer(m.name, x()); // warm up: every model once
  const before = await scrapeMetrics(server.adminPort);
  const clients = Array.from({ length: 8 }, () => new InferenceClient(server.address));
  const latencies = [];
  const t0 = performance.now();
  await Promise.all(clients.map(async (c, i) => {
    for (let k = i; k < picks.length; k += clients.length) latencies.push(await timed(() => c.infer(picks[k], x())));
  }));
  const seconds = (performance.now() - t0) / 1000;
  for (const c of clients) c.close();
  const after = await scrapeMetrics(server.adminPort);
  const sum = (m, name) => Object.entries(m).filter(([k]) => k.startsWith(`${name}{`)).reduce((s, [, v]) => s + v, 0);
  const hits = sum(after, 'stowage_weight_cache_hits_total') - sum(before, 'stowage_weight_cache_hits_total');
  const misses = sum(after, 'stowage_weight_cache_misses_total') - sum(before, 'stowage_weight_cache_misses_total');
  await server.stop();
  console.log(`${label.padEnd(20)} ${(REQUESTS / seconds).toFixed(0).padStart(7)}  ${fmt(percentile(latencies, 0.5)).padStart(9)}  ${fmt(percentile(latencies, 0.99)).padStart(9)}  ${((100 * hits) / (hits + misses)).toFixed(1).padStart(6)}%`);
}

// ---- (c) weights apart vs embedded ----
console.log('\n(c) warm latency, weights held apart (cache on) vs embedded (cache off), servers side by side');
const bundles = { convnet: path.join(FIXTURES, 'models', 'convnet'), digits: path.join(ROOT, 'bundles', 'digits') };
try {
  makeBenchModels(path.join(temp.dir, 'generated'), [], { quiet: true });
  bundles.vgg_head = path.join(temp.dir, 'generated', 'vgg_head');
} catch (err) {
  console.log(`(vgg_head skipped: ${/** @type {Error} */ (err).message})`);
}
const sideRepo = makeRepository(path.join(temp.dir, 'side'), bundles);
const servers = {};
for (const [label, fraction] of [['apart', 1], ['embedded', 0]]) {
  const root = path.join(temp.dir, 'side', label);
  makeRepository(root, {});
  servers[label] = await startServer({ model_repo: sideRepo, global: { runtime: { weight_cache_fraction: fraction, intra_op_threads: 1 } } }, { root });
}
const inputs = {
  convnet: (n) => [{ name: 'image', datatype: 'FP32', shape: [n, 3, 32, 32], data: Float32Array.from({ length: n * 3072 }, (_, i) => Math.sin(i)) }],
  vgg_head: (n) => [{ name: 'image', datatype: 'FP32', shape: [n, 3, 32, 32], data: Float32Array.from({ length: n * 3072 }, (_, i) => Math.sin(i)) }],
  digits: (n) => [{ name: 'image', datatype: 'FP32', shape: [n, 8, 8], data: Float32Array.from({ length: n * 64 }, (_, i) => i % 17) }],
};
console.log('model        batch   apart p50    embedded p50   apart/embedded');
for (const model of Object.keys(bundles)) {
  for (const n of [1, 8]) {
    const t = { apart: [], embedded: [] };
    for (let i = 0; i < 5; i++) for (const s of Object.values(servers)) await s.client.infer(model, inputs[model](n));
    for (let i = 0; i < CALLS * 5; i++) {
      for (const label of i % 2 ? ['apart', 'embedded'] : ['embedded', 'apart']) t[label].push(await timed(() => servers[label].client.infer(model, inputs[model](n))));
    }
    console.log(`${model.padEnd(12)} ${String(n).padStart(5)}  ${fmt(median(t.apart)).padStart(10)}  ${fmt(median(t.embedded)).padStart(12)}   ${(median(t.apart) / median(t.embedded)).toFixed(3)}`);
  }
}
for (const s of Object.values(servers)) await s.stop();
temp.cleanup();
