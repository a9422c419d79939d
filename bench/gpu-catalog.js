// A catalog at the seeds' scale (issue 46): N ResNet-50-class models with weights of their own, a
// weight budget of 1/RATIO of the catalog, Zipf(1.0) over the models, CLIENTS clients through gRPC
// with their input in system shared memory (so the front end is not what is measured), SECONDS of
// traffic. Three runs over the same traffic:
//   - all resident: a budget that holds the whole catalog (the figure to be within);
//   - 1/RATIO, uploads beside execution (runtime.upload_beside_execution, the default);
//   - 1/RATIO, each cold model's weights copied at its turn (the switch off).
// Each reports throughput, p50 and p99, cold loads per second, the upload rate (bytes copied over
// the seconds the copies took, waited for or hidden), the share of copy time hidden beside other
// models' runs, the time from start until all N models are READY, and the server's resident memory.
// The goal on a GPU: throughput at least 0.9x all-resident's and p99 at most 2x.
//
// The models: tools/make_bench_models.py's resnet50 (97 MiB of weights, 3x224x224 -> 1000 scores),
// then copied N times here with every weight tensor scaled by a factor of the model's own: no tensor
// in common (the weight cache shares identical tensors), and the last layer's factor (1 + i/N) makes
// each model's scores its own, so one answer in CHECK_EVERY is checked against that model's first
// answer (a model served another's weights would be off by at least 1/N).
//
//   npm run build && node bench/gpu-catalog.js [--backend cuda|cpu] [--models 150] [--seconds 60]
//        [--clients 32] [--ratio 10] [--runs all,beside,at-turn] [--gpus 0 | 0,0] [--shared-arena on|off]
//        [--work DIR]
//
// --work DIR keeps the catalog, the compile cache, each model's reference answer and every run's
// figures in DIR, so that the runs can be split over several invocations (a GPU lent for ten
// minutes a call: 150 models' starts do not fit one) and the last prints them all with the ratios.
// A later invocation with other --models, --ratio, --gpus, --clients, --seconds or --backend
// starts DIR afresh.
// --backend cpu is how the bench is checked without a GPU (e.g. --models 8 --seconds 10 --clients 4).
// Disk: the models and their compiled copies take about 2 x N x 97 MiB under the temporary directory.
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { InferenceClient } from '../dist/client/client.js';
import { createRegion, destroyRegion, writeRegion } from '../dist/client/shared-memory.js';
import { gpuReport, loadCuda } from '../dist/native/cuda.js';
import { readFields, WIRE_LEN } from '../dist/shared/protobuf-wire.js';
import { relativeL2 } from '../test/helpers/checks.js';
import { random } from '../test/helpers/mlp-catalog.js';
import { makeRepository, metric, scrapeMetrics, startServer, tempDir } from '../test/helpers/server.js';
import { image, percentile } from './timing.js';
import { makeBenchModels } from './bench-models.js';

const { values: opts } = parseArgs({
  options: {
    backend: { type: 'string', default: 'cuda' },
    models: { type: 'string', default: '150' },
    seconds: { type: 'string', default: '60' },
    clients: { type: 'string', default: '32' },
    ratio: { type: 'string', default: '10' },
    runs: { type: 'string', default: 'all,beside,at-turn' },
    // The node file's gpus: '0,0' puts two device actors on GPU 0, each with half of every budget.
    gpus: { type: 'string', default: '0' },
    // runtime.cuda.shared_arena: each session's own ONNX Runtime arena keeps the most its runs took
    // (911 MiB for a warmed ResNet-50 on an H200), so 150 of them would not fit a GPU's memory.
    'shared-arena': { type: 'string', default: 'on' },
    work: { type: 'string' },
  },
});
const backend = opts.backend;
if (backend !== 'cuda' && backend !== 'cpu') throw new Error(`--backend ${backend}: cuda or cpu`);
const MODELS = Number(opts.models);
const SECONDS = Number(opts.seconds);
const CLIENTS = Number(opts.clients);
const RATIO = Number(opts.ratio);
const RUNS = opts.runs.split(',');
const GPUS = opts.gpus.split(',').map(Number);
const CHECK_EVERY = 20;
// Each device actor's share of the tight budget must hold one model with room to spare (its
// alignment and the arena's slack), or the first request fails RESOURCE_EXHAUSTED minutes in.
if (MODELS / RATIO / GPUS.length < 1.2) {
  throw new Error(`--models ${MODELS} --ratio ${RATIO} over ${GPUS.length} device actor(s) leaves each ${(MODELS / RATIO / GPUS.length).toFixed(2)} models' weights; ` +
    `it needs at least 1.2: more models (at least ${Math.ceil(1.2 * RATIO * GPUS.length)}) or a smaller --ratio`);
}
const ZIPF_SEED = 46;

