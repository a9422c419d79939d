// ResNet-50 inline under load against the card's own images/s (issue 52 item 5): NVIDIA's
// perf_analyzer sends batch-1 requests with their 0.6 MiB input inline over gRPC from CONCURRENCY
// clients; the server's scheduler joins them into batches (ModelStatistics' batch_stats says how
// many executions at which size). The card's own rate at those batches is ONNX Runtime's raw run
// of the model's own file in process (host input and output, the weights embedded), timed at each
// size the server ran: the images those executions could hold over the time the card alone takes
// for them. The goal: the server's images/s at least 0.8x that, so the front end and the device
// actor's staging keep the card fed.
//
//   npm run build && node bench/gpu-inline.js [--backend cuda|cpu] [--concurrency 64] [--requests 4000]
//
// --backend cpu is how the bench is checked without a GPU (e.g. --concurrency 16 --requests 200).
// perf_analyzer comes from tools/install-perf-analyzer.sh (or tools/gpu-lease-pack.sh's pack).
import { existsSync } from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { gpuReport, loadCuda } from '../dist/native/cuda.js';
import { OrtSession } from '../dist/native/ort.js';
import { makeRepository, startServer, tempDir } from '../test/helpers/server.js';
import { makeBenchModels } from './bench-models.js';
import { PERF_ANALYZER, perfAnalyzer } from './perf-analyzer.js';
import { image, timed } from './timing.js';

const { values: opts } = parseArgs({
  options: {
    backend: { type: 'string', default: 'cuda' },
    concurrency: { type: 'string', default: '64' },
    requests: { type: 'string', default: '4000' },
  },
});
const backend = opts.backend;
if (backend !== 'cuda' && backend !== 'cpu') throw new Error(`--backend ${backend}: cuda or cpu`);
if (!existsSync(PERF_ANALYZER)) throw new Error(`perf_analyzer is not at ${PERF_ANALYZER}: bash tools/install-perf-analyzer.sh`);
const CONCURRENCY = Number(opts.concurrency);
const REQUESTS = Number(opts.requests);
const FLOAT = 1;
const GOAL = 0.8;

const temp = tempDir('stowage-bench-inline-');
if (backend === 'cuda') loadCuda();
const gpu = backend === 'cuda' ? gpuReport().gpus[0] : null;
makeBenchModels(path.join(temp.dir, 'generated'), ['resnet50']);
const bundle = path.join(temp.dir, 'generated', 'resnet50');
const repo = makeRepository(temp.dir, { resnet50: bundle });
console.log(`${new Date().toISOString().slice(0, 10)}, backend ${backend}, ${gpu ? gpu.name : 'the CPU device'}, Node ${process.versions.node}`);
console.log(`ResNet-50, batch-1 requests inline over gRPC from perf_analyzer at concurrency ${CONCURRENCY}, ${REQUESTS} requests per window\n`);

/** ModelStatistics: the requests answered, and executions per executed batch size (batch_stats). */
async function executions(/** @type {import('../test/helpers/server.js').Server} */ server) {
  const stats = (await server.client.call('ModelStatistics', { name: 'resnet50' })).model_stats[0];
  return {
    requests: Number(stats.inference_count),
    bySize: new Map(stats.batch_stats.map((/** @type {{ batch_size: string | number, compute_infer: { count: string | number } }} */ b) => [Number(b.batch_size), Number(b.compute_infer.count)])),
  };
}

const runtime = backend === 'cuda' ? { backend: 'cuda', cuda: { weight_cache_bytes: 2 ** 30 } } : {};
const server = await startServer({ model_repo: repo, cache_dir: path.join(temp.dir, 'cache'), global: { runtime } }, { root: temp.dir });
/** @type {{ rps: number, p50: number, p99: number }} */
let load;
/** @type {Map<number, number>} */
const formed = new Map();
let requests = 0;
try {
  // Every batch size warm (the server's warm-up ran them; one short run more settles the clients).
  await perfAnalyzer(server.address, { model: 'resnet50', batch: 1, concurrency: CONCURRENCY, requests: Math.min(REQUESTS, 4 * CONCURRENCY), inputData: 'zero' });
  const before = await executions(server);
  load = await perfAnalyzer(server.address, { model: 'resnet50', batch: 1, concurrency: CONCURRENCY, requests: REQUESTS, inputData: 'zero' });
  const after = await executions(server);
  requests = after.requests - before.requests;
  for (const [size, count] of after.bySize) {
    const n = count - (before.bySize.get(size) ?? 0);
    if (n > 0) formed.set(size, n);
  }
} finally {
  await server.stop();
}

// The card alone at each size the scheduler formed.
const raw = OrtSession.open(path.join(bundle, 'model.onnx'), {
  graphOptimizationLevel: 'all',
  logSeverityLevel: 3,
  ...(backend === 'cuda' ? { cuda: { deviceId: 0, options: {} } } : {}),
});
/** @type {Map<number, number>} */
const rawMs = new Map();
try {
  for (const size of [...formed.keys()].sort((a, b) => a - b)) {
    const feeds = [{ name: 'image', type: FLOAT, dims: [size, 3, 224, 224], data: image(size) }];
    rawMs.set(size, await timed(backend === 'cuda' ? 30 : 3, () => raw.run(feeds, ['scores'])));
  }
} finally {
  raw.release();
  temp.cleanup();
}

const total = [...formed.values()].reduce((a, b) => a + b, 0);
console.log('| executed batch size | executions | share | raw run (ms) | the card alone (images/s) |');
console.log('| --- | --- | --- | --- | --- |');
for (const [size, n] of [...formed].sort(([a], [b]) => a - b)) {
  const ms = /** @type {number} */ (rawMs.get(size));
  console.log(`| ${size} | ${n} | ${((100 * n) / total).toFixed(0)}% | ${ms.toFixed(2)} | ${((size * 1000) / ms).toFixed(0)} |`);
}
const images = [...formed].reduce((s, [size, n]) => s + size * n, 0);
const cardSeconds = [...formed].reduce((s, [size, n]) => s + (n * /** @type {number} */ (rawMs.get(size))) / 1000, 0);
const card = images / cardSeconds;
const ratio = load.rps / card;
console.log(`\nthe server: ${load.rps.toFixed(0)} images/s (p50 ${(load.p50 / 1000).toFixed(2)} ms, p99 ${(load.p99 / 1000).toFixed(2)} ms), ${(requests / total).toFixed(1)} requests per execution`);
console.log(`the card alone at the batches formed: ${card.toFixed(0)} images/s`);
console.log(`server / card: ${ratio.toFixed(2)}x (goal: at least ${GOAL})`);
