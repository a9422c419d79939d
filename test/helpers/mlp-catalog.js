// Catalogs of generated models for the weight-cache tests and benchmarks: each model is a two-layer
// MLP, y = relu(x·W1 + b1)·W2 + b2 on f32[n, inputs], with its own weights drawn from its seed, so
// every model answers differently and the answer can be computed here to check the server's.
// The ONNX files are written with the protobuf writer the server splits them with.
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { WireWriter } from '../../dist/weights/protobuf-wire.js';

const FLOAT = 1;

/** A deterministic PRNG (mulberry32): the same seed gives the same weights in tests and benchmarks. */
export function random(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function tensor(name, dims, data) {
  const w = new WireWriter();
  for (const d of dims) w.varint(1, d);
  return w.varint(2, FLOAT).string(8, name).bytes(9, new Uint8Array(data.buffer, data.byteOffset, data.byteLength)).finish();
}

function valueInfo(name, dims) {
  const shape = new WireWriter();
  for (const d of dims) shape.bytes(1, typeof d === 'string' ? new WireWriter().string(2, d).finish() : new WireWriter().varint(1, d).finish());
  const tensorType = new WireWriter().varint(1, FLOAT).bytes(2, shape.finish()).finish();
  return new WireWriter().string(1, name).bytes(2, new WireWriter().bytes(1, tensorType).finish()).finish();
}

function node(op, inputs, outputs) {
  const w = new WireWriter();
  for (const i of inputs) w.string(1, i);
  for (const o of outputs) w.string(2, o);
  return w.string(3, `${op}_${outputs[0]}`).string(4, op).finish();
}

/** The weights of one model: { w1, b1, w2, b2 } as Float32Arrays. */
export function mlpWeights(seed, inputs, hidden, outputs) {
  const next = random(seed);
  const fill = (n, scale) => Float32Array.from({ length: n }, () => (next() * 2 - 1) * scale);
  return { w1: fill(inputs * hidden, 1 / Math.sqrt(inputs)), b1: fill(hidden, 0.1), w2: fill(hidden * outputs, 1 / Math.sqrt(hidden)), b2: fill(outputs, 0.1) };
}

/** The serialized ONNX model. */
export function mlpModel(weights, inputs, hidden, outputs) {
  const graph = new WireWriter()
    .bytes(1, node('MatMul', ['x', 'w1'], ['h0']))
    .bytes(1, node('Add', ['h0', 'b1'], ['h1']))
    .bytes(1, node('Relu', ['h1'], ['h2']))
    .bytes(1, node('MatMul', ['h2', 'w2'], ['y0']))
    .bytes(1, node('Add', ['y0', 'b2'], ['y']))
    .string(2, 'mlp')
    .bytes(5, tensor('w1', [inputs, hidden], weights.w1))
    .bytes(5, tensor('b1', [hidden], weights.b1))
    .bytes(5, tensor('w2', [hidden, outputs], weights.w2))
    .bytes(5, tensor('b2', [outputs], weights.b2))
    .bytes(11, valueInfo('x', ['n', inputs]))
    .bytes(12, valueInfo('y', ['n', outputs]))
    .finish();
  const opset = new WireWriter().string(1, '').varint(2, 17).finish();
  return new WireWriter().varint(1, 8).string(2, 'stowage-test').bytes(7, graph).bytes(8, opset).finish();
}

/** What the model answers for one row x, computed here in double precision. */
export function mlpExpected(weights, x, inputs, hidden, outputs) {
  const h = new Float64Array(hidden);
  for (let j = 0; j < hidden; j++) {
    let s = weights.b1[j];
    for (let i = 0; i < inputs; i++) s += x[i] * weights.w1[i * hidden + j];
    h[j] = Math.max(0, s);
  }
  const y = new Float64Array(outputs);
  for (let k = 0; k < outputs; k++) {
    let s = weights.b2[k];
    for (let j = 0; j < hidden; j++) s += h[j] * weights.w2[j * outputs + k];
    y[k] = s;
  }
  return y;
}

/** Bytes of one model's weights. */
export function mlpWeightBytes(inputs, hidden, outputs) {
  return 4 * (inputs * hidden + hidden + hidden * outputs + outputs);
}

/**
 * Write `count` bundles named `${prefix}NN` into `repo`, each an MLP with its own seed.
 * Returns [{ name, seed, weights }].
 */
export function writeCatalog(repo, { count, inputs, hidden, outputs, prefix = 'm', firstSeed = 1 }) {
  const models = [];
  for (let i = 0; i < count; i++) {
    const name = `${prefix}${String(i).padStart(3, '0')}`;
    const seed = firstSeed + i;
    const weights = mlpWeights(seed, inputs, hidden, outputs);
    const dir = path.join(repo, name);
    mkdirSync(dir, { recursive: true });
    writeFileSync(path.join(dir, 'model.onnx'), mlpModel(weights, inputs, hidden, outputs));
    writeFileSync(path.join(dir, 'manifest.yaml'), [
      'format_version: "2.0"',
      'executable_inputs:',
      `  - { name: x, dtype: f32, shape: nk, dims: { k: ${inputs} } }`,
      'executable_outputs:',
      `  - { name: y, dtype: f32, shape: nk, dims: { k: ${outputs} } }`,
      'batching:',
      '  compiled_batch_sizes: [1, 8]',
      '',
    ].join('\n'));
    models.push({ name, seed, weights });
  }
  return models;
}
