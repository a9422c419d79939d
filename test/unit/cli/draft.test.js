import { readFileSync } from 'node:fs';
import path from 'node:path';
import test from 'ava';
import { draftManifest } from '../../../dist/cli/draft.js';
import { readGraphFile } from '../../../dist/cli/graph-file.js';
import { parseManifest } from '../../../dist/bundle/manifest.js';
import { FIXTURES, ROOT } from '../../helpers/server.js';

/**
 * A tensor as onnxruntime-node's session metadata reports it.
 * @param {string} name
 * @param {(number | string)[]} shape
 */
const g = (name, shape, type = 'float32') => ({ name, isTensor: true, type, shape });
const options = (extra = {}) => ({ name: 'm', source: 'm.onnx', batchAxis: 'n', axes: {}, ...extra });

test('a symbolic name every tensor shares is the batch axis; one-letter names are axis letters', (t) => {
  const draft = draftManifest([g('x', ['unk__7', 'c'])], [g('y', ['unk__7'], 'int64')], options({ axes: { x: 'nc' } }));
  t.deepEqual(draft.problems, [`input "x" [unk__7, c]: axis 1 ("c") has no fixed size and is not the batch axis; Stowage serves fixed sizes beyond the batch axis: export the model with a fixed size there, or mark it the batch axis with --axes x=cn`]);
  const ok = draftManifest([g('x', ['unk__7', 3])], [g('y', ['unk__7'], 'int64')], options({ axes: { x: 'nk' } }));
  t.deepEqual(ok.problems, []);
  t.deepEqual(ok.inputs, [{ name: 'x', dtype: 'f32', axes: 'nk', dims: { k: 3 } }]);
  t.deepEqual(ok.outputs, [{ name: 'y', dtype: 'i64', axes: 'n', dims: {} }]);
  t.deepEqual(ok.batchSizes, [1, 8, 32]);
});

test('the drafted text is a manifest the server parses to the same tensors', (t) => {
  const draft = draftManifest([g('image', ['batch', 3, 4])], [g('score', ['batch', 2])],
    options({ name: 'digits', axes: { image: 'nhw', score: 'nk' }, batchSizes: [4, 1] }));
  t.deepEqual(draft.problems, []);
  const spec = parseManifest(draft.text, path.join(ROOT, 'bundles', 'digits'));
  t.deepEqual(spec.inputs, [{ name: 'image', datatype: 'FP32', axes: 'nhw', shape: [-1, 3, 4], batchDim: 0 }]);
  t.deepEqual(spec.outputs, [{ name: 'score', datatype: 'FP32', axes: 'nk', shape: [-1, 2], batchDim: 0 }]);
  t.deepEqual(spec.compiledBatchSizes, [1, 4]);
});

test('another batch axis letter, anywhere in the shape, is written to batching.batch_axis', (t) => {
  const draft = draftManifest([g('seq', [5, 'b'])], [g('out', [5, 'b'])], options({ batchAxis: 'b', axes: { seq: 'tb', out: 'tb' } }));
  t.deepEqual(draft.problems, []);
  t.regex(draft.text, /shape: "tb", dims: \{ t: 5 \}/);
  t.regex(draft.text, /batch_axis: b/);
});

test('a batch axis the graph fixes runs that size only, and other --batch-sizes are refused', (t) => {
  const fixed = draftManifest([g('x', [4, 3])], [g('y', [4, 3])], options({ axes: { x: 'nk', y: 'nk' } }));
  t.deepEqual(fixed.problems, []);
  t.deepEqual(fixed.batchSizes, [4]);
  const asked = draftManifest([g('x', [4, 3])], [g('y', [4, 3])], options({ axes: { x: 'nk', y: 'nk' }, batchSizes: [1, 8] }));
  t.regex(asked.problems[0], /--batch-sizes 1,8: the graph fixes the batch axis 'n' to 4, so it runs batches of 4 only/);
});

test('dtypes the binding cannot hold, non-tensors, bad --axes and repeated letters are each a problem', (t) => {
  const draft = draftManifest(
    [g('x', ['n', 3], 'complex64'), { name: 'seq', isTensor: false }, g('z', ['n', 2, 2])],
    [g('y', ['n', 3])],
    options({ axes: { y: 'nkk', z: 'nkk' } }));
  t.true(draft.problems.some((p) => /input "x" has element type complex64, which the KServe protocol cannot carry/.test(p)));
  t.true(draft.problems.some((p) => /input "seq" is not a tensor/.test(p)));
  t.true(draft.problems.some((p) => /--axes y=nkk: output "y" has 2 axes \[n, 3\]; give one lower-case letter per axis/.test(p)));
  t.true(draft.problems.some((p) => /input "z" \[n, 2, 2\]: axis letter 'k' is used twice/.test(p)));
  t.is(draft.text, '');
});

test('the ONNX file\'s element types and dimension denotations are read from its protobuf', (t) => {
  const tensors = readGraphFile(readFileSync(path.join(FIXTURES, 'graphs', 'named.onnx')));
  t.deepEqual(tensors.map((x) => [x.name, x.side, x.elemType, x.denotations]), [
    ['image', 'input', 1, ['DATA_BATCH', 'DATA_CHANNEL', 'h', 'w']],
    ['scores', 'output', 1, ['', 'k']],
    ['label', 'output', 7, ['']],
  ]);
  const bf16 = readGraphFile(readFileSync(path.join(FIXTURES, 'graphs', 'bf16.onnx')));
  t.deepEqual(bf16.map((x) => [x.name, x.elemType]), [['x', 1], ['y', 16]]);
});
