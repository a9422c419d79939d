// Tenant isolation by quotas (issue 65 item 3): one CPU device, one model; tenant `quiet` sends a
// steady trickle (closed loop, 2 clients) and its latency is measured alone, then beside tenant
// `noisy` flooding the same model (closed loop, 32 clients), first without quotas, then with
// `noisy` capped at 2 requests in flight (global.quotas.tenants.noisy.max_inflight). Prints the quiet
// tenant's p50 and p99 in each phase and as a ratio to its quiet p99, and how many of noisy's
// requests were answered and refused. The issue asks for the quiet tenant's p99 within 1.2x of its
// quiet p99 while the noisy one is over its quota.
//
//   npm run build && node bench/quotas.js [--seconds 8]
//
// The machine is shared and noisy: compare the rows of one run, not runs of different days.
import { parseArgs } from 'node:util';
import path from 'node:path';
import { InferenceClient } from '../dist/client/client.js';
import { startServer, tempDir, tensor } from '../test/helpers/server.js';
import { mlpLayers, writeBundle } from '../test/helpers/mlp-catalog.js';

const { values: args } = parseArgs({ options: { seconds: { type: 'string', default: '8' } } });
const SECONDS = Number(args.seconds);
const x = tensor('x', 'FP32', [1, 512], new Float32Array(512).fill(0.25));

/** @param {number[]} values @param {number} p */
const percentile = (values, p) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] : NaN;
};

/** One phase on a fresh server: quiet alone or beside noisy, with or without noisy's quota. */
async function phase(noisyClients, quota) {
  const temp = tempDir('stowage-bench-quotas-');
  const repo = path.join(temp.dir, 'repo');
  writeBundle(repo, 'm', mlpLayers(3, [512, 2048, 2048, 8]));
  const quotas = quota ? { tenants: { noisy: { max_inflight: 2 } } } : {};
  const server = await startServer({ model_repo: repo, global: { quotas, runtime: { intra_op_threads: 1 } } }, { root: temp.dir });
  const clients = Array.from({ length: 4 }, () => new InferenceClient(server.address, { 'grpc.use_local_subchannel_pool': 1 }));
  for (let i = 0; i < 20; i++) await clients[i % 4].infer('m', [x]);
  const as = (/** @type {string} */ tenant) => ({ metadata: { 'stowage-tenant': tenant } });
  const quiet = /** @type {number[]} */ ([]);
  const noisy = { ok: 0, refused: 0 };
  const until = performance.now() + SECONDS * 1000;
  const quietLoop = async (/** @type {number} */ i) => {
    while (performance.now() < until) {
      const t0 = performance.now();
      await clients[i % 2].infer('m', [x], as('quiet'));
      quiet.push(performance.now() - t0);
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
  };
  const noisyLoop = async (/** @type {number} */ i) => {
    while (performance.now() < until) {
      await clients[2 + (i % 2)].infer('m', [x], as('noisy')).then(() => { noisy.ok++; }, () => { noisy.refused++; });
    }
  };
  await Promise.all([quietLoop(0), quietLoop(1), ...Array.from({ length: noisyClients }, (_, i) => noisyLoop(i))]);
  for (const c of clients) c.close();
  await server.stop();
  temp.cleanup();
  return { p50: percentile(quiet, 50), p99: percentile(quiet, 99), quiet: quiet.length, noisy };
}

const alone = await phase(0, false);
const flooded = await phase(32, false);
const capped = await phase(32, true);
console.log('| phase | quiet requests | quiet p50 ms | quiet p99 ms | p99 / alone | noisy answered | noisy refused |');
console.log('| --- | --- | --- | --- | --- | --- | --- |');
for (const [name, r] of /** @type {const} */ ([['quiet alone', alone], ['noisy beside, no quota', flooded], ['noisy beside, max_inflight 2', capped]])) {
  console.log(`| ${name} | ${r.quiet} | ${r.p50.toFixed(2)} | ${r.p99.toFixed(2)} | ${(r.p99 / alone.p99).toFixed(2)} | ${r.noisy.ok} | ${r.noisy.refused} |`);
}
