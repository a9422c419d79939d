// The gateway's modes on four virtual devices: a catalog of 32 models (MLPs of 2.2 MB of weights)
// whose weights are three times one device's budget, under Zipf(1.0) traffic from 16 clients,
// with round_robin (every device serves every model, so every device churns the whole catalog)
// and with lpt_packing (each model placed on one device by measured load and bytes). Prints
// throughput, p99, the weight-cache hit rate, the average batch size and the per-device busy
// time of each, and the lpt/round_robin ratios.
//
//   npm run build && node bench/gateway.js [requests, default 4000]
import path from 'node:path';
import { InferenceClient } from '../dist/client/client.js';
import { mlpWeightBytes, random, writeCatalog } from '../test/helpers/mlp-catalog.js';
import { makeRepository, scrapeMetrics, startServer, tempDir } from '../test/helpers/server.js';
import { percentile } from './timing.js';

const REQUESTS = Number(process.argv[2] ?? 4000);
const SIZES = [256, 2048, 16];
const COUNT = 32;
const DEVICES = 4;
const CLIENTS = 16;
const BUDGET = Math.floor((COUNT * mlpWeightBytes(SIZES)) / 3);
const temp = tempDir('stowage-bench-');
const repo = path.join(temp.dir, 'repo');
const catalog = writeCatalog(repo, { count: COUNT, sizes: SIZES });
const sumOf = (m, prefix) => Object.entries(m).filter(([k]) => k.startsWith(prefix)).reduce((s, [, v]) => s + v, 0);

// Zipf(1.0) over the catalog, the same sequence for both modes.
const weights = catalog.map((_, k) => 1 / (k + 1));
const total = weights.reduce((a, b) => a + b);
const next = random(5);
const picks = Array.from({ length: REQUESTS }, () => {
  let u = next() * total;
  for (let k = 0; k < COUNT; k++) if ((u -= weights[k]) <= 0) return catalog[k].name;
  return catalog[COUNT - 1].name;
});
const x = () => [{ name: 'x', datatype: 'FP32', shape: [1, SIZES[0]], data: new Float32Array(SIZES[0]).fill(0.5) }];

async function run(mode) {
  const root = path.join(temp.dir, mode);
  makeRepository(root, {});
  const server = await startServer({
    model_repo: repo,
    gpus: DEVICES,
    gateway: { scheduling: { mode, rebalance_compute_seconds: 0.1 } },
    global: {
      runtime: { cpu_device_memory_bytes: BUDGET, mem_fraction: 1, weight_cache_wiggle_fraction: 0, intra_op_threads: 1 },
      scheduler: { discipline: 'fifo' },
    },
  }, { root });
  const clients = Array.from({ length: CLIENTS }, () => new InferenceClient(server.address));
  const drive = async (list) => {
    const latencies = [];
    await Promise.all(clients.map(async (c, i) => {
      for (let k = i; k < list.length; k += CLIENTS) {
        const s = performance.now();
        await c.infer(list[k], x());
        latencies.push(performance.now() - s);
      }
    }));
    return latencies;
  };
  await drive(picks.slice(0, Math.floor(REQUESTS / 4))); // warm up: measurements for the packer, weights on devices
  const before = await scrapeMetrics(server.adminPort);
  const t0 = performance.now();
  const latencies = await drive(picks);
  const seconds = (performance.now() - t0) / 1000;
  const after = await scrapeMetrics(server.adminPort);
  for (const c of clients) c.close();
  await server.stop();
  const delta = (prefix) => sumOf(after, prefix) - sumOf(before, prefix);
  const hits = delta('stowage_weight_cache_hits_total{');
  const misses = delta('stowage_weight_cache_misses_total{');
  const busy = Array.from({ length: DEVICES }, (_, d) => after[`stowage_device_busy_seconds_total{device="${d}"}`] - (before[`stowage_device_busy_seconds_total{device="${d}"}`] ?? 0));
  return {
    rps: REQUESTS / seconds,
    p99: percentile(latencies, 0.99),
    hitRate: hits / (hits + misses),
    batch: delta('stowage_device_batch_rows_sum') / delta('stowage_device_batch_rows_count'),
    busy,
  };
}

console.log(`${COUNT} models, ${(COUNT * mlpWeightBytes(SIZES) / 1e6).toFixed(1)} MB of weights; ${DEVICES} devices of ${(BUDGET / 1e6).toFixed(1)} MB; ${REQUESTS} requests, Zipf(1.0), ${CLIENTS} clients`);
console.log('mode                req/s    p99        hit rate   rows/exec   device busy s (max/min)');
const results = {};
for (const mode of ['round_robin', 'lpt_packing']) {
  const r = await run(mode);
  results[mode] = r;
  console.log(`${mode.padEnd(18)} ${r.rps.toFixed(0).padStart(6)}  ${r.p99.toFixed(2).padStart(7)} ms  ${(100 * r.hitRate).toFixed(1).padStart(7)}%  ${r.batch.toFixed(2).padStart(9)}   ${r.busy.map((b) => b.toFixed(2)).join(' ')} (${(Math.max(...r.busy) / Math.min(...r.busy)).toFixed(2)})`);
}
const [rr, lpt] = [results.round_robin, results.lpt_packing];
console.log(`lpt/round_robin: throughput ${(lpt.rps / rr.rps).toFixed(2)}x, p99 ${(lpt.p99 / rr.p99).toFixed(2)}x, hit rate ${(lpt.hitRate / rr.hitRate).toFixed(2)}x, rows per execution ${(lpt.batch / rr.batch).toFixed(2)}x`);
temp.cleanup();
