// One fully-connected layer (x[M, 8192] · W[8192, 2048]) straight on ONNX Runtime, with W embedded
// (a constant ORT prepacks once, at session creation) and with W fed as an input (how the weight
// cache feeds every weight: packed again on every run). For Gemm with transB 0 and 1, and MatMul,
// at M = 1 and 8. Prints the fed/embedded ratio of each.
//
//   npm run build && node bench/gemm-weights.js
import * as ort from 'onnxruntime-node';
import { WireWriter } from '../dist/shared/protobuf-wire.js';
import { valueInfo } from '../test/helpers/mlp-catalog.js';

const K = 8192;
const N = 2048;
const RUNS = 30;

function model(op, transB, fed, weights) {
  const node = new WireWriter().string(1, 'x').string(1, 'w').string(2, 'y').string(3, 'fc').string(4, op);
  if (transB) node.bytes(5, new WireWriter().string(1, 'transB').varint(3, 1).varint(20, 2).finish()); // AttributeProto INT
  const dims = transB ? [N, K] : [K, N];
  const graph = new WireWriter().bytes(1, node.finish()).string(2, 'fc');
  if (!fed) {
    const t = new WireWriter();
    for (const d of dims) t.varint(1, d);
    graph.bytes(5, t.varint(2, 1).string(8, 'w').bytes(9, new Uint8Array(weights.buffer)).finish());
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
console.log('layer              M   embedded    fed        fed/embedded');
for (const [op, transB] of [['Gemm', 0], ['Gemm', 1], ['MatMul', 0]]) {
  const embedded = await ort.InferenceSession.create(model(op, transB, false, weights), { graphOptimizationLevel: 'all' });
  const fed = await ort.InferenceSession.create(model(op, transB, true, weights), { graphOptimizationLevel: 'basic' });
  const w = new ort.Tensor('float32', weights, transB ? [N, K] : [K, N]);
  for (const m of [1, 8]) {
    const x = new ort.Tensor('float32', new Float32Array(m * K).fill(0.1), [m, K]);
    const te = await time(embedded, { x });
    const tf = await time(fed, { x, w });
    console.log(`${`${op} transB=${transB}`.padEnd(17)} ${String(m).padStart(2)}   ${te.toFixed(2).padStart(6)} ms  ${tf.toFixed(2).padStart(6)} ms  ${(tf / te).toFixed(2)}`);
  }
  await embedded.release();
  await fed.release();
}
