// One fully-connected layer (x[M, 8192] · W[8192, 2048]) straight on ONNX Runtime, with W embedded
// (a constant ORT prepacks once, at session creation) and with W fed as an input (how the weight
// cache feeds every weight: packed again on every run); then, through our binding (src/native/ort.ts),
// W as an initializer stored as external data and handed to the session over our own memory:
// `initializers` (AddInitializer, used in place) and `externalInitializers` (AddExternalInitializers,
// copied in). For Gemm with transB 0 and 1, and MatMul, at M = 1 and 8. Prints each against embedded.
//
//   npm run build && node bench/gemm-weights.js
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as ort from 'onnxruntime-node';
import { initOrt, OrtSession } from '../dist/native/ort.js';
import { WireWriter } from '../dist/shared/protobuf-wire.js';
import { valueInfo } from '../test/helpers/mlp-catalog.js';

const K = 8192;
const N = 2048;
const RUNS = 30;

/** @param {'embedded' | 'fed' | 'external'} how W reaches the graph */
function model(op, transB, how, weights) {
  const fed = how === 'fed';
  const node = new WireWriter().string(1, 'x').string(1, 'w').string(2, 'y').string(3, 'fc').string(4, op);
  if (transB) node.bytes(5, new WireWriter().string(1, 'transB').varint(3, 1).varint(20, 2).finish()); // AttributeProto INT
  const dims = transB ? [N, K] : [K, N];
  const graph = new WireWriter().bytes(1, node.finish()).string(2, 'fc');
  if (how === 'embedded') {
    const t = new WireWriter();
    for (const d of dims) t.varint(1, d);
    graph.bytes(5, t.varint(2, 1).string(8, 'w').bytes(9, new Uint8Array(weights.buffer)).finish());
  } else if (how === 'external') {
    // An initializer whose bytes are elsewhere (data_location EXTERNAL; ONNX Runtime checks that
    // the file exists, next to the model, but an empty one will do): the session is given them instead.
    const t = new WireWriter();
    for (const d of dims) t.varint(1, d);
    const entry = (key, value) => new WireWriter().string(1, key).string(2, value).finish();
    t.varint(2, 1).string(8, 'w').bytes(13, entry('location', 'weights.external')).bytes(13, entry('length', String(weights.byteLength))).varint(14, 1);
    graph.bytes(5, t.finish());
  }
  graph.bytes(11, valueInfo('x', ['m', K]));
  if (fed) graph.bytes(11, valueInfo('w', dims));
  graph.bytes(12, valueInfo('y', ['m', N]));
  return new WireWriter().varint(1, 8).bytes(7, graph.finish()).bytes(8, new WireWriter().string(1, '').varint(2, 17).finish()).finish();
}

async function time(session, feeds) {
  for (let i = 0; i < 5; i++) await session.run(feeds);
  const t0 = performance.now();
  for (let i = 0; i < RUNS; i++) await session.run(feeds);
  return (performance.now() - t0) / RUNS;
}

const weights = Float32Array.from({ length: K * N }, (_, i) => Math.sin(i) * 0.01);
initOrt();
const dir = mkdtempSync(path.join(os.tmpdir(), 'stowage-gemm-'));
writeFileSync(path.join(dir, 'weights.external'), '');
/** The external-weights model as a file beside its (empty) weights file. */
const externalModel = (op, transB) => {
  const file = path.join(dir, `${op}-${transB}.onnx`);
  writeFileSync(file, model(op, transB, 'external', weights));
  return file;
};
const rel = (a, b) => (a / b).toFixed(2);
console.log('layer              M   embedded    fed/emb  initializer/emb  external/emb   (binding, synchronous runs)');
for (const [op, transB] of [['Gemm', 0], ['Gemm', 1], ['MatMul', 0]]) {
  const dims = transB ? [N, K] : [K, N];
  const embedded = await ort.InferenceSession.create(model(op, transB, 'embedded', weights), { graphOptimizationLevel: 'all' });
  const fed = await ort.InferenceSession.create(model(op, transB, 'fed', weights), { graphOptimizationLevel: 'basic' });
  const w = new ort.Tensor('float32', weights, dims);
  const weight = { name: 'w', type: 1, dims, data: weights };
  const added = OrtSession.open(externalModel(op, transB), { graphOptimizationLevel: 'all', initializers: [weight] });
  const copied = OrtSession.open(externalModel(op, transB), { graphOptimizationLevel: 'all', externalInitializers: [weight] });
  const embeddedNative = OrtSession.open(model(op, transB, 'embedded', weights), { graphOptimizationLevel: 'all' });
  for (const m of [1, 8]) {
    const x = new ort.Tensor('float32', new Float32Array(m * K).fill(0.1), [m, K]);
    const input = { name: 'x', type: 1, dims: [m, K], data: new Float32Array(m * K).fill(0.1) };
    const te = await time(embedded, { x });
    const tf = await time(fed, { x, w });
    const tn = timeNative(embeddedNative, input);
    const ta = timeNative(added, input);
    const tc = timeNative(copied, input);
    const same = equal(added.runSync([input], ['y'])[0].data, embeddedNative.runSync([input], ['y'])[0].data);
    console.log(`${`${op} transB=${transB}`.padEnd(17)} ${String(m).padStart(2)}   ${te.toFixed(2).padStart(6)} ms  ${rel(tf, te).padStart(7)}  ${rel(ta, tn).padStart(15)}  ${rel(tc, tn).padStart(12)}   ${same ? 'same answers' : 'ANSWERS DIFFER'}`);
  }
  await embedded.release();
  await fed.release();
  for (const s of [added, copied, embeddedNative]) s.release();
}

rmSync(dir, { recursive: true });

/** Median-free mean of RUNS synchronous runs after 5 to warm up, in ms. */
function timeNative(session, input) {
  for (let i = 0; i < 5; i++) session.runSync([input], ['y']);
  const t0 = performance.now();
  for (let i = 0; i < RUNS; i++) session.runSync([input], ['y']);
  return (performance.now() - t0) / RUNS;
}

function equal(a, b) {
  const x = new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
  const y = new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
  return x.length === y.length && x.every((v, i) => v === y[i]);
}
