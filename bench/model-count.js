// How many models a device holds: what a loaded model costs beside its weights (issue 61). Sessions
// shared by graph, activations from one arena (runtime.share_sessions, runtime.share_activations,
// the defaults) against one session per model with an arena of its own (both false: the design
// before), on backend cpu.
//
// (a) ResNet-50s on one device, N of them loaded, each called at batch 1, 8 and 32 (the same
//     traffic whatever N; every answer checked against its own model run alone): the server's
//     RSS, and per extra model (RSS_N - RSS_1 - the growth of host weight bytes) / (N - 1), for
//     both runtime.thread_pool values, with
//       - one graph: variants with weights of their own (every tensor scaled by a factor of the
//         model's, the head's by 1 + i/N, so that another model's answer is off by at least 1/N);
//       - a graph each: the backbone shared, a classifier head of its own size (1000 + i classes).
// (b) A catalog of fine-tune-style variants over ten architectures (tools/make_catalog_models.py:
//     five MLPs and five small convnets, 1-20 MB each), a weight budget of 10% of the catalog's
//     distinct bytes, Zipf(1.0) from CLIENTS clients for SECONDS: time to READY for all, RSS,
//     sessions opened, throughput, p50/p99, and a cold call's time split into its session's open and
//     its weights' copy; every answer checked against its own model's. Runs: sessions shared (the
//     defaults) at the full catalog, one session per model with no budget at the largest count it
//     fits (--unshared-catalog), the shared one at that count too, and the shared one under a session
//     budget (four sessions' worth) to show the reopens; the runs interleaved, --repeat rounds.
//
//   npm run build && node bench/model-count.js [--part a,b] [--counts 1,10,50] [--unshared-max 10]
//        [--catalog 1000] [--unshared-catalog 1000] [--repeat 2] [--seconds 30] [--clients 8]
//        [--thread-pools per_session,process] [--backend cpu|cuda] [--shared-arena on|off] [--work DIR]
//
// --backend cuda (bench/gpu-check.sh's `sessions` step): part (a) on GPU 0, weights in a 512 MiB
// arena of GPU memory; beside the RSS, the GPU's memory in use (nv_gpu_memory_used_bytes) and per
// extra model (GPU_N - GPU_1) / (N - 1); runtime.cuda.shared_arena for the shared design as
// --shared-arena says (on by default), tf32 off (answers checked against the CPU's).
//
// --work DIR keeps the generated models, the compile cache and the references across invocations.
// Disk: (a) about 2 x 50 x 97 MiB for the models and their compiled copies; (b) about 8 GiB.
// Memory: (a)'s one-graph run at N = 50 holds 50 x 97 MiB of weights in host RAM; the design before
// is measured up to --unshared-max models (each then holds ~270 MB of activations of its own).
import { execFileSync } from 'node:child_process';
import { existsSync, linkSync, mkdirSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { InferenceClient } from '../dist/client/client.js';
import { hostOutput, OrtSession } from '../dist/native/ort.js';
import { readFields, WIRE_LEN } from '../dist/shared/protobuf-wire.js';
import { relativeL2 } from '../test/helpers/checks.js';
import { random } from '../test/helpers/mlp-catalog.js';
import { metric, ROOT, scrapeMetrics, startServer, tempDir } from '../test/helpers/server.js';
import { benchPython, makeBenchModels } from './bench-models.js';
import { percentile } from './timing.js';

const { values: opts } = parseArgs({
  options: {
    part: { type: 'string', default: 'a,b' },
    counts: { type: 'string', default: '1,10,50' },
    'unshared-max': { type: 'string', default: '10' },
    catalog: { type: 'string', default: '1000' },
    'unshared-catalog': { type: 'string', default: '1000' },
    repeat: { type: 'string', default: '2' },
    seconds: { type: 'string', default: '30' },
    clients: { type: 'string', default: '8' },
    'thread-pools': { type: 'string', default: 'per_session,process' },
    work: { type: 'string' },
    backend: { type: 'string', default: 'cpu' },
    'shared-arena': { type: 'string', default: 'on' },
  },
});
const BACKEND = opts.backend;
if (BACKEND !== 'cpu' && BACKEND !== 'cuda') throw new Error(`--backend ${BACKEND}: cpu or cuda`);
const PARTS = opts.part.split(',');
const COUNTS = opts.counts.split(',').map(Number);
const MAX_N = Math.max(...COUNTS);
const UNSHARED_MAX = Number(opts['unshared-max']);
const CATALOG = Number(opts.catalog);
const UNSHARED_CATALOG = Math.min(CATALOG, Number(opts['unshared-catalog']));
const REPEAT = Number(opts.repeat);
const SECONDS = Number(opts.seconds);
const CLIENTS = Number(opts.clients);
const POOLS = /** @type {('per_session' | 'process')[]} */ (opts['thread-pools'].split(','));
const TOLERANCE = 1e-3; // relative L2 to the model's own answer; another model's is off by far more

const work = opts.work ? { dir: path.resolve(opts.work), cleanup: () => {} } : tempDir('stowage-bench-model-count-');
mkdirSync(work.dir, { recursive: true });
const MiB = 2 ** 20;
const mb = (/** @type {number} */ bytes) => (bytes / 1e6).toFixed(1);
const rssOf = (/** @type {number | undefined} */ pid) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) * 1024;