const mib = (/** @type {number} */ bytes) => (bytes / 2 ** 20).toFixed(0);

/**
 * The byte ranges of a model's float initializers stored as raw_data (ModelProto.graph 7 ->
 * GraphProto.initializer 5 -> TensorProto: data_type 2, name 8, raw_data 9), in the file's bytes.
 * @param {Uint8Array} model
 */
function floatWeights(model) {
  const graph = readFields(model).find((f) => f.field === 7 && f.wireType === WIRE_LEN);
  if (!graph) throw new Error('the base model has no graph');
  return readFields(graph.payload).filter((f) => f.field === 5).map((init) => {
    const fields = readFields(init.payload);
    const raw = fields.find((f) => f.field === 9 && f.wireType === WIRE_LEN);
    const type = fields.find((f) => f.field === 2)?.varint;
    const name = new TextDecoder().decode(fields.find((f) => f.field === 8)?.payload);
    return type === 1 && raw ? { name, offset: raw.payload.byteOffset - model.byteOffset, length: raw.payload.length } : null;
  }).filter((w) => w !== null);
}

/** Write the catalog's bundles r000.. under `dir` from the base bundle; their weight bytes in all. */
function writeCatalog(/** @type {string} */ base, /** @type {string} */ dir) {
  const model = readFileSync(path.join(base, 'model.onnx'));
  const manifest = readFileSync(path.join(base, 'manifest.yaml'));
  const weights = floatWeights(model);
  const copy = Buffer.alloc(model.length);
  for (let i = 0; i < MODELS; i++) {
    model.copy(copy);
    for (const w of weights) {
      // Scaled in place; raw_data offsets need not be 4-byte aligned, so through a DataView.
      const view = new DataView(copy.buffer, copy.byteOffset + w.offset, w.length);
      const factor = w.name.startsWith('fc_') ? 1 + i / MODELS : 1 + 1e-6 * (i + 1);
      for (let at = 0; at < w.length; at += 4) view.setFloat32(at, view.getFloat32(at, true) * factor, true);
    }
    const bundle = path.join(dir, `r${String(i).padStart(3, '0')}`);
    mkdirSync(bundle, { recursive: true });
    writeFileSync(path.join(bundle, 'model.onnx'), copy);
    writeFileSync(path.join(bundle, 'manifest.yaml'), manifest);
  }
  return weights.reduce((sum, w) => sum + w.length, 0);
}

const temp = opts.work ? { dir: path.resolve(opts.work), cleanup: () => {} } : tempDir('stowage-bench-catalog-');
// What a kept DIR must match to be reused; anything else starts it afresh.
const shape = { backend, models: MODELS, ratio: RATIO, gpus: GPUS, clients: CLIENTS, seconds: SECONDS, sharedArena: opts['shared-arena'] };
const shapeFile = path.join(temp.dir, 'catalog.json');
const kept = opts.work !== undefined && existsSync(shapeFile) && JSON.stringify(JSON.parse(readFileSync(shapeFile, 'utf8')).shape) === JSON.stringify(shape);
if (opts.work && !kept) rmSync(temp.dir, { recursive: true, force: true });
mkdirSync(temp.dir, { recursive: true });
if (backend === 'cuda') loadCuda();
const gpu = backend === 'cuda' ? gpuReport().gpus[0] : null;
let started = performance.now();
const repo = path.join(temp.dir, 'repo');
/** @type {number} */
let modelBytes;
if (kept) {
  modelBytes = JSON.parse(readFileSync(shapeFile, 'utf8')).modelBytes;
} else {
  makeBenchModels(path.join(temp.dir, 'generated'), ['resnet50']);
  modelBytes = writeCatalog(path.join(temp.dir, 'generated', 'resnet50'), repo);
  writeFileSync(shapeFile, JSON.stringify({ shape, modelBytes }));
}
const catalogBytes = MODELS * modelBytes;
const names = Array.from({ length: MODELS }, (_, i) => `r${String(i).padStart(3, '0')}`);
console.log(`${new Date().toISOString().slice(0, 10)}, backend ${backend}, ${gpu ? `${gpu.name} (${(gpu.memoryTotalBytes / 2 ** 30).toFixed(0)} GiB)` : 'the CPU device'}, Node ${process.versions.node}`);
console.log(`${GPUS.length} device actor(s)${backend === 'cuda' ? ` on GPU(s) ${GPUS.join(', ')}, shared arena ${opts['shared-arena']}` : ''}; ${MODELS} ResNet-50-class models of ${mib(modelBytes)} MiB, ${(catalogBytes / 2 ** 30).toFixed(1)} GiB in all (${kept ? `kept in ${temp.dir}` : `written in ${((performance.now() - started) / 1000).toFixed(0)} s`}); Zipf(1.0) from ${CLIENTS} clients for ${SECONDS} s, batch 1, input in system shared memory; 1 in ${CHECK_EVERY} answers checked\n`);

