// Stowage beside its peers, on this machine: the same ONNX models served by Stowage, NVIDIA Triton
// (the tritonserver binary of the nvidia-pytriton wheel, each model a PyTriton Python model that
// runs onnxruntime: pytriton_serve.py says why) and MLServer (onnxruntime through our runtime,
// mlserver_onnx.py, with its adaptive batching), all driven by one load generator, NVIDIA's
// perf_analyzer over gRPC, point by point in turn. Two limits beside them: raw onnxruntime-node in
// this process (the compute limit: one request per run, or `concurrency` requests per run) and a
// bare grpc-js echo of the same messages (bench/echo-server.js with tuned windows: the front end's).
// Then the density workload (density.js): 200 models under Zipf traffic, Stowage with a device
// budget of all, 10% and 5% of their weights, against the peers with every model resident and
// their measured cold load.
//
//   npm run build && node bench/peers/run.js [--quick] [--only tiny,convnet,600KiB,8MiB,density]
//     [--concurrency 1,8,32] [--servers stowage,triton,mlserver] [--threads N] [--triton-resident]
//     [--edges auto|N]  (Stowage's endpoints.edge_threads; the node file's default, auto, unless given)
//
// Every server computes with the same ONNX Runtime thread count (--threads, default: the cores),
// threads that do not spin between runs. Before each point the machine must be idle (under 15%
// busy for half a second, waited for up to 10 s); the CPU that anything else used during the point
// is recorded beside it, so a noisy point shows. Bounded in time: a point's window holds about
// 5 s of requests at the rate the server reached at the last concurrency, and a point that would
// still take over a minute is skipped and says so (MLServer with 8 MiB tensors at concurrency 32
// took six minutes). About 10 minutes on a 2-core machine (9.4 on 2026-11-25). Writes docs/benchmarks/<date>.md
// (tables), <date>-<workload>.png (latency against throughput; density: p99 against the budget;
// bench/peers/plot.py) and <date>.json, and points docs/benchmarks/README.md at them. The peers'
// Python environments and the load generators are installed on first use (setup.sh).
import { execFile, execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs, promisify } from 'node:util';
import * as ort from 'onnxruntime-node';
import protobuf from 'protobufjs';
import { FIXTURES, ROOT, makeRepository, startServer, tempDir } from '../../test/helpers/server.js';
import { GHZ, PERF_ANALYZER, perfAnalyzer, startEcho } from '../perf-analyzer.js';
import { densityReport, densityWorkload } from './density.js';
import { PEERS, measuredPoint, startPeer } from './peers.js';

const { values: args } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    only: { type: 'string' },
    concurrency: { type: 'string', default: '1,8,32' },
    servers: { type: 'string', default: 'stowage,triton,mlserver' },
    threads: { type: 'string', default: String(os.availableParallelism()) },
    'triton-resident': { type: 'boolean', default: false },
    edges: { type: 'string', default: 'auto' },
  },
});
const run = promisify(execFile);
const THREADS = Number(args.threads);
const DATE = new Date().toISOString().slice(0, 10);
const OUT = path.join(ROOT, 'docs', 'benchmarks');