/** The two designs: sessions and activations shared (the defaults), or one session per model with an arena of its own. */
const DESIGNS = {
  shared: { share_sessions: true, share_activations: true, ...(BACKEND === 'cuda' ? { cuda: { shared_arena: opts['shared-arena'] === 'on' } } : {}) },
  unshared: { share_sessions: false, share_activations: false, ...(BACKEND === 'cuda' ? { cuda: { shared_arena: false } } : {}) },
};

/** The weight budget on the device: the CPU device's memory, or (cuda) the GPU arena's bytes; tf32 off on a GPU. */
const deviceRuntime = (/** @type {number} */ bytes, /** @type {Record<string, unknown>} */ design) => (BACKEND === 'cuda'
  ? { ...design, backend: 'cuda', cuda: { .../** @type {{ cuda?: object }} */ (design).cuda, tf32: false, weight_cache_bytes: bytes } }
  : { ...design, cpu_device_memory_bytes: bytes });

/** A repository of the first `n` bundles of `source` (their files hard-linked: the scan follows no symbolic link), made once. */
function subset(/** @type {string} */ source, /** @type {string[]} */ names, /** @type {number} */ n) {
  const dir = path.join(work.dir, 'subsets', `${path.basename(source)}-${n}`);
  if (!existsSync(dir)) {
    for (const name of names.slice(0, n)) {
      mkdirSync(path.join(dir, name), { recursive: true });
      for (const file of readdirSync(path.join(source, name))) linkSync(path.join(source, name, file), path.join(dir, name, file));
    }
  }
  return dir;
}

/** Start a server on `repo` and wait until `n` models are READY; the seconds that took. */
async function serve(/** @type {string} */ repo, /** @type {number} */ n, /** @type {Record<string, unknown>} */ runtime, /** @type {string} */ label) {
  const root = path.join(work.dir, 'runs', label.replace(/\W+/g, '-'));
  rmSync(root, { recursive: true, force: true });
  mkdirSync(root, { recursive: true });
  const started = performance.now();
  const server = await startServer({ model_repo: repo, cache_dir: path.join(work.dir, 'cache'), global: { runtime: { weight_cache_wiggle_fraction: 0, mem_fraction: 1, ...runtime } } }, { root });
  for (;;) {
    const index = await server.client.call('RepositoryIndex', { ready: true });
    if (index.models.length >= n) break;
    await new Promise((r) => setTimeout(r, 250));
  }
  return { server, readySeconds: (performance.now() - started) / 1000 };
}

/** The model file run alone, weights embedded, in a session of its own: its answer to `input`. */
function ownAnswer(/** @type {string} */ file, /** @type {string} */ name, /** @type {number[]} */ dims, /** @type {Float32Array} */ input) {
  const s = OrtSession.open(file, { graphOptimizationLevel: 'all', intraOpThreads: 0, allowSpinning: false, logSeverityLevel: 3 });
  try {
    const [out] = s.runSync([{ name, type: 1, dims, data: input }], [s.outputs[0].name]);
    const data = hostOutput(out).data;
    return new Float32Array(data.buffer.slice(data.byteOffset, data.byteOffset + data.byteLength));
  } finally {
    s.release();
  }
}

/**
 * References kept in the work directory: each model's answer, by name and by its file's
 * modification time (a model written again gets a new reference).
 */
