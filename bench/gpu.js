// Backend cuda on ResNet-50 (tools/make_bench_models.py resnet50 resnet50_b: 97 MiB of weights
// each, no tensor in common), on one GPU:
//   - raw: Stowage's binding, the model's own file with its weights embedded, CUDA provider
//     (TF32 on, ONNX Runtime's default), host input and output: the floor;
//   - server warm: `node main.js` with backend cuda over both bundles, called over gRPC, the
//     model's weights already in the GPU weight arena (bound once per residency);
//   - server cold: the arena holds one model (runtime.cuda.weight_cache_bytes), and calls alternate
//     between the two, so every call first copies its model's 97 MiB from pinned host RAM;
//   - through gRPC with NVIDIA's perf_analyzer at batch 1, when .toolchain/perf_analyzer has it;
//   - server warm again with CUDA graphs (runtime.cuda.graphs), both models resident.
// Medians at batch 1, 8 and 32 after warm-up (the first run at each batch size costs 100+ ms).
//
//   npm run build && node bench/gpu.js        (a GPU machine after npm run cuda:install)
import { existsSync } from 'node:fs';
import path from 'node:path';
import { gpuReport, loadCuda } from '../dist/native/cuda.js';
import { OrtSession } from '../dist/native/ort.js';
import { PERF_ANALYZER, perfAnalyzer } from './perf-analyzer.js';
import { image, timed } from './timing.js';
import { makeRepository, metric, scrapeMetrics, startServer, tempDir } from '../test/helpers/server.js';
import { makeBenchModels } from './bench-models.js';

const BATCHES = [1, 8, 32];
const CALLS = { 1: 60, 8: 30, 32: 15 };
const FLOAT = 1;

loadCuda();
const report = gpuReport();
const temp = tempDir('stowage-bench-gpu-');
makeBenchModels(path.join(temp.dir, 'generated'), ['resnet50', 'resnet50_b']);
const bundles = { resnet50: path.join(temp.dir, 'generated', 'resnet50'), resnet50_b: path.join(temp.dir, 'generated', 'resnet50_b') };
const repo = makeRepository(temp.dir, bundles);


const rows = {};
const usedBefore = gpuReport().gpus[0]?.memoryUsedBytes ?? 0;
const raw = OrtSession.open(path.join(bundles.resnet50, 'model.onnx'), { graphOptimizationLevel: 'all', logSeverityLevel: 3, cuda: { deviceId: 0, options: {} } });
const fp32 = OrtSession.open(path.join(bundles.resnet50, 'model.onnx'), { graphOptimizationLevel: 'all', logSeverityLevel: 3, cuda: { deviceId: 0, options: { use_tf32: '0' } } });
for (const b of BATCHES) {
  const x = image(b);
  const feeds = [{ name: 'image', type: FLOAT, dims: [b, 3, 224, 224], data: x }];
  rows[b] = {
    raw: await timed(CALLS[b], () => raw.run(feeds, ['scores'])),
    fp32: await timed(CALLS[b], () => fp32.run(feeds, ['scores'])),
    // As a server sees it: the GPU idle for a few ms between requests (the round trip).
    gaps: await timed(CALLS[b], () => raw.run(feeds, ['scores']), { idleMs: 3 }),
    // As a server sees it too: each request's input in memory of its own, fresh (a gRPC message's
    // buffer), where the loops above reuse one. The copies are made before the timed loop.
    fresh: await (async () => {
      const inputs = Array.from({ length: CALLS[b] + 3 }, () => x.slice());
      let next = 0; // each run, warm-ups included, its own copy
      return timed(CALLS[b], () => raw.run([{ ...feeds[0], data: inputs[next++] }], ['scores']));
    })(),
  };
}
// GPU memory an embedded session holds once it has run at every batch size (context included: the first).
const rawSessionBytes = ((gpuReport().gpus[0]?.memoryUsedBytes ?? 0) - usedBefore) / 2;
raw.release();
fp32.release();