// name -> the model (a bundle Stowage serves and whose model.onnx the peers load), its input, rows
// per request, requests per measurement window, and `shm`: when the tensors also go through system
// shared memory, the output's bytes (MLServer has no shared-memory protocol: those points are
// Stowage's and Triton's).
const WORKLOADS = {
  tiny: { model: 'digits', bundle: path.join(ROOT, 'bundles', 'digits'), batch: 1, requests: 2000, maxBatch: 32, what: 'digits MLP (64-32-10), 256 B in' },
  convnet: { model: 'convnet', bundle: path.join(FIXTURES, 'models', 'convnet'), batch: 1, requests: 400, maxBatch: 32, what: 'small ResNet-style convnet, 3x32x32 in' },
  '600KiB': { model: 'echo', bundle: path.join(FIXTURES, 'models', 'echo'), batch: 150, requests: 200, maxBatch: 2048, shm: 150 * 4096, what: 'identity on 150x1024 FP32 (600 KiB in and out)' },
  '8MiB': { model: 'echo', bundle: path.join(FIXTURES, 'models', 'echo'), batch: 2048, requests: 30, maxBatch: 2048, shm: 2048 * 4096, what: 'identity on 2048x1024 FP32 (8 MiB in and out)' },
};
const only = args.only ? args.only.split(',') : [...Object.keys(WORKLOADS), 'density'];
for (const name of only) if (!(name in WORKLOADS) && name !== 'density') throw new Error(`--only: no workload ${name} (there are ${[...Object.keys(WORKLOADS), 'density'].join(', ')})`);
/** The workloads perf_analyzer drives (density drives itself: density.js). */
const perfOnly = only.filter((name) => name in WORKLOADS);
const concurrencies = args.concurrency.split(',').map(Number);
/** The peers' adaptive batching: how long a batch may wait to fill (Stowage runs what is queued, no wait). */
const PEER_BATCH_DELAY_S = 0.0005;

execFileSync('bash', [path.join(ROOT, 'bench', 'peers', 'setup.sh')], { stdio: 'inherit' });
if (perfOnly.length && !existsSync(PERF_ANALYZER)) throw new Error(`perf_analyzer is missing at ${PERF_ANALYZER}: see tools/install-perf-analyzer.sh`);
if (only.includes('density') && !existsSync(GHZ)) throw new Error(`ghz is missing at ${GHZ}: see tools/install-ghz.sh`);

// ---- the servers ----
const temp = tempDir('stowage-peers-');
const bundles = Object.fromEntries(perfOnly.map((w) => [WORKLOADS[w].model, WORKLOADS[w].bundle]));
const repo = makeRepository(temp.dir, bundles);
const EDGES = args.edges === 'auto' ? 'auto' : Number(args.edges);
const stowage = perfOnly.length && await startServer({ model_repo: repo, global: { runtime: { intra_op_threads: THREADS }, endpoints: { edge_threads: EDGES } } }, { root: temp.dir });

// What the peers and the echo need to know of each model, as Stowage describes it.
// keepCase: the client answers with the proto's own (snake_case) field names.
const root = new protobuf.Root().loadSync(path.join(ROOT, 'proto', 'grpc_service.proto'), { keepCase: true });
const ModelConfigResponse = root.lookupType('inference.ModelConfigResponse');
const models = [];
const echoModels = {};
for (const [name, bundle] of Object.entries(bundles)) {
  const metadata = await stowage.client.call('ModelMetadata', { name });
  const { config } = await stowage.client.call('ModelConfig', { name });
  echoModels[name] = { metadata, config };
  const maxBatch = Math.max(...perfOnly.filter((w) => WORKLOADS[w].model === name).map((w) => WORKLOADS[w].maxBatch));
  const tensor = (t) => ({ name: t.name, datatype: t.datatype, shape: t.shape.map(Number) });
  models.push({
    name,
    file: path.join(bundle, 'model.onnx'),
    inputs: metadata.inputs.map(tensor),
    outputs: metadata.outputs.map(tensor),
    max_batch_size: maxBatch,
    max_batch_time: PEER_BATCH_DELAY_S,
    // For MLServer, which has no ModelConfig RPC of its own (mlserver_serve.py).
    model_config: Buffer.from(ModelConfigResponse.encode(ModelConfigResponse.fromObject({ config: { ...config, max_batch_size: maxBatch } })).finish()).toString('base64'),
  });
}
const modelsFile = path.join(temp.dir, 'models.json');
writeFileSync(modelsFile, JSON.stringify(models, null, 2));
const echoFile = path.join(temp.dir, 'echo-models.json');
writeFileSync(echoFile, JSON.stringify(echoModels));