function references(/** @type {string} */ file, /** @type {string[]} */ names, /** @type {(name: string) => string} */ modelFile, /** @type {(name: string) => Float32Array} */ compute) {
  const kept = existsSync(file) ? JSON.parse(readFileSync(file, 'utf8')) : {};
  const keyOf = (/** @type {string} */ n) => `${n} ${statSync(modelFile(n)).mtimeMs}`;
  let added = false;
  for (const n of names) {
    if (kept[keyOf(n)]) continue;
    kept[keyOf(n)] = [...compute(n)];
    added = true;
  }
  if (added) writeFileSync(file, JSON.stringify(kept));
  return new Map(names.map((n) => [n, Float32Array.from(kept[keyOf(n)])]));
}

// ---------------------------------------------------------------------------------------------
// (a) ResNet-50s

/** The float initializers stored as raw_data (ModelProto.graph 7 -> initializer 5 -> TensorProto: data_type 2, name 8, raw_data 9). */
function floatWeights(/** @type {Uint8Array} */ model) {
  const graph = readFields(model).find((f) => f.field === 7 && f.wireType === WIRE_LEN);
  if (!graph) throw new Error('the base model has no graph');
  return readFields(graph.payload).filter((f) => f.field === 5).map((init) => {
    const fields = readFields(init.payload);
    const raw = fields.find((f) => f.field === 9 && f.wireType === WIRE_LEN);
    const name = new TextDecoder().decode(fields.find((f) => f.field === 8)?.payload);
    return fields.find((f) => f.field === 2)?.varint === 1 && raw ? { name, offset: raw.payload.byteOffset - model.byteOffset, length: raw.payload.length } : null;
  }).filter((w) => w !== null);
}

/** `count` copies of the base bundle with every tensor scaled: one graph, weights of their own. */
function oneGraphVariants(/** @type {string} */ base, /** @type {string} */ dir, /** @type {number} */ count) {
  const names = Array.from({ length: count }, (_, i) => `r${String(i).padStart(3, '0')}`);
  if (existsSync(path.join(dir, names[count - 1], 'manifest.yaml'))) return names;
  const model = readFileSync(path.join(base, 'model.onnx'));
  const weights = floatWeights(model);
  const copy = Buffer.alloc(model.length);
  names.forEach((name, i) => {
    model.copy(copy);
    for (const w of weights) {
      const view = new DataView(copy.buffer, copy.byteOffset + w.offset, w.length);
      const factor = w.name.startsWith('fc_') ? 1 + i / count : 1 + 1e-6 * (i + 1);
      for (let at = 0; at < w.length; at += 4) view.setFloat32(at, view.getFloat32(at, true) * factor, true);
    }
    mkdirSync(path.join(dir, name), { recursive: true });
    writeFileSync(path.join(dir, name, 'model.onnx'), copy);
    writeFileSync(path.join(dir, name, 'manifest.yaml'), readFileSync(path.join(base, 'manifest.yaml')));
  });
  return names;
}

const IMAGE = Float32Array.from({ length: 3 * 224 * 224 }, (_, i) => Math.sin(i * 0.001));
/** `rows` copies of the image: every row's answer is the model's answer to it. */
const images = (/** @type {number} */ rows) => {
  const x = new Float32Array(rows * IMAGE.length);
  for (let r = 0; r < rows; r++) x.set(IMAGE, r * IMAGE.length);
  return x;
};

