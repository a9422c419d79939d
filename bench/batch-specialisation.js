// Does a session specialised to one batch size run faster than one session with a dynamic batch
// axis? For each example model and batch size, time ONNX Runtime directly (no server) on the
// dynamic model.onnx and on a copy whose batch dimension is fixed (tools/specialise_batch.py).
// Stowage keeps one dynamic session per model.onnx because this ratio stays near 1 here.
//
//   node bench/batch-specialisation.js
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import ort from 'onnxruntime-node';
import { FIXTURES, ROOT, tempDir } from '../test/helpers/server.js';
import { benchPython } from './bench-models.js';

const SIZES = [1, 8, 32];
const MODELS = {
  digits: { file: path.join(ROOT, 'bundles', 'digits', 'model.onnx'), input: 'image', dims: [8, 8], runs: 3000 },
  convnet: { file: path.join(FIXTURES, 'models', 'convnet', 'model.onnx'), input: 'image', dims: [3, 32, 32], runs: 100 },
};
const options = { graphOptimizationLevel: 'all', extra: { session: { 'intra_op.allow_spinning': '0' } } };
const python = benchPython();

async function msPerRun(session, feeds, runs) {
  for (let i = 0; i < 10; i++) await session.run(feeds);
  const t0 = performance.now();
  for (let i = 0; i < runs; i++) await session.run(feeds);
  return (performance.now() - t0) / runs;
}

const temp = tempDir('stowage-bench-');
console.log('model     batch   dynamic us   specialised us   dynamic/specialised');
for (const [name, m] of Object.entries(MODELS)) {
  const dir = path.join(temp.dir, name);
  execFileSync(python, [path.join(ROOT, 'tools', 'specialise_batch.py'), m.file, dir, ...SIZES.map(String)], { stdio: 'ignore' });
  const dynamic = await ort.InferenceSession.create(m.file, options);
  for (const size of SIZES) {
    const fixed = await ort.InferenceSession.create(path.join(dir, `model.b${size}.onnx`), options);
    const count = size * m.dims.reduce((a, b) => a * b, 1);
    const feeds = { [m.input]: new ort.Tensor('float32', new Float32Array(count).fill(0.25), [size, ...m.dims]) };
    // Best of three alternating rounds, to damp the machine's noise.
    let d = Infinity;
    let s = Infinity;
    for (let round = 0; round < 3; round++) {
      d = Math.min(d, await msPerRun(dynamic, feeds, m.runs));
      s = Math.min(s, await msPerRun(fixed, feeds, m.runs));
    }
    console.log(`${name.padEnd(9)} ${String(size).padStart(5)} ${(d * 1000).toFixed(1).padStart(12)} ${(s * 1000).toFixed(1).padStart(16)} ${(d / s).toFixed(3).padStart(21)}`);
    await fixed.release();
  }
  await dynamic.release();
}
temp.cleanup();