const peerOptions = { modelNames: models.map((m) => m.name), env: { PEER_ORT_THREADS: String(THREADS) } };
const wanted = args.servers.split(',');
const servers = [];
if (stowage) servers.push({ name: 'stowage', address: stowage.address, pid: stowage.child.pid, stop: () => stowage.stop() });
try {
  if (perfOnly.length) {
    if (wanted.includes('triton')) servers.push(await startPeer('triton', 'pytriton', 'pytriton_serve.py', (port, http) => [modelsFile, String(port), String(http)], peerOptions));
    if (wanted.includes('mlserver')) servers.push(await startPeer('mlserver', 'mlserver', 'mlserver_serve.py', (port, http) => [modelsFile, path.join(temp.dir, 'mlserver'), String(port), String(http)], peerOptions));
    servers.push(await startEcho(echoFile, 4 * 2 ** 20));
  }
} catch (err) {
  for (const s of servers) await s.stop();
  throw err;
}

/**
 * How many requests a point's measurement window holds: the workload's count, but no more than
 * about WINDOW_S seconds at the rate this server reached at the last concurrency (so a slow
 * server's points stay short), and never fewer than two per concurrent request. `skip` says why a
 * point would not fit in POINT_MAX_S (perf_analyzer runs up to three windows).
 */
const WINDOW_S = 5;
const POINT_MAX_S = 60;
const lastRate = new Map();
function windowFor(server, name, sharedMemory, concurrency) {
  const workload = WORKLOADS[name];
  const rate = lastRate.get(`${server.name}/${name}/${sharedMemory}`);
  const full = args.quick ? workload.requests / 4 : workload.requests;
  const requests = Math.round(Math.max(concurrency * 2, rate ? Math.min(full, rate * WINDOW_S) : full));
  const skip = rate && (3 * requests) / rate > POINT_MAX_S
    ? `skipped: ${requests} requests at the ${rate.toFixed(1)} req/s of the last point would take over ${POINT_MAX_S} s`
    : undefined;
  return { requests, skip };
}

/** perf_analyzer at one point (bench/perf-analyzer.js; it also reports its own CPU). */
function perfAnalyzerPoint(server, workload, concurrency, sharedMemory, requests) {
  return perfAnalyzer(server.address, {
    model: workload.model,
    batch: workload.batch,
    concurrency,
    requests,
    // Zeros, not perf_analyzer's random bytes: random FP32 bits include NaNs, which MLServer 1.7
    // cannot pack into its answer ("required argument is not a float"). The same data for all.
    inputData: 'zero',
    ...(sharedMemory ? { sharedMemory: 'system', outputBytes: workload.shm } : {}),
  });
}

/** Raw onnxruntime-node in this process: requests/s when each run carries `perRun` requests. */
async function rawOrt(workload, perRun) {
  const session = await ort.InferenceSession.create(path.join(workload.bundle, 'model.onnx'), { intraOpNumThreads: THREADS, extra: { session: { 'intra_op.allow_spinning': '0' } } });
  const meta = models.find((m) => m.name === workload.model);
  const rows = workload.batch * perRun;
  const feeds = Object.fromEntries(meta.inputs.map((t) => {
    const shape = t.shape.map((d, i) => (i === 0 ? rows : d));
    return [t.name, new ort.Tensor('float32', new Float32Array(shape.reduce((a, b) => a * b, 1)).fill(0.5), shape)];
  }));
  for (let i = 0; i < 5; i++) await session.run(feeds);
  const runs = Math.max(5, Math.round(workload.requests / perRun / 4));
  const t0 = performance.now();
  for (let i = 0; i < runs; i++) await session.run(feeds);
  const seconds = (performance.now() - t0) / 1000;
  await session.release();
  return (runs * perRun) / seconds;
}

