// How close Stowage comes to its gRPC front end's ceiling. Starts the real server (node main.js)
// and two bare grpc-js echo servers of the same messages (bench/echo-server.js: one with Node's
// 64 KiB HTTP/2 windows, one "tuned" with the windows Stowage uses), then drives all three,
// interleaved point by point, with NVIDIA's perf_analyzer (async gRPC) and with ghz, and prints
// throughput, p50, p99, the server's CPU per request (main thread and whole process, from /proc)
// and Stowage's ratio to each echo.
//
// Payloads: 64 B (a one-layer 16-wide MLP), the tiny `digits` model (256 B in), 600 KiB and
// 8 MiB (the identity fixture `echo`, 150 and 2048 rows of 1024 FP32). Concurrency 1, 16, 64.
//
//   npm run build && node bench/front-end.js [--quick] [--only digits,64B] [--tools perf_analyzer,ghz]
//                                            [--v8=--initial-old-space-size=256]
//
// --v8=FLAGS starts a second Stowage with those V8 flags instead of main.js's own
// (STOWAGE_V8_FLAGS=FLAGS; `--v8=` for none), measured beside the first point by point, its
// ratio to the first printed last.
//
// perf_analyzer is installed by tools/install-perf-analyzer.sh and ghz by tools/install-ghz.sh (both into
// .toolchain/); a tool that is missing is skipped with a message. The machine is shared and
// noisy: compare the rows of one run, not runs of different days.
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import protobuf from 'protobufjs';
import { FIXTURES, ROOT, makeRepository, startServer, tempDir } from '../test/helpers/server.js';
import { mlpLayers, writeBundle } from '../test/helpers/mlp-catalog.js';
import { cpuUs } from './proc-cpu.js';
import { GHZ, PERF_ANALYZER, ghz, perfAnalyzer, startEcho } from './perf-analyzer.js';

const { values: args } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    only: { type: 'string' },
    tools: { type: 'string', default: 'perf_analyzer,ghz' },
    concurrency: { type: 'string', default: '1,16,64' },
    v8: { type: 'string' },
  },
});
const WINDOW_BYTES = 4 * 2 ** 20; // what the tuned echo and Stowage's default use (endpoints.http2_window_bytes)

// name -> the model, its input, and how many requests one measurement window holds.
const PAYLOADS = {
  '64B': { model: 'p64', input: 'x', shape: [1, 16], batch: 1, requests: 3000 },
  digits: { model: 'digits', input: 'image', shape: [1, 8, 8], batch: 1, requests: 3000 },
  '600KiB': { model: 'echo', input: 'x', shape: [150, 1024], batch: 150, requests: 300 },
  '8MiB': { model: 'echo', input: 'x', shape: [2048, 1024], batch: 2048, requests: 40 },
};
const only = args.only ? args.only.split(',') : Object.keys(PAYLOADS);
const concurrencies = args.concurrency.split(',').map(Number);
const tools = args.tools.split(',').filter((tool) => {
  const binary = tool === 'ghz' ? GHZ : PERF_ANALYZER;
  if (existsSync(binary)) return true;
  console.log(`${tool} is missing at ${binary}: skipped (tools/install-perf-analyzer.sh installs perf_analyzer; tools/install-ghz.sh installs ghz)`);
  return false;
});

// ---- the servers ----
const temp = tempDir('stowage-front-end-');
const repo = makeRepository(temp.dir, { digits: path.join(ROOT, 'bundles', 'digits'), echo: path.join(FIXTURES, 'models', 'echo') });
writeBundle(repo, 'p64', mlpLayers(1, [16, 16]));
const stowage = await startServer({ model_repo: repo, global: { logging: { level: 'info' } } }, { root: temp.dir });

/** ModelMetadata and ModelConfig as Stowage answers them, for the echo servers to answer the same. */
const models = {};
for (const model of new Set(only.map((p) => PAYLOADS[p].model))) {
  models[model] = { metadata: await stowage.client.call('ModelMetadata', { name: model }), config: (await stowage.client.call('ModelConfig', { name: model })).config };
}
const modelsFile = path.join(temp.dir, 'models.json');
writeFileSync(modelsFile, JSON.stringify(models));

/** A Stowage under measurement: it counts what it answered (the echo servers' CPU is divided by the client's count instead). */
function stowageEntry(/** @type {Awaited<ReturnType<typeof startServer>>} */ server, /** @type {string} */ name) {
  let lastCount = 0;
  return {
    name, address: server.address, pid: server.child.pid, stop: () => server.stop(),
    answered: async () => {
      const { model_stats: stats } = await server.client.call('ModelStatistics', {});
      const total = stats.reduce((sum, s) => sum + Number(s.inference_stats.success.count), 0);
      const delta = total - lastCount;
      lastCount = total;
      return delta;
    },
  };
}
const servers = [
  await startEcho(modelsFile, 0),
  await startEcho(modelsFile, WINDOW_BYTES),
  stowageEntry(stowage, 'stowage'),
];
if (args.v8 !== undefined) {
  const flagged = await startServer({ model_repo: repo, global: { logging: { level: 'info' } } }, { root: temp.dir, env: { STOWAGE_V8_FLAGS: args.v8 } });
  servers.push(stowageEntry(flagged, 'stowage (v8)'));
}

