// ONNX Runtime's intra-op threads: a pool per session (runtime.thread_pool: per_session) against
// one pool for the process (process). Two servers of the same repository (the convnet fixture,
// digits, and a catalog of small MLPs standing for a node with many models), driven by
// perf_analyzer point by point in turns; prints each server's thread count, requests/s and p50.
//
//   npm run build && node bench/thread-pool.js [--models 50] [--concurrency 1,8]
import { readdirSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { writeCatalog } from '../test/helpers/mlp-catalog.js';
import { FIXTURES, ROOT, makeRepository, startServer, tempDir } from '../test/helpers/server.js';
import { perfAnalyzer } from './perf-analyzer.js';

const { values: args } = parseArgs({ options: { models: { type: 'string', default: '50' }, concurrency: { type: 'string', default: '1,8' } } });
const temp = tempDir('stowage-bench-pool-');
const repo = makeRepository(temp.dir, { convnet: path.join(FIXTURES, 'models', 'convnet'), digits: path.join(ROOT, 'bundles', 'digits') });
writeCatalog(repo, { count: Number(args.models), sizes: [64, 256, 8] });
const servers = [];
for (const pool of ['per_session', 'process']) {
  const server = await startServer({ model_repo: repo, cache_dir: path.join(temp.dir, `cache-${pool}`), global: { runtime: { thread_pool: pool, intra_op_threads: 0, cpu_device_memory_bytes: 256 * 2 ** 20 } } });
  servers.push({ pool, server, threads: readdirSync(`/proc/${server.child.pid}/task`).length });
}
console.log(`${new Date().toISOString().slice(0, 10)}, ${os.availableParallelism()} cores, ${2 + Number(args.models)} models, intra_op_threads 0 (one per core)\n`);
console.log(`threads: ${servers.map((s) => `${s.pool} ${s.threads}`).join(', ')}\n`);
console.log('| model | concurrency | per_session req/s (p50 µs) | process req/s (p50 µs) | process / per_session |');
console.log('| --- | --- | --- | --- | --- |');
try {
  for (const model of ['digits', 'convnet']) {
    for (const concurrency of args.concurrency.split(',').map(Number)) {
      const row = [];
      for (const { server } of servers) row.push(await perfAnalyzer(server.address ?? '', { model, batch: 1, concurrency, requests: 1000, inputData: 'zero' }));
      console.log(`| ${model} | ${concurrency} | ${row[0].rps.toFixed(0)} (${row[0].p50}) | ${row[1].rps.toFixed(0)} (${row[1].p50}) | ${(row[1].rps / row[0].rps).toFixed(2)} |`);
    }
  }
} finally {
  for (const { server } of servers) await server.stop();
  temp.cleanup();
}
