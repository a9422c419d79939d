// Catalogs of generated models for the weight-cache tests and benchmarks: each model is an MLP,
// relu(x·W1 + b1) … ·Wn + bn on f32[n, inputs], with weights drawn from seeds, so every model
// answers differently and the answer can be computed here to check the server's. Layers can be
// shared between models (a frozen backbone under per-model heads). The ONNX files are written
// with the protobuf writer the server splits them with.
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { WireWriter } from '../../dist/shared/protobuf-wire.js';

const FLOAT = 1;

/** One dense layer: y = x·w + b, w row-major [inputs, outputs]. @typedef {{ inputs: number, outputs: number, w: Float32Array, b: Float32Array }} Layer */
/** A bundle written into a repository, and the layers that give its answers. @typedef {{ name: string, layers: Layer[] }} CatalogModel */

/**
 * A deterministic PRNG (mulberry32): the same seed gives the same weights in tests and benchmarks.
 * @param {number} seed
 * @returns {() => number} numbers in [0, 1)
 */
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

/**
 * One dense layer { inputs, outputs, w: Float32Array[inputs*outputs], b: Float32Array[outputs] } drawn from `seed`.
 * @param {number} seed
 * @param {number} inputs
 * @param {number} outputs
 * @returns {Layer}
 */
export function denseLayer(seed, inputs, outputs) {
  const next = random(seed);
  const fill = (/** @type {number} */ n, /** @type {number} */ scale) => Float32Array.from({ length: n }, () => (next() * 2 - 1) * scale);
  return { inputs, outputs, w: fill(inputs * outputs, 1 / Math.sqrt(inputs)), b: fill(outputs, 0.1) };
}

/**
 * Layers for sizes [inputs, hidden..., outputs], layer i drawn from seed*1000 + i.
 * @param {number} seed
 * @param {number[]} sizes
 * @returns {Layer[]}
 */
export function mlpLayers(seed, sizes) {
  return sizes.slice(1).map((outputs, i) => denseLayer(seed * 1000 + i, sizes[i], outputs));
}

/**
 * An ONNX TensorProto of floats.
 * @param {string} name
 * @param {number[]} dims
 * @param {Float32Array} data
 */
export function tensor(name, dims, data) {
  const w = new WireWriter();
  for (const d of dims) w.varint(1, d);
  return w.varint(2, FLOAT).string(8, name).bytes(9, new Uint8Array(data.buffer, data.byteOffset, data.byteLength)).finish();
}

/** The file every external-data initializer of `mlpModel(layers, { externalWeights: true })` names. */
export const EXTERNAL_WEIGHTS_FILE = 'weights.external';

/**
 * An ONNX TensorProto of floats whose bytes are not in the model (data_location EXTERNAL): ONNX
 * Runtime wants the file to exist beside the model, and is given the bytes by the caller.
 * @param {string} name
 * @param {number[]} dims
 * @param {number} byteLength
 */
function externalTensor(name, dims, byteLength) {
  const w = new WireWriter();
  for (const d of dims) w.varint(1, d);
  const entry = (/** @type {string} */ key, /** @type {string} */ value) => new WireWriter().string(1, key).string(2, value).finish();
  return w.varint(2, FLOAT).string(8, name).bytes(13, entry('location', EXTERNAL_WEIGHTS_FILE)).bytes(13, entry('length', String(byteLength))).varint(14, 1).finish();
}

/**
 * A graph input or output declaration: a float tensor of `dims` (strings are symbolic dims).
 * @param {string} name
 * @param {(number | string)[]} dims
 */
export function valueInfo(name, dims) {
  const shape = new WireWriter();
  for (const d of dims) shape.bytes(1, typeof d === 'string' ? new WireWriter().string(2, d).finish() : new WireWriter().varint(1, d).finish());
  const tensorType = new WireWriter().varint(1, FLOAT).bytes(2, shape.finish()).finish();
  return new WireWriter().string(1, name).bytes(2, new WireWriter().bytes(1, tensorType).finish()).finish();
}

/**
 * An ONNX NodeProto.
 * @param {string} op
 * @param {string[]} inputs
 * @param {string[]} outputs
 */
function node(op, inputs, outputs) {
  const w = new WireWriter();
  for (const i of inputs) w.string(1, i);
  for (const o of outputs) w.string(2, o);
  return w.string(3, `${op}_${outputs[0]}`).string(4, op).finish();
}

/**
 * The serialized ONNX model of `layers`: input x, output y; its weights w0, b0, w1, ... embedded,
 * or with `externalWeights` stored as external data the caller hands the session, or with
 * `weightsAsInputs` none at all: each weight a graph input (a weightless graph, as the compiler makes).
 * @param {Layer[]} layers
 * @param {{ externalWeights?: boolean, weightsAsInputs?: boolean }} [options]
 */
export function mlpModel(layers, { externalWeights = false, weightsAsInputs = false } = {}) {
  const weight = (/** @type {string} */ name, /** @type {number[]} */ dims, /** @type {Float32Array} */ data) => (externalWeights ? externalTensor(name, dims, data.byteLength) : tensor(name, dims, data));
  const graph = new WireWriter();
  let current = 'x';
  layers.forEach((l, i) => {
    const last = i === layers.length - 1;
    graph.bytes(1, node('MatMul', [current, `w${i}`], [`m${i}`]));
    graph.bytes(1, node('Add', [`m${i}`, `b${i}`], [last ? 'y' : `a${i}`]));
    if (!last) graph.bytes(1, node('Relu', [`a${i}`], [`h${i}`]));
    current = `h${i}`;
  });
  graph.string(2, 'mlp');
  if (weightsAsInputs) layers.forEach((l, i) => graph.bytes(11, valueInfo(`w${i}`, [l.inputs, l.outputs])).bytes(11, valueInfo(`b${i}`, [l.outputs])));
  else layers.forEach((l, i) => graph.bytes(5, weight(`w${i}`, [l.inputs, l.outputs], l.w)).bytes(5, weight(`b${i}`, [l.outputs], l.b)));
  graph.bytes(11, valueInfo('x', ['n', layers[0].inputs])).bytes(12, valueInfo('y', ['n', layers[layers.length - 1].outputs]));
  const opset = new WireWriter().string(1, '').varint(2, 17).finish();
  return new WireWriter().varint(1, 8).string(2, 'stowage-test').bytes(7, graph.finish()).bytes(8, opset).finish();
}