// Room for one model's weights (plus slack for alignment), not two.
const weightBytes = 102_031_776;
const usedIdle = gpuReport().gpus[0]?.memoryUsedBytes ?? 0;
const server = await startServer({
  model_repo: repo,
  cache_dir: path.join(temp.dir, 'cache'),
  global: { runtime: { backend: 'cuda', cuda: { weight_cache_bytes: Math.ceil(weightBytes * 1.3) } } },
}, { root: temp.dir });
try {
  // Both models loaded and warmed (every batch size): the GPU memory they hold beyond the weight arena.
  const usedServing = gpuReport().gpus[0]?.memoryUsedBytes ?? 0;
  const arenaBytes = metric(await scrapeMetrics(server.adminPort), 'stowage_weight_cache_budget_bytes', 'device="0"');
  const stats = async () => (await server.client.call('ModelStatistics', { name: 'resnet50' })).model_stats[0].inference_stats.compute_infer;
  const infer = (/** @type {string} */ model, /** @type {Float32Array} */ x, /** @type {number} */ b) => server.client.infer(model, [{ name: 'image', datatype: 'FP32', shape: [b, 3, 224, 224], data: x }]);
  for (const b of BATCHES) {
    const x = image(b);
    // Both models warm at this batch size first (each pays its first run here, not in the figures).
    await infer('resnet50_b', x, b);
    // resnet50 back on (the one cold call) and warm before the statistics are read: the compute
    // figure is a mean over the counted calls, so one cold call among 15 would weigh in it.
    for (let i = 0; i < 3; i++) await infer('resnet50', x, b);
    const before = await stats();
    rows[b].warm = await timed(CALLS[b], () => infer('resnet50', x, b), { warmups: 0 });
    const after = await stats();
    rows[b].compute = (Number(after.ns) - Number(before.ns)) / (Number(after.count) - Number(before.count)) / 1e6;
    rows[b].cold = await timed(Math.ceil(CALLS[b] / 2), (i) => infer(i % 2 ? 'resnet50' : 'resnet50_b', x, b));
  }
  // Through gRPC with NVIDIA's perf_analyzer (when tools/install-perf-analyzer.sh or pack-offline's
  // --with-tests brought it): batch 1, one request at a time, against the raw run at batch 1.
  let perf = null;
  if (existsSync(PERF_ANALYZER)) {
    await infer('resnet50', image(1), 1);
    perf = {
      inline: await perfAnalyzer(server.address, { model: 'resnet50', batch: 1, concurrency: 1, requests: 300, inputData: 'zero' }),
      // The input and output in system shared memory: what is left when the 0.6 MiB leave the message.
      shm: await perfAnalyzer(server.address, { model: 'resnet50', batch: 1, concurrency: 1, requests: 300, inputData: 'zero', sharedMemory: 'system', outputBytes: 4000 }),
      // The input and output in CUDA shared memory (perf_analyzer's cudaMalloc, its IPC handle
      // registered): the input bound to the run in place, the output computed into its region.
      // A perf_analyzer built without GPU support refuses it: said, and the other figures stand.
      cuda: await perfAnalyzer(server.address, { model: 'resnet50', batch: 1, concurrency: 1, requests: 300, inputData: 'zero', sharedMemory: 'cuda', outputBytes: 4000 })
        .catch((/** @type {Error} */ err) => ({ error: err.message })),
    };
  }
  const m = await scrapeMetrics(server.adminPort);
  const loads = ['resnet50', 'resnet50_b'].map((model) => ({
    misses: metric(m, 'stowage_weight_cache_misses_total', `model="${model}"`),
    bytes: metric(m, 'stowage_weight_cache_load_bytes_total', `model="${model}",source="host"`),
    seconds: metric(m, 'stowage_weight_cache_load_seconds_total', `model="${model}"`),
  }));
  const misses = loads.reduce((s, l) => s + l.misses, 0);
  const seconds = loads.reduce((s, l) => s + l.seconds, 0);
  const bytes = loads.reduce((s, l) => s + l.bytes, 0);
  console.log(`\n${new Date().toISOString().slice(0, 10)}, ${report.gpus[0]?.name} (${((report.gpus[0]?.memoryTotalBytes ?? 0) / 2 ** 30).toFixed(0)} GiB), driver ${report.driverVersion}, CUDA ${report.runtimeCuda}, cuDNN ${report.cudnn}, Node ${process.versions.node}\n`);
  console.log('| batch | raw binding, embedded, TF32 (ms) | raw, TF32 off (ms) | raw, 3 ms idle before each (ms) | raw, a fresh input each call (ms) | server warm, end to end (ms) | server warm, compute (ms) | server cold: 97 MiB copied + run (ms) | compute / raw | cold - warm (ms) |');
  console.log('| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |');
  for (const b of BATCHES) {
    const r = rows[b];
    console.log(`| ${b} | ${r.raw.toFixed(2)} | ${r.fp32.toFixed(2)} | ${r.gaps.toFixed(2)} | ${r.fresh.toFixed(2)} | ${r.warm.toFixed(2)} | ${r.compute.toFixed(2)} | ${r.cold.toFixed(2)} | ${(r.compute / r.raw).toFixed(2)} | ${(r.cold - r.warm).toFixed(2)} |`);
  }
  if (perf) {
    for (const [label, p] of [['inline', perf.inline], ['system shared memory', perf.shm], ['CUDA shared memory', perf.cuda]]) {
      if ('error' in p) {
        console.log(`\nperf_analyzer over gRPC, ${label}: failed: ${p.error}`);
        continue;
      }
      console.log(`\nperf_analyzer over gRPC, batch 1, concurrency 1, ${label}: ${p.rps.toFixed(0)} req/s, p50 ${(p.p50 / 1000).toFixed(2)} ms, p99 ${(p.p99 / 1000).toFixed(2)} ms: p50 ${(p.p50 / 1000 - rows[1].raw).toFixed(2)} ms above the raw run (target: at most 0.3 ms)`);
    }
  } else {
    console.log(`\nperf_analyzer: not at ${PERF_ANALYZER} (bash tools/install-perf-analyzer.sh), so no gRPC figure`);
  }
  console.log(`\nGPU memory: an embedded ResNet-50 session after runs at 1, 8 and 32 holds ${(rawSessionBytes / 2 ** 20).toFixed(0)} MiB (the first includes the CUDA context); the server with both models warm holds ${((usedServing - usedIdle) / 2 ** 20).toFixed(0)} MiB, of which the weight arena ${(arenaBytes / 2 ** 20).toFixed(0)} MiB: ${((usedServing - usedIdle - arenaBytes) / 2 / 2 ** 20).toFixed(0)} MiB per model's weightless session (and the server's CUDA context)`);
  console.log(`\nweight loads: ${misses} cold calls, ${(bytes / 2 ** 20).toFixed(0)} MiB from host RAM in ${(seconds * 1000).toFixed(0)} ms: ${(seconds * 1000 / Math.max(1, misses)).toFixed(2)} ms and ${(bytes / Math.max(seconds, 1e-9) / 1e9).toFixed(1)} GB/s per load`);
} finally {
  await server.stop();
}

