// Does warm-up warm? ResNet-50 on backend cuda, after the model came READY (warm-up on unless a
// row says off): the server's compute time (ModelStatistics' compute_infer, the run alone) of the
// first client calls at batch 1, 8 and 32 against the median of the next five, under settings that
// could make a first call differ (cuDNN's search, the intra-op threads and pool, CUDA graphs).
// First, in process through the binding alone: a session's first runs with outputs named (as
// warm-up's first run), then into host buffers given, then from a newly pinned input (as the
// server's runs).
//
//   npm run build && node bench/gpu-first-call.js        (a GPU machine)
import os from 'node:os';
import path from 'node:path';
import { loadCuda, pinHost } from '../dist/native/cuda.js';
import { OrtSession } from '../dist/native/ort.js';
import { image, median } from './timing.js';
import { makeRepository, startServer, tempDir } from '../test/helpers/server.js';
import { makeBenchModels } from './bench-models.js';

const BATCHES = [1, 8, 32];
const FLOAT = 1;
const ms = (/** @type {() => unknown} */ f) => { const t0 = performance.now(); f(); return performance.now() - t0; };

loadCuda();
const temp = tempDir('stowage-bench-first-');
makeBenchModels(path.join(temp.dir, 'generated'), ['resnet50']);
const bundle = path.join(temp.dir, 'generated', 'resnet50');

// The binding alone, each batch size: named outputs first (warm-up's way), then bound ones.
const session = OrtSession.open(path.join(bundle, 'model.onnx'), { graphOptimizationLevel: 'all', logSeverityLevel: 3, cuda: { deviceId: 0, options: {} } });
console.log('| batch | first run, outputs named (ms) | next, named (ms) | first run, outputs bound to host buffers (ms) | next, bound (ms) | first run from a newly pinned input (ms) | next, pinned (ms) |');
console.log('| --- | --- | --- | --- | --- | --- | --- |');
for (const b of BATCHES) {
  const feeds = [{ name: 'image', type: FLOAT, dims: [b, 3, 224, 224], data: image(b) }];
  const bound = [{ name: 'scores', type: FLOAT, dims: [b, 1000], data: new Uint8Array(b * 1000 * 4) }];
  const pinnedData = image(b);
  const pin = pinHost(pinnedData);
  const pinned = [{ ...feeds[0], data: pinnedData }];
  const f = [ms(() => session.runSync(feeds, ['scores'])), ms(() => session.runSync(feeds, ['scores'])), ms(() => session.runSync(feeds, bound)), ms(() => session.runSync(feeds, bound)),
    ms(() => session.runSync(pinned, bound)), ms(() => session.runSync(pinned, bound))];
  pin.release();
  console.log(`| ${b} | ${f.map((v) => v.toFixed(2)).join(' | ')} |`);
}
session.release();

// The server (warm-up on unless said) under settings that could make its first call differ from warm-up's.
/** @type {[string, object][]} */
const variants = [
  ['defaults', {}],
  ['warm-up off', { warmup: 'off' }],
  ['cudnn_conv_algo_search: heuristic', { cuda: { cudnn_conv_algo_search: 'heuristic' } }],
  ['intra_op_threads: one per core', { intra_op_threads: os.availableParallelism() }],
  ['thread_pool: process', { thread_pool: 'process' }],
  ['CUDA graphs', { cuda: { graphs: true } }],
];
console.log('\nThe server: compute (ms) of the first calls at each batch size after READY, against the median of the next 5\n');
console.log('| settings | b1 call 1 | b1 call 2 | b1 warm | b8 call 1 | b8 call 2 | b8 warm | b32 call 1 | b32 warm |');
console.log('| --- | --- | --- | --- | --- | --- | --- | --- | --- |');
for (const [i, [label, runtime]] of variants.entries()) {
  const server = await startServer({
    model_repo: makeRepository(path.join(temp.dir, `repo-${i}`), { resnet50: bundle }),
    cache_dir: path.join(temp.dir, `cache-${i}`),
    global: { runtime: { backend: 'cuda', .../** @type {object} */ (runtime) } },
  });
  try {
    const stats = async () => (await server.client.call('ModelStatistics', { name: 'resnet50' })).model_stats[0].inference_stats.compute_infer;
    const cells = [];
    for (const b of BATCHES) {
      const x = image(b);
      const each = [];
      for (let k = 0; k < 7; k++) {
        const before = await stats();
        await server.client.infer('resnet50', [{ name: 'image', datatype: 'FP32', shape: [b, 3, 224, 224], data: x }]);
        const after = await stats();
        each.push((Number(after.ns) - Number(before.ns)) / 1e6);
      }
      cells.push(...(b === 32 ? [each[0]] : [each[0], each[1]]), median(each.slice(2)));
    }
    console.log(`| ${label} | ${cells.map((v) => v.toFixed(2)).join(' | ')} |`);
  } finally {
    await server.stop();
  }
}
temp.cleanup();