async function partA() {
  const generated = path.join(work.dir, 'generated');
  if (!existsSync(path.join(generated, 'resnet50', 'model.onnx'))) makeBenchModels(generated, ['resnet50'], { quiet: true });
  const base = path.join(generated, 'resnet50');
  const oneDir = path.join(work.dir, 'one-graph');
  const headsDir = path.join(work.dir, 'heads');
  const one = oneGraphVariants(base, oneDir, MAX_N);
  const heads = Array.from({ length: MAX_N }, (_, i) => `h${String(i).padStart(3, '0')}`);
  if (!existsSync(path.join(headsDir, heads[MAX_N - 1], 'manifest.yaml'))) {
    execFileSync(benchPython(), [path.join(ROOT, 'tools', 'make_catalog_models.py'), 'heads', base, headsDir, String(MAX_N)], { stdio: 'inherit' });
  }
  console.log('(a) the references: each model run alone, weights embedded (kept in the work directory)');
  const kinds = [
    { label: 'one graph', dir: oneDir, names: one, refs: references(path.join(work.dir, 'one-graph.json'), one, (n) => path.join(oneDir, n, 'model.onnx'), (n) => ownAnswer(path.join(oneDir, n, 'model.onnx'), 'image', [1, 3, 224, 224], IMAGE)) },
    { label: 'a graph each', dir: headsDir, names: heads, refs: references(path.join(work.dir, 'heads.json'), heads, (n) => path.join(headsDir, n, 'model.onnx'), (n) => ownAnswer(path.join(headsDir, n, 'model.onnx'), 'image', [1, 3, 224, 224], IMAGE)) },
  ];
  console.log(`\n(a) ResNet-50s on one ${BACKEND === 'cuda' ? 'GPU' : 'CPU device'} (97 MiB of weights each), each called at batch 1, 8 and 32; weight budget 512 MiB; ${new Date().toISOString().slice(0, 10)}, Node ${process.versions.node}\n`);
  /** @type {string[]} */
  const rows = [];
  for (const kind of kinds) {
    // The compile cache filled first, in a server of its own: a compile's memory is the compiler
    // thread's, and glibc keeps what it freed, which would count against the first run measured.
    const compiling = await serve(subset(kind.dir, kind.names, MAX_N), MAX_N, deviceRuntime(512 * MiB, DESIGNS.shared), `a ${kind.label} compile`);
    console.log(`  ${kind.label}: ${MAX_N} models compiled and loaded in ${compiling.readySeconds.toFixed(0)} s`);
    await compiling.server.stop();
    for (const pool of POOLS) {
      for (const [design, settings] of Object.entries(DESIGNS)) {
        /** @type {{ n: number, rss: number, host: number, gpu: number }[]} */
        const points = [];
        for (const n of COUNTS) {
          if (design === 'unshared' && n > UNSHARED_MAX) continue;
          const label = `a ${kind.label} ${pool} ${design} ${n}`;
          const { server } = await serve(subset(kind.dir, kind.names, n), n, { ...deviceRuntime(512 * MiB, settings), thread_pool: pool }, label);
          try {
            let wrong = 0;
            // The same traffic whatever N (MAX_N rounds of batch 1, 8 and 32, over the N models in
            // turn), so that what the traffic itself leaves in the process (buffers not yet
            // collected, the heap's high-water marks) is alike in every run, and the RSS difference
            // is the models'.
            for (let call = 0; call < MAX_N; call++) {
              const name = kind.names[call % n];
              for (const batch of [1, 8, 32]) {
                const reply = await server.client.infer(name, [{ name: 'image', datatype: 'FP32', shape: [batch, 3, 224, 224], data: images(batch) }]);
                const y = /** @type {Float32Array} */ (reply.outputs[0].data);
                const want = /** @type {Float32Array} */ (kind.refs.get(name));
                for (let r = 0; r < batch; r++) if (relativeL2(y.subarray(r * want.length, (r + 1) * want.length), want) > TOLERANCE) wrong++;
              }
            }
            await new Promise((r) => setTimeout(r, 2000));
            const m = await scrapeMetrics(/** @type {number} */ (server.adminPort));
            const point = { n, rss: rssOf(server.child.pid), host: (m.stowage_weight_cache_host_bytes ?? 0), gpu: Object.entries(m).filter(([k]) => k.startsWith('nv_gpu_memory_used_bytes')).reduce((sum, [, v]) => sum + v, 0) };
            points.push(point);
            const sessions = metric(m, 'stowage_device_session_graphs', 'device="0"');
            console.log(`  ${label}: RSS ${mb(point.rss)} MB, host weights ${mb(point.host)} MB${BACKEND === 'cuda' ? `, GPU in use ${mb(point.gpu)} MB` : ''}, ${sessions} session(s), ${wrong} wrong of ${MAX_N * 41} answers`);
            if (wrong) throw new Error(`${label}: ${wrong} answers were not their model's`);
          } finally {
            await server.stop();
          }
        }
        const first = points.find((p) => p.n === 1);
        for (const p of points) {
          if (!first || p.n === 1) continue;
          const perExtra = (p.rss - first.rss - (p.host - first.host)) / (p.n - 1);
          const gpu = BACKEND === 'cuda' ? ` ${mb(p.gpu)} | **${mb((p.gpu - first.gpu) / (p.n - 1))}** |` : '';
          rows.push(`| ${kind.label} | ${pool} | ${design === 'shared' ? 'shared (new)' : 'one per model (before)'} | ${p.n} | ${mb(p.rss)} | ${mb(p.host - first.host)} | **${mb(perExtra)}** | ${mb((p.rss - first.rss) / (p.n - 1))} |${gpu}`);
        }
      }
    }
  }
  const gpuColumns = BACKEND === 'cuda' ? ' GPU in use MB | GPU per extra model MB |' : '';
  console.log(`\n| models | thread_pool | sessions | N | RSS_N MB | host weights grown MB | per extra model beyond its weights, MB | per extra model with its weights, MB |${gpuColumns}`);
  console.log(`| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |${BACKEND === 'cuda' ? ' ---: | ---: |' : ''}`);
  for (const r of rows) console.log(r);
  console.log('(the goals: one graph, at most 5 MB beyond its weights; a graph each, at most 25 MB with its weights: its head, 8 MB)');
}

