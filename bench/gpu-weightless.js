// Why is a weightless ResNet-50 slower than the embedded one? On the GPU (CUDA provider, TF32 on)
// and the CPU (one thread per core), at batch 1, 8 and 32, medians of warm runs:
//   A  embedded: the model's own file, level all;
//   B  weightless: its initializers turned into graph inputs (split-weights.ts), level all, the
//      weights bound once (GPU: from one cudaMalloc'd block; CPU: from host memory);
//   C  the server's compile for the backend (CPU: level all; CUDA: level basic) saved, then split,
//      then opened as B (what the device actor runs);
//   D  (CUDA) compiled at level all by the CUDA provider itself, saved, split, opened at basic;
//   E  (CUDA) the device actor's run exactly: C with its settings, a fresh input buffer per call and
//      the output written into a buffer given, as a server's requests come.
//
//   npm run build && node bench/gpu-weightless.js [--cpu-only]
import { readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import * as ort from 'onnxruntime-node';
import { allocateDeviceMemory, OrtSession } from '../dist/native/ort.js';
import { loadCuda } from '../dist/native/cuda.js';
import { splitWeights } from '../dist/actors/compiler/split-weights.js';
import { dtypeInfo } from '../dist/shared/dtypes.js';
import { timed } from './timing.js';
import { tempDir } from '../test/helpers/server.js';
import { makeBenchModels } from './bench-models.js';

const { values: args } = parseArgs({ options: { 'cpu-only': { type: 'boolean', default: false }, 'gpu-only': { type: 'boolean', default: false } } });
const BATCHES = [1, 8, 32];
const temp = tempDir('stowage-bench-weightless-');
makeBenchModels(temp.dir, ['resnet50']);
const file = path.join(temp.dir, 'resnet50', 'model.onnx');
const original = readFileSync(file);

/** The file optimised by onnxruntime-node at `level` on the CPU, as the compiler does. */
async function optimised(level) {
  const out = path.join(temp.dir, `opt-${level}.onnx`);
  const s = await ort.InferenceSession.create(file, { graphOptimizationLevel: level, executionProviders: ['cpu'], optimizedModelFilePath: out, logSeverityLevel: 3 });
  await s.release();
  return readFileSync(out);
}


/** A weightless session over `model`'s split, its weights bound from `device` memory. */
function weightless(model, options, device, align = 256) {
  const { graph, weights } = splitWeights(model);
  const session = OrtSession.open(graph, options);
  let bytes = 0;
  for (const w of weights) bytes += Math.ceil(w.data.byteLength / align) * align;
  const memory = allocateDeviceMemory(bytes, device);
  let at = 0;
  for (const w of weights) {
    memory.copyFromHost(w.data, at);
    session.bindInput({ name: w.name, type: dtypeInfo(w.datatype).onnxType, dims: w.dims, data: device === 'cpu' ? Uint8Array.from(w.data) : { memory, offset: at } });
    at += Math.ceil(w.data.byteLength / align) * align;
  }
  return { session, release: () => { session.release(); memory.release(); }, tensors: weights.length };
}

const variants = [];
const cpu = { intraOpThreads: 0, allowSpinning: false, logSeverityLevel: 3 };
const cpuAll = await optimised('all');
if (!args['gpu-only']) variants.push({ name: 'cpu A embedded', open: () => ({ session: OrtSession.open(original, { ...cpu, graphOptimizationLevel: 'all' }), release() { this.session.release(); } }) });
if (!args['gpu-only']) variants.push({ name: 'cpu B weightless', open: () => weightless(original, { ...cpu, graphOptimizationLevel: 'all' }, 'cpu') });
if (!args['gpu-only']) variants.push({ name: 'cpu C compiled (all) + split', open: () => weightless(cpuAll, { ...cpu, graphOptimizationLevel: 'basic' }, 'cpu') });
if (!args['cpu-only']) {
  loadCuda();
  const gpu = { logSeverityLevel: 3, cuda: { deviceId: 0, options: {} } };
  const cudaBasic = await optimised('basic');
  variants.push({ name: 'cuda A embedded', open: () => ({ session: OrtSession.open(original, { ...gpu, graphOptimizationLevel: 'all' }), release() { this.session.release(); } }) });
  variants.push({ name: 'cuda B weightless', open: () => weightless(original, { ...gpu, graphOptimizationLevel: 'all' }, 'cuda:0') });
  variants.push({ name: 'cuda C compiled (basic) + split', open: () => weightless(cudaBasic, { ...gpu, graphOptimizationLevel: 'all' }, 'cuda:0') });
  // D: the compile done with the CUDA provider itself (its fusions, saved), then split.
  const cudaAllFile = path.join(temp.dir, 'opt-cuda-all.onnx');
  OrtSession.open(original, { ...gpu, graphOptimizationLevel: 'all', optimizedModelFilePath: cudaAllFile }).release();
  const cudaAll = readFileSync(cudaAllFile);
  variants.push({ name: 'cuda D compiled (all, CUDA provider) + split', open: () => weightless(cudaAll, { ...gpu, graphOptimizationLevel: 'basic' }, 'cuda:0') });
  // The device actor's settings one at a time: 64-byte aligned weights (the arena's alignment), its
  // intra-op threads (one per core, not spinning), runs on the calling thread (runSync).
  const still = { intraOpThreads: 0, allowSpinning: false };
  variants.push({ name: 'cuda C, weights 64-byte aligned', open: () => weightless(cudaBasic, { ...gpu, graphOptimizationLevel: 'all' }, 'cuda:0', 64) });
  variants.push({ name: 'cuda C, threads not spinning', open: () => weightless(cudaBasic, { ...gpu, ...still, graphOptimizationLevel: 'all' }, 'cuda:0') });
  variants.push({ name: 'cuda C, runSync', sync: true, open: () => weightless(cudaBasic, { ...gpu, graphOptimizationLevel: 'all' }, 'cuda:0') });
  // The provider options the server sets (config/cuda-options.ts).
  const serverOptions = { ...gpu, cuda: { deviceId: 0, options: { use_tf32: '1', cudnn_conv_algo_search: 'EXHAUSTIVE', arena_extend_strategy: 'kSameAsRequested' } } };
  variants.push({ name: 'cuda C, the server\'s provider options', open: () => weightless(cudaBasic, { ...serverOptions, graphOptimizationLevel: 'all' }, 'cuda:0') });
  variants.push({ name: 'cuda C, all of the device actor\'s settings and options', sync: true, open: () => weightless(cudaBasic, { ...serverOptions, ...still, graphOptimizationLevel: 'all' }, 'cuda:0', 64) });
  variants.push({ name: 'cuda C, all three (the device actor)', sync: true, open: () => weightless(cudaBasic, { ...gpu, ...still, graphOptimizationLevel: 'all' }, 'cuda:0', 64) });
  // And as a server's requests come: each input in memory of its own (a gRPC message's fresh
  // buffer), the output written into a buffer given (the execution's staging).
  variants.push({ name: 'cuda C, the device actor + a fresh input per call + output into a buffer', sync: true, fresh: true, target: true, open: () => weightless(cudaBasic, { ...serverOptions, ...still, graphOptimizationLevel: 'all' }, 'cuda:0', 64) });
  variants.push({ name: 'cuda B weightless, level basic', open: () => weightless(original, { ...gpu, graphOptimizationLevel: 'basic' }, 'cuda:0') });
}

console.log(`${new Date().toISOString().slice(0, 10)}, ${os.availableParallelism()} cores, Node ${process.versions.node}\n`);
console.log(`| variant | ${BATCHES.map((b) => `batch ${b} (ms)`).join(' | ')} |`);
console.log(`| --- | ${BATCHES.map(() => '---').join(' | ')} |`);
for (const v of variants) {
  const opened = v.open();
  const cells = [];
  for (const b of BATCHES) {
    const x = Float32Array.from({ length: b * 3 * 224 * 224 }, (_, i) => Math.sin(i * 0.001));
    const calls = v.name.startsWith('cpu') ? { 1: 10, 8: 4, 32: 2 }[b] : { 1: 40, 8: 20, 32: 10 }[b];
    const copies = v.fresh ? Array.from({ length: calls + 3 }, () => x.slice()) : [x];
    let next = 0;
    const feeds = () => [{ name: 'image', type: 1, dims: [b, 3, 224, 224], data: copies[v.fresh ? next++ : 0] }];
    const scores = v.target ? [{ name: 'scores', type: 1, dims: [b, 1000], data: new Float32Array(b * 1000) }] : ['scores'];
    cells.push((await timed(calls, async () => (v.sync ? opened.session.runSync(feeds(), scores) : opened.session.run(feeds(), scores)))).toFixed(2));
  }
  opened.release();
  console.log(`| ${v.name} | ${cells.join(' | ')} |`);
}
temp.cleanup();
