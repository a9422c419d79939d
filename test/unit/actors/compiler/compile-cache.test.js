// Compiling an ONNX file once: ONNX Runtime's optimised graph, its weights split off into
// weights.bin, kept in the cache directory; runs fed those weights answer as the original does.
import { mkdirSync, readFileSync, readdirSync, truncateSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import test from 'ava';
import * as ort from 'onnxruntime-node';
import { dtypeInfo } from '../../../../dist/shared/dtypes.js';
import { compileExecutable, weightKey } from '../../../../dist/actors/compiler/compile-cache.js';
import { readFields, readRepeatedVarints } from '../../../../dist/shared/protobuf-wire.js';
import { WEIGHT_MIN_BYTES, movesOut, splitWeights } from '../../../../dist/actors/compiler/split-weights.js';
import { FIXTURES, ROOT, tempDir } from '../../../helpers/server.js';
import { present } from '../../../helpers/checks.js';
import { denseLayer, mlpLayers, writeBundle } from '../../../helpers/mlp-catalog.js';
import { createHash } from 'node:crypto';

const sha256 = (/** @type {Uint8Array} */ bytes) => createHash('sha256').update(bytes).digest('hex');

const CONVNET = path.join(FIXTURES, 'models', 'convnet', 'model.onnx');
const DIGITS = path.join(ROOT, 'bundles', 'digits', 'model.onnx');

/**
 * @param {string} cacheDir
 * @param {{ optimisations: number }} [counter]
 */
const options = (cacheDir, counter = { optimisations: 0 }) => ({
  cacheDir,
  runtime: `onnxruntime ${ort.env.versions.common} cpu`,
  optimise: async (/** @type {string} */ source, /** @type {string} */ target) => {
    counter.optimisations++;
    const s = await ort.InferenceSession.create(source, { graphOptimizationLevel: 'all', optimizedModelFilePath: target, logSeverityLevel: 3 });
    await s.release();
  },
});

/**
 * Feeds for a weightless session: its weights read from the compile cache.
 * @param {import('../../../../dist/shared/channels/compiler.js').CompiledExecutable} compiled
 */
function feedsFromCache(compiled) {
  /** @type {Record<string, import('onnxruntime-node').Tensor>} */
  const feeds = {};
  for (const w of compiled.weights) {
    const info = dtypeInfo(w.datatype);
    const bytes = new Uint8Array(readFileSync(w.path)); // an aligned copy
    const Typed = /** @type {Float32ArrayConstructor} */ (present(info.typedArray, `a typed array for ${w.datatype}`));
    feeds[w.name] = new ort.Tensor(/** @type {'float32'} */ (info.ortType), new Typed(bytes.buffer), w.dims);
  }
  return feeds;
}

test('a compiled model fed its split weights answers as the original does', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  for (const [file, input, shape] of /** @type {[string, string, number[]][]} */ ([[CONVNET, 'image', [2, 3, 32, 32]], [DIGITS, 'image', [3, 8, 8]]])) {
    const compiled = await compileExecutable(file, options(temp.dir));
    t.false(compiled.hit);
    t.true(compiled.weights.length > 0);
    const x = new ort.Tensor('float32', Float32Array.from({ length: shape.reduce((a, b) => a * b) }, (_, i) => Math.sin(i)), shape);
    const original = await ort.InferenceSession.create(file);
    const weightless = await ort.InferenceSession.create(compiled.graphPath, { graphOptimizationLevel: 'basic' });
    t.true(compiled.weights.every((w) => weightless.inputNames.includes(w.name)), 'each weight is a graph input');
    const want = await original.run({ [input]: x });
    const got = await weightless.run({ [input]: x, ...feedsFromCache(compiled) });
    for (const name of original.outputNames) {
      const a = want[name].data;
      const b = got[name].data;
      t.is(a.length, b.length);
      let worst = 0;
      for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(Number(a[i]) - Number(b[i])));
      t.true(worst < 1e-4, `${path.basename(path.dirname(file))} ${name}: max difference ${worst}`);
    }
    await original.release();
    await weightless.release();
  }
});