// ---- measuring ----

function perfAnalyzerPoint(server, payload, concurrency) {
  const requests = Math.max(args.quick ? payload.requests / 4 : payload.requests, concurrency * 4);
  return perfAnalyzer(server.address, { model: payload.model, batch: payload.batch, concurrency, requests });
}

/** ghz sends one serialized ModelInferRequest, made here with the same proto. */
const root = protobuf.loadSync(path.join(ROOT, 'proto', 'grpc_service.proto'));
const ModelInferRequest = root.lookupType('inference.ModelInferRequest');
function requestFile(payload) {
  const file = path.join(temp.dir, `${payload.model}-${payload.batch}.bin`);
  if (!existsSync(file)) {
    const bytes = payload.shape.reduce((a, b) => a * b, 1) * 4;
    const message = ModelInferRequest.create({
      modelName: payload.model,
      inputs: [{ name: payload.input, datatype: 'FP32', shape: payload.shape }],
      rawInputContents: [Buffer.alloc(bytes)],
    });
    writeFileSync(file, ModelInferRequest.encode(message).finish());
  }
  return file;
}

function ghzPoint(server, payload, concurrency) {
  const requests = Math.round(Math.max(args.quick ? payload.requests / 2 : payload.requests * 2, concurrency * 8));
  return ghz(server.address, requestFile(payload), { concurrency, requests });
}

async function measure(tool, server, payload, concurrency) {
  const before = cpuUs(server.pid);
  const result = await (tool === 'ghz' ? ghzPoint : perfAnalyzerPoint)(server, payload, concurrency);
  const after = cpuUs(server.pid);
  // perf_analyzer warms up and may run several windows: the server's CPU covers all it answered,
  // so it is divided by the requests the server counted over the same span.
  const answered = server.answered ? await server.answered() : result.count;
  return { ...result, mainUs: (after.main - before.main) / answered, processUs: (after.process - before.process) / answered };
}

// The echo servers' CPU is divided by the client's count (a slight overestimate of their cost per
// request, so the ratios below favour the echo).
for (const server of servers) if (server.answered) await server.answered();

const fmt = (x, digits = 0) => (Number.isFinite(x) ? x.toFixed(digits) : '-');
console.log(`front-end bench: ${new Date().toISOString().slice(0, 10)}, node ${process.version}, ${os.cpus().length} × ${os.cpus()[0]?.model ?? 'cpu'}, ${Math.round(os.totalmem() / 2 ** 30)} GiB`);
console.log('throughput in requests/s; latency in µs; CPU in µs per request (server main thread / whole process)');
const rows = [];
try {
  for (const tool of tools) {
    console.log(`\n${tool}`);
    console.log('payload   conc  server          req/s     p50     p99   cpu main/all   stowage ÷ this');
    for (const name of only) {
      const payload = PAYLOADS[name];
      for (const concurrency of concurrencies) {
        // ghz (0.93) has no flag for its 4 MiB message limit: 8 MiB answers cannot reach it.
        if (tool === 'ghz' && payload.batch * 4096 > 4 * 2 ** 20) continue;
        const results = [];
        for (const server of servers) results.push(await measure(tool, server, payload, concurrency));
        const mine = results[2];
        servers.forEach((server, i) => {
          const r = results[i];
          // Stowage against each echo; a second Stowage (--v8) against the first.
          const ratio = i < 2 ? fmt(mine.rps / r.rps, 2) : i === 2 ? '' : `${fmt(r.rps / mine.rps, 2)} of stowage's`;
          console.log(`${name.padEnd(9)} ${String(concurrency).padStart(4)}  ${server.name.padEnd(13)} ${fmt(r.rps).padStart(7)} ${fmt(r.p50).padStart(7)} ${fmt(r.p99).padStart(7)}   ${fmt(r.mainUs).padStart(5)}/${fmt(r.processUs).padEnd(6)}   ${ratio}`);
          rows.push({ tool, payload: name, concurrency, server: server.name, ...r });
        });
      }
    }
  }
} finally {
  for (const server of servers) await server.stop();
  temp.cleanup();
}
if (process.env.FRONT_END_JSON) writeFileSync(process.env.FRONT_END_JSON, JSON.stringify(rows, null, 2));
