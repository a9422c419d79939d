// A generated convolutional network, for the benchmarks that need a model whose run grows with its
// batch (bench/slo.js): its weights are few and reused at every pixel, so each row costs about
// the same at batch 1 and at batch 8, as most vision models do on a CPU (an MLP's run is bound by
// reading its weights, so its batch of 8 costs little more than 1). Written with the same protobuf
// writer as mlp-catalog.js, so no Python is needed.
//
//   image f32[n, 3, size, size] -> conv 3x3 (3 -> channels), relu, then `layers` times
//   conv 3x3 (channels -> channels), relu -> global average pool -> flatten -> ·W + b -> scores f32[n, 10]
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { WireWriter } from '../../dist/shared/protobuf-wire.js';
import { random, tensor, valueInfo } from './mlp-catalog.js';

const ATTRIBUTE_INTS = 7;
const ATTRIBUTE_INT = 2;

/** An AttributeProto of ints (type INTS) or of one int. @param {string} name @param {number[] | number} value */
function attribute(name, value) {
  const w = new WireWriter().string(1, name);
  if (Array.isArray(value)) {
    for (const v of value) w.varint(8, v);
    return w.varint(20, ATTRIBUTE_INTS).finish();
  }
  return w.varint(3, value).varint(20, ATTRIBUTE_INT).finish();
}

/** @param {string} op @param {string[]} inputs @param {string[]} outputs @param {Uint8Array[]} [attributes] */
function node(op, inputs, outputs, attributes = []) {
  const w = new WireWriter();
  for (const i of inputs) w.string(1, i);
  for (const o of outputs) w.string(2, o);
  w.string(3, `${op}_${outputs[0]}`).string(4, op);
  for (const a of attributes) w.bytes(5, a);
  return w.finish();
}

/**
 * The serialized ONNX model (opset 17), weights drawn from `seed` (He-initialised).
 * @param {{ size: number, channels: number, layers: number, seed?: number }} shape
 */
export function convnetModel({ size, channels, layers, seed = 1 }) {
  const next = random(seed);
  const fill = (/** @type {number} */ n, /** @type {number} */ scale) => Float32Array.from({ length: n }, () => (next() * 2 - 1) * scale);
  const graph = new WireWriter();
  const conv3x3 = [attribute('kernel_shape', [3, 3]), attribute('pads', [1, 1, 1, 1])];
  let current = 'image';
  for (let i = 0; i <= layers; i++) {
    const cin = i === 0 ? 3 : channels;
    graph.bytes(1, node('Conv', [current, `cw${i}`, `cb${i}`], [`c${i}`], conv3x3));
    graph.bytes(1, node('Relu', [`c${i}`], [`r${i}`]));
    graph.bytes(5, tensor(`cw${i}`, [channels, cin, 3, 3], fill(channels * cin * 9, Math.sqrt(6 / (cin * 9)))));
    graph.bytes(5, tensor(`cb${i}`, [channels], fill(channels, 0.01)));
    current = `r${i}`;
  }
  graph.bytes(1, node('GlobalAveragePool', [current], ['pooled']));
  graph.bytes(1, node('Flatten', ['pooled'], ['features'], [attribute('axis', 1)]));
  graph.bytes(1, node('Gemm', ['features', 'fw', 'fb'], ['scores']));
  graph.bytes(5, tensor('fw', [channels, 10], fill(channels * 10, Math.sqrt(1 / channels))));
  graph.bytes(5, tensor('fb', [10], fill(10, 0.1)));
  graph.string(2, 'convnet');
  graph.bytes(11, valueInfo('image', ['n', 3, size, size])).bytes(12, valueInfo('scores', ['n', 10]));
  const opset = new WireWriter().string(1, '').varint(2, 17).finish();
  return new WireWriter().varint(1, 8).string(2, 'stowage-bench').bytes(7, graph.finish()).bytes(8, opset).finish();
}

/**
 * Write the bundle `name` of `convnetModel(shape)` into `repo`, compiled for batches of 1 and 8.
 * @param {string} repo
 * @param {string} name
 * @param {{ size: number, channels: number, layers: number, seed?: number }} shape
 */
export function writeConvnetBundle(repo, name, shape) {
  const dir = path.join(repo, name);
  mkdirSync(dir, { recursive: true });
  writeFileSync(path.join(dir, 'model.onnx'), convnetModel(shape));
  writeFileSync(path.join(dir, 'manifest.yaml'), [
    'format_version: "2.0"',
    'executable_inputs:',
    `  - { name: image, dtype: f32, shape: nchw, dims: { c: 3, h: ${shape.size}, w: ${shape.size} } }`,
    'executable_outputs:',
    '  - { name: scores, dtype: f32, shape: nk, dims: { k: 10 } }',
    'batching:',
    '  compiled_batch_sizes: [1, 8]',
    '',
  ].join('\n'));
}