test('the second open is a cache hit; a damaged entry or a changed file compiles again', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const counter = { optimisations: 0 };
  const first = await compileExecutable(CONVNET, options(temp.dir, counter));
  const second = await compileExecutable(CONVNET, options(temp.dir, counter));
  t.true(second.hit);
  t.is(second.dir, first.dir);
  t.is(counter.optimisations, 1, 'ONNX Runtime optimised the file once');
  truncateSync(first.weights[0].path, 10);
  const repaired = await compileExecutable(CONVNET, options(temp.dir));
  t.false(repaired.hit, 'a damaged tensor file fails the entry');
  t.regex(repaired.damaged ?? '', /tensors\/[0-9a-f]{64}\.bin is not \d+ bytes long/);
  t.is(readFileSync(repaired.weights[0].path).length, first.weights[0].byteLength);
  // Same length, other bytes: the graph's hash in the index catches it.
  const graph = readFileSync(first.graphPath);
  graph[graph.length >> 1] ^= 0xff;
  writeFileSync(first.graphPath, graph);
  const regraphed = await compileExecutable(CONVNET, options(temp.dir));
  t.false(regraphed.hit);
  t.regex(regraphed.damaged ?? '', /graph\.onnx does not hash to the index's [0-9a-f]{64}/);
  t.deepEqual(readFileSync(regraphed.graphPath).length, graph.length);
  t.true((await compileExecutable(CONVNET, options(temp.dir))).hit, 'the entry written again reads back whole');
  writeFileSync(path.join(first.dir, 'index.json'), '{"format": 4, "weig');
  const reindexed = await compileExecutable(CONVNET, options(temp.dir));
  t.false(reindexed.hit);
  t.regex(reindexed.damaged ?? '', /index\.json does not read/);
  // Same bytes under another name: the same entry. Other bytes: another entry.
  const copy = path.join(temp.dir, 'copy.onnx');
  writeFileSync(copy, readFileSync(CONVNET));
  t.is((await compileExecutable(copy, options(temp.dir))).dir, first.dir);
  const other = await compileExecutable(DIGITS, options(temp.dir));
  t.not(other.dir, first.dir);
});

test('devices compiling the same file at once both get a whole entry, and no temporary is left', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const [a, b] = await Promise.all([compileExecutable(CONVNET, options(temp.dir)), compileExecutable(CONVNET, options(temp.dir))]);
  t.is(a.dir, b.dir);
  t.deepEqual(a.weights, b.weights);
  t.deepEqual(readdirSync(temp.dir).sort(), [path.basename(a.dir), 'tensors'].sort());
  t.true(readdirSync(path.join(temp.dir, 'tensors')).every((f) => /^[0-9a-f]{64}\.bin$/.test(f)));
});