// Zipf(1.0) over the catalog: rank k with probability proportional to 1/k. Each run replays the same sequence per client.
const cumulative = [];
names.reduce((sum, _, k) => (cumulative[k] = sum + 1 / (k + 1)), 0);
const zipf = (/** @type {() => number} */ next) => names[cumulative.findIndex((c) => c >= next() * cumulative[MODELS - 1])];

const x = image(1);
// The budget is the node's: with several device actors each holds its share.
const runtime = (/** @type {number} */ budget, /** @type {boolean} */ beside) => ({
  upload_beside_execution: beside,
  ...(backend === 'cuda'
    ? { backend: 'cuda', cuda: { tf32: false, weight_cache_bytes: Math.floor(budget / GPUS.length), shared_arena: opts['shared-arena'] === 'on' } }
    : { cpu_device_memory_bytes: Math.floor(budget / GPUS.length), mem_fraction: 1, weight_cache_wiggle_fraction: 0 }),
});
// One compile cache for every run: the first start compiles the catalog, the others read it.
const cacheDir = path.join(temp.dir, 'cache');
/** @type {Map<string, Float32Array>} each model's first answer (kept in a --work DIR for later invocations) */
const reference = new Map();
const referenceFile = path.join(temp.dir, 'references.bin');
const SCORES = 1000;
if (kept && existsSync(referenceFile)) {
  const all = new Float32Array(new Uint8Array(readFileSync(referenceFile)).buffer);
  names.forEach((m, i) => reference.set(m, all.slice(i * SCORES, (i + 1) * SCORES)));
}

