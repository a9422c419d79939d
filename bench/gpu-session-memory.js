// GPU memory one CUDA session holds, for a small model (an MLP 64-1024-8, 0.3 MiB of weights):
// open 8 sessions with the same options, measure the GPU's used memory (cudaMemGetInfo) after
// creation and after one run each, per session. Options varied: ONNX Runtime's defaults, the
// arena grown by what is asked, cuDNN off, a per-session arena limit. What a GPU serving
// hundreds of models pays per model beside its weights.
//
//   npm run build && node bench/gpu-session-memory.js
import { gpuMemory, loadCuda } from '../dist/native/cuda.js';
import { OrtSession } from '../dist/native/ort.js';
import { mlpLayers, mlpModel } from '../test/helpers/mlp-catalog.js';

loadCuda();
const model = mlpModel(mlpLayers(1, [64, 1024, 8]));
const used = () => {
  const m = gpuMemory(0);
  return m.totalBytes - m.freeBytes;
};
const COUNT = 8;
const x = new Float32Array(8 * 64).fill(0.1);
const variants = {
  'ONNX Runtime defaults': {},
  'arena_extend_strategy kSameAsRequested': { arena_extend_strategy: 'kSameAsRequested' },
  'enable_cudnn 0': { enable_cudnn: '0' },
  'kSameAsRequested + enable_cudnn 0': { arena_extend_strategy: 'kSameAsRequested', enable_cudnn: '0' },
  'gpu_mem_limit 64 MiB': { gpu_mem_limit: String(64 * 2 ** 20), arena_extend_strategy: 'kSameAsRequested' },
};
// The CUDA context first, so that no variant pays it.
OrtSession.open(model, { logSeverityLevel: 3, cuda: { deviceId: 0, options: {} } }).release();
console.log('| options | per session after creation (MiB) | per session after a run (MiB) |');
console.log('| --- | --- | --- |');
for (const [name, options] of [...Object.entries(variants), ['defaults, 8 runs each with run() (libuv threads)', {}], ['defaults, 8 runs each with runSync (one thread)', {}]]) {
  const before = used();
  let sessions;
  try {
    sessions = Array.from({ length: COUNT }, () => OrtSession.open(model, { logSeverityLevel: 3, cuda: { deviceId: 0, options } }));
  } catch (err) {
    console.log(`| ${name} | refused: ${err.message.slice(0, 120)} | |`);
    continue;
  }
  const created = used();
  const feeds = [{ name: 'x', type: 1, dims: [8, 64], data: x }];
  const runs = name.includes('8 runs') ? 8 : 1;
  for (const s of sessions) {
    // Concurrent runs of different sessions land on different libuv threads.
    if (name.includes('runSync')) for (let i = 0; i < runs; i++) s.runSync(feeds, ['y']);
  }
  if (!name.includes('runSync')) {
    for (let i = 0; i < runs; i++) await Promise.all(sessions.map((s) => s.run(feeds, ['y'])));
  }
  const ran = used();
  for (const s of sessions) s.release();
  console.log(`| ${name} | ${((created - before) / COUNT / 2 ** 20).toFixed(1)} | ${((ran - before) / COUNT / 2 ** 20).toFixed(1)} |`);
}
