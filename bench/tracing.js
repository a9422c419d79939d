// What tracing costs per request: the same repository served twice, perf_analyzer against each
// in turns (digits, the tiny example, and the convnet fixture, at concurrency 1 and 8): tracing
// off (the default) and on, every span exported over OTLP/HTTP (protobuf) to a receiver this bench
// runs. perf_analyzer sends no traceparent: with tracing on each request still gets its spans, in
// a trace of its own, so "on" is the whole cost of spans and their export.
//
//   npm run build && node bench/tracing.js [--requests N]
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { perfAnalyzer } from './perf-analyzer.js';
import { FIXTURES, ROOT, makeRepository, startServer, tempDir } from '../test/helpers/server.js';

const { values: args } = parseArgs({ options: { requests: { type: 'string', default: '3000' } } });
let exported = 0;
const receiver = http.createServer((req, res) => {
  req.on('data', () => {});
  req.on('end', () => {
    exported++;
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end('{}');
  });
});
await new Promise((resolve) => receiver.listen(0, '127.0.0.1', () => resolve(undefined)));
const url = `http://127.0.0.1:${/** @type {import('node:net').AddressInfo} */ (receiver.address()).port}`;
const temp = tempDir('stowage-bench-tracing-');
const repo = makeRepository(temp.dir, { digits: path.join(ROOT, 'bundles', 'digits'), convnet: path.join(FIXTURES, 'models', 'convnet') });
const servers = {
  off: await startServer({ model_repo: repo, cache_dir: path.join(temp.dir, 'c1') }, { root: path.join(temp.dir) }),
  on: await startServer({ model_repo: repo, cache_dir: path.join(temp.dir, 'c2') }, {
    root: temp.dir,
    env: { OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_ENDPOINT: url, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf', OTEL_METRICS_EXPORTER: 'none', OTEL_LOGS_EXPORTER: 'none' },
  }),
};
const rows = [];
try {
  for (const model of ['digits', 'convnet']) {
    for (const concurrency of [1, 8]) {
      const point = { model, concurrency };
      for (const [name, server] of Object.entries(servers)) point[name] = await perfAnalyzer(server.address, { model, batch: 1, concurrency, requests: Number(args.requests) });
      rows.push(point);
    }
  }
} finally {
  for (const s of Object.values(servers)) await s.stop();
  receiver.close();
  temp.cleanup();
}
console.log(`${new Date().toISOString().slice(0, 10)}, ${os.availableParallelism()} cores, Node ${process.versions.node}; perf_analyzer async gRPC, windows of ${args.requests}; ${exported} OTLP exports received\n`);
console.log('| model | concurrency | off req/s (p50 µs) | on, exported req/s (p50 µs) | on / off |');
console.log('| --- | --- | --- | --- | --- |');
for (const r of rows) console.log(`| ${r.model} | ${r.concurrency} | ${r.off.rps.toFixed(0)} (${r.off.p50}) | ${r.on.rps.toFixed(0)} (${r.on.p50}) | ${(r.on.rps / r.off.rps).toFixed(2)} |`);
