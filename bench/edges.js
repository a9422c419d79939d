// Edge threads (endpoints.edge_threads): the same server with the main thread alone as its edge
// (0), with `auto` (the rule in src/config/edges.ts, for this machine's cores) and with 1, 2 or
// more edge threads, and a bare grpc-js echo server (bench/echo-server.js, Stowage's HTTP/2
// windows) beside them, each driven by NVIDIA's perf_analyzer (async, inline tensors) over gRPC
// and REST, point by point interleaved so that the machine's drift falls on every column alike.
// Prints requests/s, p50 and p99, each configuration's throughput as a ratio to edge_threads 0, and
// the CPU each request cost the server's main thread and its whole process (from /proc): the main
// thread's share is what caps a node with many cores, where the edges' threads are not short of one.
//
// Payloads: 64 B (a one-layer 16-wide MLP) and the identity fixture `echo` at 600 KiB and 8 MiB
// (150 and 2048 rows of 1024 FP32). Concurrency 1, 16, 64. On request (--only), the 64 B model
// with a preprocess hook (`hooked`: model.js hands its input on) and through system shared memory
// (`shm`: perf_analyzer's --shared-memory system, gRPC only): the request kinds that once crossed
// to the main thread, whose CPU per request there the issue holds as low as a plain request's.
//
//   npm run build && node bench/edges.js [--quick] [--edges 0,auto,1,2] [--only 64B,600KiB,8MiB,hooked,shm]
//                                        [--protocols grpc,http] [--concurrency 1,16,64] [--scale 1]
//                                        [--baseline DIR] [--flip]
//
// --baseline DIR: beside each setting, the same setting served by the build in DIR (another checkout
// of Stowage, built: `git worktree add DIR REV && (cd DIR && npm run build)`), point by point in the
// same run, so that a change is measured against the build before it on the same drift (its rows
// are named "base edges N").
//
// --flip: every point measures its servers in the other order than it would without it (the bench
// alternates the order point by point; runs with and without --flip alternate it at each point).
//
// perf_analyzer is installed by tools/install-perf-analyzer.sh (into .toolchain/). The machine is
// shared and noisy: compare the rows of one run, not runs of different days.
import { existsSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { FIXTURES, makeRepository, startServer, tempDir } from '../test/helpers/server.js';
import { mlpLayers, writeBundle } from '../test/helpers/mlp-catalog.js';
import { PERF_ANALYZER, perfAnalyzer, startEcho } from './perf-analyzer.js';
import { cpuUs } from './proc-cpu.js';
import { edgeThreads } from '../dist/config/edges.js';

const { values: args } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    edges: { type: 'string', default: '0,auto,1,2' },
    only: { type: 'string', default: '64B,600KiB,8MiB' },
    protocols: { type: 'string', default: 'grpc,http' },
    concurrency: { type: 'string', default: '1,16,64' },
    // Requests per point times this: /proc counts CPU in 10 ms ticks, so a main thread that spends a
    // few µs per request needs tens of thousands of requests to be told apart (--scale 10).
    scale: { type: 'string', default: '1' },
    baseline: { type: 'string' },
    flip: { type: 'boolean', default: false },
  },
});
if (!existsSync(PERF_ANALYZER)) {
  console.log(`perf_analyzer is missing at ${PERF_ANALYZER}: run tools/install-perf-analyzer.sh`);
  process.exit(0);
}
const WINDOW_BYTES = 4 * 2 ** 20; // Stowage's endpoints.http2_window_bytes, given to the echo too

const PAYLOADS = {
  '64B': { model: 'p64', batch: 1, requests: 3000 },
  '600KiB': { model: 'echo', batch: 150, requests: 300 },
  '8MiB': { model: 'echo', batch: 2048, requests: 40 },
  hooked: { model: 'p64_hooked', batch: 1, requests: 3000 },
  shm: { model: 'p64', batch: 1, requests: 3000, sharedMemory: 'system', outputBytes: 64, grpcOnly: true },
};
const payloads = args.only.split(',');
const concurrencies = args.concurrency.split(',').map(Number);
const protocols = args.protocols.split(',');
const settings = args.edges.split(',').map((e) => (e === 'auto' ? 'auto' : Number(e)));

const temp = tempDir('stowage-edges-');
const repo = makeRepository(temp.dir, { echo: path.join(FIXTURES, 'models', 'echo') });
writeBundle(repo, 'p64', mlpLayers(1, [16, 16]));
// The same model behind a preprocess hook that hands its input on as it is.
writeBundle(repo, 'p64_hooked', mlpLayers(1, [16, 16]));
writeFileSync(path.join(repo, 'p64_hooked', 'model.js'), 'export function preprocess({ x }) { return { x }; }\n');

