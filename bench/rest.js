// The REST port against the gRPC port of one server, with NVIDIA's perf_analyzer (`-i http`, which
// sends binary tensors, against `-i grpc`), point by point in turns: the example digits model
// (tiny), the convnet fixture, and a 600 KiB identity (echo) at concurrency 1 and 8. Prints
// requests/s and p50 per protocol and their ratio.
//
//   npm run build && node bench/rest.js [--requests N]
import path from 'node:path';
import os from 'node:os';
import { parseArgs } from 'node:util';
import { perfAnalyzer } from './perf-analyzer.js';
import { FIXTURES, ROOT, makeRepository, startServer, tempDir } from '../test/helpers/server.js';

const { values: args } = parseArgs({ options: { requests: { type: 'string', default: '2000' } } });
const temp = tempDir('stowage-bench-rest-');
const repo = makeRepository(temp.dir, {
  digits: path.join(ROOT, 'bundles', 'digits'),
  convnet: path.join(FIXTURES, 'models', 'convnet'),
  echo: path.join(FIXTURES, 'models', 'echo'),
});
const server = await startServer({ model_repo: repo }, { root: temp.dir });
const rest = String(server.rest).replace('http://', '');
// echo is f32[n,1024]: 150 rows are 600 KiB.
const POINTS = [['digits', 1], ['convnet', 1], ['echo', 150]];
const rows = [];
try {
  for (const [model, batch] of POINTS) {
    for (const concurrency of [1, 8]) {
      const requests = Number(args.requests) / (model === 'echo' ? 4 : 1);
      const grpc = await perfAnalyzer(server.address, { model, batch, concurrency, requests });
      const http = await perfAnalyzer(rest, { model, batch, concurrency, requests, protocol: 'http' });
      rows.push({ model, batch, concurrency, grpc, http });
    }
  }
} finally {
  await server.stop();
  temp.cleanup();
}
console.log(`${new Date().toISOString().slice(0, 10)}, ${os.availableParallelism()} cores, Node ${process.versions.node}; perf_analyzer async, count windows of ${args.requests} requests\n`);
console.log('| model | batch | concurrency | gRPC req/s (p50 µs) | REST req/s (p50 µs) | REST / gRPC |');
console.log('| --- | --- | --- | --- | --- | --- |');
for (const r of rows) {
  console.log(`| ${r.model} | ${r.batch} | ${r.concurrency} | ${r.grpc.rps.toFixed(0)} (${r.grpc.p50}) | ${r.http.rps.toFixed(0)} (${r.http.p50}) | ${(r.http.rps / r.grpc.rps).toFixed(2)} |`);
}