/**
 * What the model answers for one row x, computed here in double precision.
 * @param {Layer[]} layers
 * @param {ArrayLike<number>} x
 */
export function mlpExpected(layers, x) {
  let v = Float64Array.from(x);
  layers.forEach((l, i) => {
    const out = new Float64Array(l.outputs);
    for (let k = 0; k < l.outputs; k++) {
      let s = l.b[k];
      for (let j = 0; j < l.inputs; j++) s += v[j] * l.w[j * l.outputs + k];
      out[k] = i === layers.length - 1 ? s : Math.max(0, s);
    }
    v = out;
  });
  return v;
}

/**
 * Bytes of the weights of an MLP with these sizes.
 * @param {number[]} sizes
 */
export function mlpWeightBytes(sizes) {
  return 4 * sizes.slice(1).reduce((sum, outputs, i) => sum + sizes[i] * outputs + outputs, 0);
}

/**
 * Write one bundle of `layers` named `name` into `repo`.
 * @param {string} repo
 * @param {string} name
 * @param {Layer[]} layers
 * @returns {CatalogModel}
 */
export function writeBundle(repo, name, layers) {
  const dir = path.join(repo, name);
  mkdirSync(dir, { recursive: true });
  writeFileSync(path.join(dir, 'model.onnx'), mlpModel(layers));
  writeFileSync(path.join(dir, 'manifest.yaml'), [
    'format_version: "2.0"',
    'executable_inputs:',
    `  - { name: x, dtype: f32, shape: nk, dims: { k: ${layers[0].inputs} } }`,
    'executable_outputs:',
    `  - { name: y, dtype: f32, shape: nk, dims: { k: ${layers[layers.length - 1].outputs} } }`,
    'batching:',
    '  compiled_batch_sizes: [1, 8]',
    '',
  ].join('\n'));
  return { name, layers };
}

/**
 * `count` bundles named `${prefix}NNN`, each an MLP of `sizes` with weights of its own.
 * @param {string} repo
 * @param {{ count: number, sizes: number[], prefix?: string, firstSeed?: number }} options
 * @returns {CatalogModel[]}
 */
export function writeCatalog(repo, { count, sizes, prefix = 'm', firstSeed = 1 }) {
  return Array.from({ length: count }, (_, i) => writeBundle(repo, `${prefix}${String(i).padStart(3, '0')}`, mlpLayers(firstSeed + i, sizes)));
}

/**
 * `count` variants fine-tuned from one backbone: every layer but the last comes from the same
 * backbone, except that every `unfrozenEvery`-th variant has its own second-to-last layer too;
 * the last layer (the head) is each variant's own.
 * @param {string} repo
 * @param {{ count: number, sizes: number[], prefix?: string, unfrozenEvery?: number, backboneSeed?: number }} options
 * @returns {CatalogModel[]}
 */
export function writeVariants(repo, { count, sizes, prefix = 'v', unfrozenEvery = 0, backboneSeed = 7 }) {
  const backbone = mlpLayers(backboneSeed, sizes);
  const last = sizes.length - 2;
  return Array.from({ length: count }, (_, i) => {
    const layers = backbone.map((l, k) => {
      if (k === last) return denseLayer(100_000 + i, l.inputs, l.outputs);
      if (k === last - 1 && unfrozenEvery > 0 && i % unfrozenEvery === 0) return denseLayer(200_000 + i, l.inputs, l.outputs);
      return l;
    });
    return writeBundle(repo, `${prefix}${String(i).padStart(3, '0')}`, layers);
  });
}

/**
 * Call `model` ({ name, layers }) with `rows` rows drawn from `next` and compare every output with
 * what its own weights give. Resolves to null when all match, else a message naming the mismatch.
 * @param {import('../../dist/client/client.js').InferenceClient} client
 * @param {CatalogModel} model
 * @param {number} rows
 * @param {() => number} next
 * @returns {Promise<string | null>}
 */
export async function inferAndCheck(client, model, rows, next) {
  const inputs = model.layers[0].inputs;
  const outputs = model.layers[model.layers.length - 1].outputs;
  const x = Float32Array.from({ length: rows * inputs }, () => next() * 2 - 1);
  const reply = await client.infer(model.name, [{ name: 'x', datatype: 'FP32', shape: [rows, inputs], data: x }]);
  const y = /** @type {Float32Array} */ (reply.outputs[0].data);
  for (let r = 0; r < rows; r++) {
    const want = mlpExpected(model.layers, x.subarray(r * inputs, (r + 1) * inputs));
    for (let k = 0; k < outputs; k++) {
      const got = y[r * outputs + k];
      if (!(Math.abs(got - want[k]) <= 1e-4 * (1 + Math.abs(want[k])))) return `${model.name} row ${r} output ${k}: got ${got}, its own weights give ${want[k]}`;
    }
  }
  return null;
}