// ---- measuring ----
const rows = [];
const fmt = (x, digits = 0) => (Number.isFinite(x) ? x.toFixed(digits) : '-');
console.log(`peers bench: ${DATE}, ${os.cpus().length} × ${os.cpus()[0]?.model ?? 'cpu'}, ONNX Runtime threads ${THREADS}`);
try {
  for (const name of perfOnly) {
    const workload = WORKLOADS[name];
    for (const sharedMemory of workload.shm ? [false, true] : [false]) {
      for (const concurrency of concurrencies) {
        const limit = await rawOrt(workload, Math.min(concurrency, Math.floor(workload.maxBatch / workload.batch) || 1));
        rows.push({ workload: name, sharedMemory, concurrency, server: 'raw onnxruntime', rps: limit });
        for (const server of servers) {
          if (sharedMemory && (server.name === 'mlserver' || server.name.startsWith('echo'))) continue;
          const label = `${name.padEnd(8)} ${sharedMemory ? 'shm   ' : 'inline'} c${String(concurrency).padEnd(3)} ${server.name.padEnd(13)}`;
          const { requests, skip } = windowFor(server, name, sharedMemory, concurrency);
          if (skip) {
            rows.push({ workload: name, sharedMemory, concurrency, server: server.name, error: skip });
            console.log(`${label} ${skip}`);
            continue;
          }
          const measure = () => measuredPoint(server.pid, () => perfAnalyzerPoint(server, workload, concurrency, sharedMemory, requests));
          // A point that fails twice is reported as failed, with perf_analyzer's reason; the run goes on.
          const r = await measure()
            .catch(() => measure())
            .catch((err) => ({ error: String(err.stderr || err.message).trim().split('\n').filter((l) => /error/i.test(l)).join(' ').slice(0, 300) || 'failed' }));
          if (!r.error) lastRate.set(`${server.name}/${name}/${sharedMemory}`, r.rps);
          rows.push({ workload: name, sharedMemory, concurrency, server: server.name, ...r });
          if (r.error) console.log(`${label} failed: ${r.error}`);
          else console.log(`${label} ${fmt(r.rps).padStart(7)} req/s  p50 ${fmt(r.p50).padStart(7)} µs  p99 ${fmt(r.p99).padStart(7)} µs  others ${fmt(r.otherCpu * 100)}% of a core`);
        }
      }
    }
  }
} finally {
  for (const server of servers) await server.stop();
  temp.cleanup();
}
let density = null;
if (only.includes('density')) {
  const densityTemp = tempDir('stowage-density-');
  try {
    density = await densityWorkload({ dir: densityTemp.dir, threads: THREADS, requests: args.quick ? 2000 : 6000, servers: wanted, tritonResident: args['triton-resident'] });
  } finally {
    densityTemp.cleanup();
  }
}

// ---- the report ----
const versions = {
  node: process.version,
  'onnxruntime-node': JSON.parse(readFileSync(path.join(ROOT, 'node_modules', 'onnxruntime-node', 'package.json'), 'utf8')).version,
  perf_analyzer: (await run(PERF_ANALYZER, ['--version']).then((r) => r.stdout, () => '')).trim().split('\n').at(-1) || '2.41',
  ...Object.fromEntries(await Promise.all([['pytriton', 'nvidia-pytriton'], ['mlserver', 'mlserver'], ['mlserver', 'onnxruntime']].map(async ([venv, pkg]) => {
    const { stdout } = await run(path.join(PEERS, venv, 'bin', 'pip'), ['show', pkg]).catch(() => ({ stdout: '' }));
    return [`${pkg} (${venv})`, stdout.match(/Version: (.*)/)?.[1] ?? '?'];
  }))),
};
mkdirSync(OUT, { recursive: true });
writeFileSync(path.join(OUT, `${DATE}.json`), JSON.stringify({ date: DATE, machine: machineLine(), threads: THREADS, versions, rows, density }, null, 2));
execFileSync(path.join(PEERS, 'plots', 'bin', 'python'), [path.join(ROOT, 'bench', 'peers', 'plot.py'), path.join(OUT, `${DATE}.json`), OUT], { stdio: 'inherit' });
writeFileSync(path.join(OUT, `${DATE}.md`), report());
// The index's "The latest" line points at this run; the rest of the index (the other benches' pages) stays.
{
  const index = path.join(OUT, 'README.md');
  const latest = `The latest: [${DATE}](${DATE}.md), made by \`node bench/peers/run.js\` (see its header).`;
  const before = existsSync(index) ? readFileSync(index, 'utf8') : '# Benchmarks\n\n';
  writeFileSync(index, /^The latest: .*$/m.test(before) ? before.replace(/^The latest: .*$/m, latest) : `${before.trimEnd()}\n\n${latest}\n`);
}
console.log(`wrote docs/benchmarks/${DATE}.md`);