/** One Stowage per edge_threads setting (and with --baseline, one of the baseline's beside it), all serving the same repository. */
const servers = [];
const builds = [{ prefix: '', main: undefined }, ...(args.baseline ? [{ prefix: 'base ', main: path.resolve(args.baseline, 'main.js') }] : [])];
for (const setting of settings) for (const { prefix, main } of builds) {
  const server = await startServer({ model_repo: repo, global: { logging: { level: 'info' }, endpoints: { edge_threads: setting } } }, { root: temp.dir, ...(main ? { main } : {}) });
  const label = setting === 'auto' ? `auto (${edgeThreads('auto')})` : String(setting);
  let counted = 0;
  servers.push({
    name: `${prefix}edges ${label}`, setting: prefix ? `base ${setting}` : setting, grpc: server.address, http: server.rest.replace('http://', ''), pid: server.child.pid, stop: () => server.stop(), client: server.client,
    /** Requests the server answered since the last call (its statistics), to divide its CPU by. */
    answered: async () => {
      const { model_stats: stats } = await server.client.call('ModelStatistics', {});
      const total = stats.reduce((sum, m) => sum + Number(m.inference_stats.success.count), 0);
      const delta = total - counted;
      counted = total;
      return delta;
    },
  });
}
/** The echo answers ModelMetadata and ModelConfig as Stowage does. */
const models = {};
for (const model of new Set(payloads.map((p) => PAYLOADS[p].model))) {
  models[model] = { metadata: await servers[0].client.call('ModelMetadata', { name: model }), config: (await servers[0].client.call('ModelConfig', { name: model })).config };
}
const modelsFile = path.join(temp.dir, 'models.json');
writeFileSync(modelsFile, JSON.stringify(models));
const echo = await startEcho(modelsFile, WINDOW_BYTES);

const fmt = (x, digits = 0) => (Number.isFinite(x) ? x.toFixed(digits) : '-');
console.log(`edges bench: ${new Date().toISOString().slice(0, 10)}, node ${process.version}, ${os.availableParallelism()} cores (${os.cpus()[0]?.model ?? 'cpu'}), ${Math.round(os.totalmem() / 2 ** 30)} GiB`);
console.log('perf_analyzer, async, inline tensors; throughput in requests/s, latency in µs; ratio: requests/s ÷ edge_threads 0\'s');
const rows = [];
// Which server a point measures first matters here (the first after a switch ran up to 1.4x slower over REST at
// concurrency 1, whichever build it was): every other point measures them in the reverse order.
let point = args.flip ? 1 : 0;
try {
  for (const protocol of protocols) {
    console.log(`\n${protocol}`);
    console.log('payload   conc  server              req/s      p50      p99   ÷ edges 0   cpu µs/request main/all');
    for (const name of payloads) {
      const payload = PAYLOADS[name];
      if (payload.grpcOnly && protocol !== 'grpc') continue;
      for (const concurrency of concurrencies) {
        const requests = Math.round(Math.max(args.quick ? payload.requests / 4 : payload.requests, concurrency * 4) * Number(args.scale));
        // perf_analyzer's HTTP client has crashed now and then at concurrency 64 (a curl error, then
        // a segfault): a point is tried twice, and one that fails twice is reported as failed.
        const once = (address) => perfAnalyzer(address, { model: payload.model, batch: payload.batch, concurrency, requests, protocol, ...(payload.sharedMemory ? { sharedMemory: payload.sharedMemory, outputBytes: payload.outputBytes } : {}) });
        const measure = (address) => once(address).catch(() => once(address)).catch((err) => ({ rps: NaN, p50: NaN, p99: NaN, failed: String(err.stderr ?? err.message).split('\n')[0] }));
        const results = [];
        const ordered = point++ % 2 === 0 ? servers : [...servers].reverse();
        for (const server of ordered) {
          await server.answered();
          const before = cpuUs(server.pid);
          const r = await measure(protocol === 'grpc' ? server.grpc : server.http);
          const after = cpuUs(server.pid);
          const answered = await server.answered();
          results.push({ name: server.name, setting: server.setting, ...r, mainUs: (after.main - before.main) / answered, processUs: (after.process - before.process) / answered });
        }
        results.sort((a, b) => servers.findIndex((s) => s.name === a.name) - servers.findIndex((s) => s.name === b.name));
        // The echo speaks gRPC only.
        if (protocol === 'grpc' && !payload.sharedMemory) results.push({ name: echo.name, setting: null, ...(await measure(echo.address)) });
        const base = results.find((r) => r.setting === 0)?.rps;
        for (const r of results) {
          const cpu = r.mainUs === undefined ? '' : `${fmt(r.mainUs, 1).padStart(5)}/${fmt(r.processUs)}`;
          console.log(`${name.padEnd(9)} ${String(concurrency).padStart(4)}  ${r.name.padEnd(17)} ${fmt(r.rps).padStart(7)} ${fmt(r.p50).padStart(8)} ${fmt(r.p99).padStart(8)}   ${(base ? fmt(r.rps / base, 2) : '-').padEnd(9)}   ${cpu}${r.failed ? `  perf_analyzer failed twice: ${r.failed}` : ''}`);
          rows.push({ protocol, payload: name, concurrency, ...r });
        }
      }
    }
  }
} finally {
  for (const server of servers) await server.stop();
  await echo.stop();
  temp.cleanup();
}
if (process.env.EDGES_JSON) writeFileSync(process.env.EDGES_JSON, JSON.stringify(rows, null, 2));