test('numeric weights of WEIGHT_MIN_BYTES or more move out, small floats only ops reading them at run time read too; int64 and the rest stay', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  mkdirSync(path.join(temp.dir, 'o'));
  const optimised = path.join(temp.dir, 'o', 'model.onnx');
  await options(temp.dir).optimise(CONVNET, optimised);
  const model = new Uint8Array(readFileSync(optimised));
  const { graph, weights } = splitWeights(model);
  const dec = new TextDecoder();
  // The op types of the optimised graph's nodes reading each name.
  /** @type {Map<string, string[]>} */
  const readers = new Map();
  for (const node of readFields(present(readFields(model).find((f) => f.field === 7)).payload).filter((f) => f.field === 1)) {
    const fields = readFields(node.payload);
    const op = dec.decode(present(fields.find((f) => f.field === 4)).payload);
    for (const input of fields.filter((f) => f.field === 1)) readers.set(dec.decode(input.payload), [...(readers.get(dec.decode(input.payload)) ?? []), op]);
  }
  t.true(weights.every((w) => w.datatype !== 'INT64' && movesOut(w.datatype, w.data.byteLength, readers.get(w.name) ?? [])));
  t.true(weights.some((w) => w.data.byteLength < WEIGHT_MIN_BYTES), 'a small float (a bias) moved out too');
  const graphFields = readFields(present(readFields(graph).find((f) => f.field === 7)).payload);
  for (const init of graphFields.filter((f) => f.field === 5)) {
    const fields = readFields(init.payload);
    const type = fields.find((f) => f.field === 2)?.varint;
    const count = readRepeatedVarints(fields, 1).reduce((a, b) => a * b, 1);
    const name = dec.decode(present(fields.find((f) => f.field === 8)).payload);
    t.true(type === 7 || type === 8 || (type === 1 && !movesOut('FP32', count * 4, readers.get(name) ?? [])), `initializer ${name} of type ${type} with ${count} elements stayed`);
  }
  // Every node is copied byte for byte, but for GEMMs whose weight moved: those now read it transposed.
  const nodesOf = (/** @type {Uint8Array} */ bytes) => readFields(present(readFields(bytes).find((f) => f.field === 7)).payload).filter((f) => f.field === 1);
  const before = nodesOf(model);
  const after = nodesOf(graph);
  t.is(after.length, before.length);
  let gemms = 0;
  after.forEach((node, i) => {
    const fields = readFields(node.payload);
    const op = dec.decode(present(fields.find((f) => f.field === 4)).payload);
    if (Buffer.compare(Buffer.from(node.raw), Buffer.from(before[i].raw)) === 0) return;
    t.is(op, 'Gemm', `only GEMM nodes change, not ${op}`);
    gemms++;
    const transB = present(fields.filter((f) => f.field === 5).map((a) => readFields(a.payload)).find((a) => dec.decode(present(a.find((x) => x.field === 1)).payload) === 'transB'), 'a transB attribute');
    t.is(present(transB.find((x) => x.field === 3)).varint, 1);
    const b = dec.decode(fields.filter((f) => f.field === 1)[1].payload);
    const w = weights.find((x) => x.name === b);
    t.truthy(w, 'its B is a moved weight');
  });
  t.is(gemms, 1, 'the convnet\'s classifier');
});

test('variants of one architecture compile to equal graphs, a small bias or a large weight of their own apart; another head size does not', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const repo = path.join(temp.dir, 'repo');
  const base = mlpLayers(3, [16, 32, 4]);
  const bias = base.map((l, i) => (i === 1 ? { ...l, b: l.b.map((v) => v + 0.5) } : l)); // 16 bytes: under WEIGHT_MIN_BYTES
  const weight = base.map((l, i) => (i === 0 ? denseLayer(77, l.inputs, l.outputs) : l));
  writeBundle(repo, 'base', base);
  writeBundle(repo, 'bias', bias);
  writeBundle(repo, 'weight', weight);
  writeBundle(repo, 'wider', mlpLayers(3, [16, 32, 6]));
  const [a, b, c, d] = await Promise.all(['base', 'bias', 'weight', 'wider'].map((n) => compileExecutable(path.join(repo, n, 'model.onnx'), options(temp.dir))));
  t.is(new Set([a.dir, b.dir, c.dir, d.dir]).size, 4, 'four entries: their sources differ');
  t.is(b.graph, a.graph, 'a small bias of its own: the same graph');
  t.is(c.graph, a.graph, 'a large weight of its own: the same graph');
  t.not(d.graph, a.graph, 'another head size: another graph');
  t.not(b.weights.find((w) => w.dims.length === 1 && w.dims[0] === 4)?.key, a.weights.find((w) => w.dims.length === 1 && w.dims[0] === 4)?.key, 'the small bias is a weight of its own');
  t.is(sha256(readFileSync(a.graphPath)), a.graph);
});

test('tensors are keyed by datatype, dims and bytes: equal bytes in another shape are another tensor', (t) => {
  const bytes = new Uint8Array(24).map((_, i) => i);
  const key = weightKey('FP32', [2, 3], bytes);
  t.is(weightKey('FP32', [2, 3], bytes.slice()), key);
  t.not(weightKey('FP32', [3, 2], bytes), key);
  t.not(weightKey('INT32', [2, 3], bytes), key);
  t.not(weightKey('FP32', [23], bytes), weightKey('FP32', [2, 3], bytes), 'the dims list cannot run into the next one');
});