async function measure(/** @type {string} */ label, /** @type {number} */ budget, /** @type {boolean} */ beside) {
  const root = path.join(temp.dir, label.replace(/\W+/g, '-'));
  rmSync(root, { recursive: true, force: true });
  makeRepository(root, {});
  started = performance.now();
  // On the CPU, gpus: names virtual devices the same way.
  const server = await startServer({ model_repo: repo, cache_dir: cacheDir, gpus: GPUS, global: { runtime: runtime(budget, beside) } }, { root });
  const clients = Array.from({ length: CLIENTS }, () => new InferenceClient(server.address));
  const keys = clients.map((_, c) => `/stowage-catalog-${process.pid}-${c}`);
  try {
    // Every model READY (loaded, and warmed up on cuda) before the clock starts.
    for (;;) {
      const index = await server.client.call('RepositoryIndex', { ready: true });
      if (index.models.length >= MODELS) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    const readySeconds = (performance.now() - started) / 1000;
    await Promise.all(clients.map(async (c, i) => {
      createRegion(keys[i], x.byteLength);
      writeRegion(keys[i], 0, x);
      await c.registerSystemSharedMemory(`input${i}`, keys[i], x.byteLength);
    }));
    const call = (/** @type {number} */ c, /** @type {string} */ model) => clients[c].infer(model, [{ name: 'image', datatype: 'FP32', shape: [1, 3, 224, 224], sharedMemory: { region: `input${c}`, byteSize: x.byteLength } }]);
    // The references: each model's answer, called alone (the first run's).
    if (reference.size === 0) {
      for (const m of names) reference.set(m, /** @type {Float32Array} */ ((await call(0, m)).outputs[0].data));
      const all = new Float32Array(MODELS * SCORES);
      names.forEach((m, i) => all.set(/** @type {Float32Array} */ (reference.get(m)), i * SCORES));
      writeFileSync(referenceFile, all);
    }
    const before = await scrapeMetrics(server.adminPort);
    /** @type {number[]} */
    const latencies = [];
    let wrong = null;
    let calls = 0;
    const t0 = performance.now();
    const end = t0 + SECONDS * 1000;
    await Promise.all(clients.map(async (_, c) => {
      const next = random(ZIPF_SEED + c);
      while (performance.now() < end) {
        const model = zipf(next);
        const sent = performance.now();
        const reply = await call(c, model);
        latencies.push(performance.now() - sent);
        if (calls++ % CHECK_EVERY === 0) {
          const error = relativeL2(/** @type {Float32Array} */ (reply.outputs[0].data), /** @type {Float32Array} */ (reference.get(model)));
          // Neighbouring models' scores differ by 1/MODELS: a tenth of that is the tolerance.
          if (!(error < 0.1 / MODELS)) wrong ??= `${model}: relative L2 ${error.toExponential(2)} from its own first answer`;
        }
      }
    }));
    const seconds = (performance.now() - t0) / 1000;
    if (wrong) throw new Error(`a wrong answer under ${label}: ${wrong}`);
    const after = await scrapeMetrics(server.adminPort);
    const delta = (/** @type {string} */ name, /** @type {string} */ extra = '') => names.reduce((s, m) => s + metric(after, name, `model="${m}"${extra}`) - metric(before, name, `model="${m}"${extra}`), 0);
    const misses = delta('stowage_weight_cache_misses_total');
    const bytes = delta('stowage_weight_cache_load_bytes_total', ',source="host"') + delta('stowage_weight_cache_load_bytes_total', ',source="disk"');
    const waited = delta('stowage_weight_cache_load_seconds_total');
    const hidden = delta('stowage_weight_cache_load_hidden_seconds_total');
    return {
      label, budget, readySeconds, rps: latencies.length / seconds, p50: percentile(latencies, 0.5), p99: percentile(latencies, 0.99),
      loadsPerSecond: misses / seconds, beside: delta('stowage_weight_cache_uploads_beside_total'),
      uploadGBps: waited + hidden > 0 ? bytes / (waited + hidden) / 1e9 : 0, hiddenShare: waited + hidden > 0 ? hidden / (waited + hidden) : 0,
      rssBytes: after.process_resident_memory_bytes ?? 0,
      // The server's GPUs' used memory as NVML reports it (nv_gpu_memory_used_bytes per GPU), null on the CPU.
      gpuBytes: backend === 'cuda' ? Object.entries(after).filter(([k]) => k.startsWith('nv_gpu_memory_used_bytes')).reduce((sum, [, v]) => sum + v, 0) : null,
    };
  } finally {
    for (const c of clients) c.close();
    for (const key of keys) {
      try {
        destroyRegion(key);
      } catch {
        // never created: the server failed before
      }
    }
    await server.stop();
  }
}

try {
  // The runs of earlier invocations on the same --work DIR, then this one's (a run again replaces its figures).
  const resultsFile = path.join(temp.dir, 'results.json');
  /** @type {Awaited<ReturnType<typeof measure>>[]} */
  const results = kept && existsSync(resultsFile) ? JSON.parse(readFileSync(resultsFile, 'utf8')) : [];
  const record = (/** @type {Awaited<ReturnType<typeof measure>>} */ r) => {
    results.splice(0, results.length, ...results.filter((x) => x.label !== r.label), r);
    if (opts.work) writeFileSync(resultsFile, JSON.stringify(results));
  };
  const tight = Math.floor(catalogBytes / RATIO);
  if (RUNS.includes('all')) record(await measure('all resident', Math.ceil(catalogBytes * 1.1), true));
  if (RUNS.includes('beside')) record(await measure(`1/${RATIO}, uploads beside execution`, tight, true));
  if (RUNS.includes('at-turn')) record(await measure(`1/${RATIO}, uploads at each turn`, tight, false));
  console.log('| run | budget (MiB) | req/s | p50 (ms) | p99 (ms) | cold loads/s | of them beside | upload GB/s | copy time hidden | to READY (s) | server RSS (GiB) | GPU memory used (GiB) |');
  console.log('| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |');
  for (const r of results) {
    console.log(`| ${r.label} | ${mib(r.budget)} | ${r.rps.toFixed(1)} | ${r.p50.toFixed(2)} | ${r.p99.toFixed(2)} | ${r.loadsPerSecond.toFixed(1)} | ${r.beside} | ${r.uploadGBps.toFixed(1)} | ${(100 * r.hiddenShare).toFixed(0)}% | ${r.readySeconds.toFixed(1)} | ${(r.rssBytes / 2 ** 30).toFixed(1)} | ${r.gpuBytes === null ? '-' : (r.gpuBytes / 2 ** 30).toFixed(1)} |`);
  }
  const resident = results.find((r) => r.label === 'all resident');
  if (resident) {
    console.log('');
    for (const r of results.filter((x) => x !== resident)) {
      console.log(`${r.label}: throughput ${(r.rps / resident.rps).toFixed(2)}x all-resident's (goal >= 0.9), p99 ${(r.p99 / resident.p99).toFixed(2)}x (goal <= 2)`);
    }
  }
} finally {
  temp.cleanup();
}
