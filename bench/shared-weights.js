// Density with shared weights: how many models one device serves within a fixed weight budget at
// a p99 latency target. Two catalogs of the same architecture (an MLP 256→2048→2048→16, about
// 18.9 MB of weights a model) in a 64 MiB budget: variants fine-tuned from one backbone (only the
// 128 KB heads differ) and models whose every weight is their own. For N models of each, 8 clients send
// Zipf(1.0) traffic; the table gives throughput, p99, the weight-cache hit rate and the bytes
// resident, and the last line the most models served within the target, with and without sharing.
//
//   npm run build && node bench/shared-weights.js [p99 target ms, default 25] [requests per point, default 1500]
import path from 'node:path';
import { InferenceClient } from '../dist/client/client.js';
import { random, writeCatalog, writeVariants } from '../test/helpers/mlp-catalog.js';
import { makeRepository, scrapeMetrics, startServer, tempDir } from '../test/helpers/server.js';
import { driveClients, percentile } from './timing.js';

const TARGET_MS = Number(process.argv[2] ?? 25);
const REQUESTS = Number(process.argv[3] ?? 1500);
const SIZES = [256, 2048, 2048, 16];
const BUDGET = 64 * 2 ** 20;
const COUNTS = [4, 16, 64];
const temp = tempDir('stowage-bench-');
const sumOf = (m, name) => Object.entries(m).filter(([k]) => k.startsWith(`${name}{`)).reduce((s, [, v]) => s + v, 0);

async function measure(kind, count) {
  const root = path.join(temp.dir, `${kind}-${count}`);
  const repo = path.join(root, 'repo');
  const models = kind === 'shared' ? writeVariants(repo, { count, sizes: SIZES }) : writeCatalog(repo, { count, sizes: SIZES, prefix: 'own' });
  makeRepository(root, {});
  const server = await startServer({
    model_repo: repo,
    global: { runtime: { cpu_device_memory_bytes: BUDGET, mem_fraction: 1, weight_cache_wiggle_fraction: 0 } },
  }, { root });
  const weights = models.map((_, k) => 1 / (k + 1));
  const total = weights.reduce((a, b) => a + b);
  const next = random(99);
  const pick = () => {
    let u = next() * total;
    for (let k = 0; k < weights.length; k++) if ((u -= weights[k]) <= 0) return models[k].name;
    return models[models.length - 1].name;
  };
  const x = () => [{ name: 'x', datatype: 'FP32', shape: [1, SIZES[0]], data: new Float32Array(SIZES[0]).fill(0.5) }];
  for (const m of models) await server.client.infer(m.name, x()); // every model once
  const before = await scrapeMetrics(server.adminPort);
  const clients = Array.from({ length: 8 }, () => new InferenceClient(server.address));
  const picks = Array.from({ length: REQUESTS }, pick);
  const { latencies, seconds } = await driveClients(clients, picks, (c, model) => c.infer(model, x()));
  for (const c of clients) c.close();
  const after = await scrapeMetrics(server.adminPort);
  await server.stop();
  const hits = sumOf(after, 'stowage_weight_cache_hits_total') - sumOf(before, 'stowage_weight_cache_hits_total');
  const misses = sumOf(after, 'stowage_weight_cache_misses_total') - sumOf(before, 'stowage_weight_cache_misses_total');
  return {
    rps: REQUESTS / seconds,
    p99: percentile(latencies, 0.99),
    hitRate: hits / (hits + misses),
    resident: after['stowage_weight_cache_resident_bytes{device="0"}'],
    logical: after['stowage_weight_cache_logical_bytes{device="0"}'],
  };
}

console.log(`budget ${(BUDGET / 2 ** 20).toFixed(0)} MiB; ${REQUESTS} requests per point from 8 clients; p99 target ${TARGET_MS} ms`);
console.log('catalog     models   req/s    p99        hit rate   resident MiB   logical MiB');
const best = { shared: 0, own: 0 };
for (const kind of ['shared', 'own']) {
  for (const count of COUNTS) {
    const r = await measure(kind, count);
    if (r.p99 <= TARGET_MS) best[kind] = Math.max(best[kind], count);
    console.log(`${(kind === 'shared' ? 'backbone' : 'own weights').padEnd(11)} ${String(count).padStart(6)}  ${r.rps.toFixed(0).padStart(6)}  ${r.p99.toFixed(2).padStart(7)} ms  ${(100 * r.hitRate).toFixed(1).padStart(7)}%  ${(r.resident / 2 ** 20).toFixed(1).padStart(12)}  ${(r.logical / 2 ** 20).toFixed(1).padStart(12)}`);
  }
}
console.log(`most models within p99 ${TARGET_MS} ms (of ${COUNTS.join(', ')}): ${best.shared} with a shared backbone, ${best.own} with weights of their own`);
temp.cleanup();