function machineLine() {
  return `${os.cpus().length} × ${os.cpus()[0]?.model ?? 'cpu'}, ${Math.round(os.totalmem() / 2 ** 30)} GiB, ${os.type()} ${os.release()}`;
}

function report() {
  const lines = [`# Stowage beside Triton and MLServer: ${DATE}`, '',
    `- **Machine:** ${machineLine()}.`,
    `- **Versions:** ${Object.entries(versions).map(([k, v]) => `${k} ${v}`).join(', ')}.`,
    `- **Threads:** every server's ONNX Runtime runs ${THREADS} intra-op threads, which do not spin between runs; Stowage runs one device actor, with \`endpoints.edge_threads: ${args.edges}\`.`,
    `- **What is compared:** Stowage serving each model's ONNX file; Triton's server (the tritonserver binary in nvidia-pytriton) with each model a PyTriton Python model that runs onnxruntime, behind Triton's dynamic batcher (${PEER_BATCH_DELAY_S * 1e6} µs queue delay); MLServer with an onnxruntime runtime (bench/peers/mlserver_onnx.py) and adaptive batching (the same delay); Stowage batches what is queued and never waits. perf_analyzer (async gRPC) drives each. Limits: raw onnxruntime-node in one process (one request per run at concurrency 1, else \`concurrency\` requests per run), and a bare grpc-js echo (tuned windows).`,
    `- **Made by:** \`node bench/peers/run.js${process.argv.slice(2).map((a) => ` ${a}`).join('')}\`. "others" is the CPU that anything but the server and perf_analyzer used during the point, in cores: a noisy point shows there.`, ''];
  for (const name of perfOnly) {
    const workload = WORKLOADS[name];
    for (const sharedMemory of workload.shm ? [false, true] : [false]) {
      lines.push(`## ${name}${sharedMemory ? ', system shared memory' : ''}: ${workload.what}`, '', `![${name}](${DATE}-${name}${sharedMemory ? '-shm' : ''}.png)`, '');
      lines.push('| concurrency | server | req/s | p50 µs | p99 µs | others (cores) | Stowage ÷ this |', '| --- | --- | --- | --- | --- | --- | --- |');
      for (const concurrency of concurrencies) {
        const here = rows.filter((r) => r.workload === name && r.sharedMemory === sharedMemory && r.concurrency === concurrency);
        const mine = here.find((r) => r.server === 'stowage');
        for (const r of here) {
          if (r.error) lines.push(`| ${concurrency} | ${r.server} | ${r.error.startsWith('skipped') ? '' : 'failed: '}${r.error.replace(/\|/g, '/')} | | | | |`);
          else lines.push(`| ${concurrency} | ${r.server} | ${fmt(r.rps)} | ${fmt(r.p50)} | ${fmt(r.p99)} | ${fmt(r.otherCpu, 2)} | ${r.server === 'stowage' ? '' : fmt(mine?.rps / r.rps, 2)} |`);
        }
      }
      lines.push('');
    }
  }
  if (density) lines.push(...densityReport(density, DATE));
  return lines.join('\n');
}