// ---------------------------------------------------------------------------------------------
// (b) A catalog

async function partB() {
  const repo = path.join(work.dir, 'catalog');
  const listing = path.join(work.dir, 'catalog.json');
  if (!existsSync(listing) || Object.keys(JSON.parse(readFileSync(listing, 'utf8'))).length < CATALOG) {
    rmSync(repo, { recursive: true, force: true });
    execFileSync(benchPython(), [path.join(ROOT, 'tools', 'make_catalog_models.py'), 'catalog', repo, String(CATALOG)], { stdio: 'inherit' });
  }
  /** @type {Record<string, { arch: number, input: string, shape: number[] }>} */
  const models = JSON.parse(readFileSync(listing, 'utf8'));
  const names = Object.keys(models).sort((a, b) => Number(a.slice(a.indexOf('v') + 1)) - Number(b.slice(b.indexOf('v') + 1)) || a.localeCompare(b)).slice(0, CATALOG);
  // One input per architecture, deterministic.
  const inputs = new Map(names.map((n) => {
    const next = random(1 + models[n].arch);
    const size = models[n].shape.reduce((a, b) => a * b, 1);
    return [n, Float32Array.from({ length: size }, () => next() * 2 - 1)];
  }));
  console.log(`(b) the references: ${names.length} models run alone (kept in the work directory)`);
  const refs = references(path.join(work.dir, 'catalog-references.json'), names, (n) => path.join(repo, n, 'model.onnx'), (n) => ownAnswer(path.join(repo, n, 'model.onnx'), models[n].input, [1, ...models[n].shape], /** @type {Float32Array} */ (inputs.get(n))));

  // The compile cache filled once, and the catalog's distinct weight bytes read (its host RAM once every model is loaded).
  const compiling = await serve(subset(repo, names, CATALOG), CATALOG, { ...DESIGNS.shared, cpu_device_memory_bytes: 64 * MiB }, 'b compile');
  const distinct = (await scrapeMetrics(/** @type {number} */ (compiling.server.adminPort))).stowage_weight_cache_host_bytes ?? 0;
  await compiling.server.stop();
  const budget = Math.floor(distinct / 10 / 64) * 64;
  console.log(`\n(b) a catalog of ${CATALOG} models over 10 architectures (1-20 MB each), ${mb(distinct)} MB of distinct weights (the compile cache filled in ${compiling.readySeconds.toFixed(0)} s); weight budget ${mb(budget)} MB (10%); Zipf(1.0) from ${CLIENTS} clients for ${SECONDS} s at batch 1; every answer checked; ${new Date().toISOString().slice(0, 10)}\n`);

  const cumulative = /** @type {number[]} */ ([]);
  const round = [
    { label: 'sessions shared', n: CATALOG, runtime: DESIGNS.shared },
    { label: 'one per model, no budget', n: UNSHARED_CATALOG, runtime: DESIGNS.unshared },
    ...(UNSHARED_CATALOG < CATALOG ? [{ label: 'sessions shared', n: UNSHARED_CATALOG, runtime: DESIGNS.shared }] : []),
    { label: 'sessions shared, budget of 4 sessions', n: CATALOG, runtime: { ...DESIGNS.shared, session_budget_bytes: -1 } },
  ];
  // The runs interleaved, REPEAT rounds: this machine's speed drifts by more than the designs differ.
  const runs = Array.from({ length: REPEAT }, () => round).flat();
  /** @type {string[]} */
  const rows = [];
  for (const run of runs) {
    const served = names.slice(0, run.n);
    cumulative.length = 0;
    served.reduce((sum, _, k) => (cumulative[k] = sum + 1 / (k + 1)), 0);
    let runtime = run.runtime;
    if (runtime.session_budget_bytes === -1) {
      // Four of the catalog's sessions' worth: their bytes as measured by the shared run.
      const perSession = lastSessionBytes > 0 ? lastSessionBytes : 4 * MiB;
      runtime = { ...runtime, session_budget_bytes: Math.max(1, Math.round(4 * perSession)) };
    }
    const { server, readySeconds } = await serve(subset(repo, names, run.n), run.n, { ...runtime, cpu_device_memory_bytes: budget }, `b ${run.label} ${run.n}`);
    const clients = Array.from({ length: CLIENTS }, () => new InferenceClient(server.address));
    try {
      const before = await scrapeMetrics(/** @type {number} */ (server.adminPort));
      /** @type {number[]} */
      const latencies = [];
      let wrong = 0;
      let failed = 0;
      const until = performance.now() + SECONDS * 1000;
      await Promise.all(clients.map(async (c, i) => {
        const next = random(100 + i);
        while (performance.now() < until) {
          const name = served[cumulative.findIndex((v) => v >= next() * cumulative[served.length - 1])];
          const m = models[name];
          const t0 = performance.now();
          try {
            const reply = await c.infer(name, [{ name: m.input, datatype: 'FP32', shape: [1, ...m.shape], data: /** @type {Float32Array} */ (inputs.get(name)) }]);
            latencies.push(performance.now() - t0);
            if (relativeL2(/** @type {Float32Array} */ (reply.outputs[0].data), /** @type {Float32Array} */ (refs.get(name))) > TOLERANCE) wrong++;
          } catch (err) {
            failed++;
            if (failed < 5) console.log(`    ${name}: ${/** @type {Error} */ (err).message}`);
          }
        }
      }));
      const m = await scrapeMetrics(/** @type {number} */ (server.adminPort));
      const delta = (/** @type {string} */ name, /** @type {string | undefined} */ labels) => metric(m, name, labels) - metric(before, name, labels);
      const sumOver = (/** @type {string} */ name) => served.reduce((s, n) => s + delta(name, `model="${n}"`), 0);
      const misses = sumOver('stowage_weight_cache_misses_total');
      const copySeconds = sumOver('stowage_weight_cache_load_seconds_total');
      const reopens = delta('stowage_device_session_opens_total', 'device="0",reason="reopen"');
      const reopenSeconds = delta('stowage_device_session_reopen_seconds_total', 'device="0"');
      const opened = metric(m, 'stowage_device_session_opens_total', 'device="0",reason="load"') + metric(m, 'stowage_device_session_opens_total', 'device="0",reason="reopen"');
      const sessionBytes = metric(m, 'stowage_device_session_bytes', 'device="0"');
      const graphs = metric(m, 'stowage_device_session_graphs', 'device="0"');
      if (run.runtime === DESIGNS.shared && graphs > 0) lastSessionBytes = sessionBytes / graphs;
      const rss = rssOf(server.child.pid);
      const throughput = latencies.length / SECONDS;
      rows.push(`| ${run.label} | ${run.n} | ${readySeconds.toFixed(0)} | ${mb(rss)} | ${opened} (${reopens} reopens) | ${throughput.toFixed(0)} | ${percentile(latencies, 0.5).toFixed(1)} / ${percentile(latencies, 0.99).toFixed(1)} | ${reopens ? (1000 * reopenSeconds / reopens).toFixed(1) : '-'} / ${misses ? (1000 * copySeconds / misses).toFixed(2) : '-'} | ${wrong} / ${failed} |`);
      console.log(`  ${run.label} at ${run.n}: ready in ${readySeconds.toFixed(0)} s, RSS ${mb(rss)} MB, ${latencies.length} answers, ${wrong} wrong, ${failed} failed, ${graphs} distinct sessions`);
    } finally {
      clients.forEach((c) => c.close());
      await server.stop();
    }
  }
  console.log('\n| run | models | READY s | RSS MB | sessions opened | req/s | p50 / p99 ms | cold call: session open / weight copy, ms each | wrong / failed |');
  console.log('| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |');
  for (const r of rows) console.log(r);
}

let lastSessionBytes = 0;
try {
  if (PARTS.includes('a')) await partA();
  if (PARTS.includes('b')) {
    if (BACKEND === 'cuda') throw new Error('--part b runs on backend cpu only');
    await partB();
  }
} finally {
  work.cleanup();
}