// The same warm calls with CUDA graphs (runtime.cuda.graphs), both models resident.
const graphed = await startServer({
  model_repo: repo,
  cache_dir: path.join(temp.dir, 'cache'),
  global: { runtime: { backend: 'cuda', cuda: { graphs: true, weight_cache_bytes: Math.ceil(weightBytes * 2.6) } } },
});
try {
  const stats = async () => (await graphed.client.call('ModelStatistics', { name: 'resnet50' })).model_stats[0].inference_stats.compute_infer;
  console.log('\n| batch | raw (ms) | server warm with CUDA graphs, end to end (ms) | its compute (ms) | compute / raw | without graphs: compute (ms) |');
  console.log('| --- | --- | --- | --- | --- | --- |');
  for (const b of BATCHES) {
    const x = image(b);
    const infer = () => graphed.client.infer('resnet50', [{ name: 'image', datatype: 'FP32', shape: [b, 3, 224, 224], data: x }]);
    for (let i = 0; i < 3; i++) await infer();
    const before = await stats();
    const warm = await timed(CALLS[b], infer, { warmups: 0 });
    const after = await stats();
    const compute = (Number(after.ns) - Number(before.ns)) / (Number(after.count) - Number(before.count)) / 1e6;
    console.log(`| ${b} | ${rows[b].raw.toFixed(2)} | ${warm.toFixed(2)} | ${compute.toFixed(2)} | ${(compute / rows[b].raw).toFixed(2)} | ${rows[b].compute.toFixed(2)} |`);
  }
  if (existsSync(PERF_ANALYZER)) {
    for (const [label, sharedMemory] of [['inline', undefined], ['system shared memory', 'system'], ['CUDA shared memory (copied GPU to GPU into and out of the graph\'s buffers)', 'cuda']]) {
      const p = await perfAnalyzer(graphed.address, { model: 'resnet50', batch: 1, concurrency: 1, requests: 300, inputData: 'zero', ...(sharedMemory ? { sharedMemory, outputBytes: 4000 } : {}) })
        .catch((/** @type {Error} */ err) => ({ error: err.message }));
      if ('error' in p) {
        console.log(`\nperf_analyzer over gRPC with CUDA graphs, ${label}: failed: ${p.error}`);
        continue;
      }
      console.log(`\nperf_analyzer over gRPC with CUDA graphs, batch 1, concurrency 1, ${label}: ${p.rps.toFixed(0)} req/s, p50 ${(p.p50 / 1000).toFixed(2)} ms, p99 ${(p.p99 / 1000).toFixed(2)} ms: p50 ${(p.p50 / 1000 - rows[1].raw).toFixed(2)} ms from the raw run without graphs (target: at most 0.3 ms above)`);
    }
  }
  console.log(`\nresnet50's CUDA graphs: ${graphed.logs.find((l) => l.msg === 'CUDA graphs' && l.model === 'resnet50')?.cuda_graphs ?? graphed.logs.find((l) => String(l.msg).startsWith('CUDA graphs off') && l.model === 'resnet50')?.cuda_graphs ?? 'not said'}`);
} finally {
  await graphed.stop();
  temp.cleanup();
}
