import test from 'ava';
import { checkSignature } from '../../../dist/bundle/signature.js';
import { modelSpec } from '../../helpers/specs.js';
import { stowageThrows } from '../../helpers/errors.js';

const spec = modelSpec({
  name: 'm',
  dir: '/r/m',
  inputs: [{ name: 'x', datatype: 'FP32', axes: 'nhw', shape: [-1, 2, 3], batchDim: 0 }],
  outputs: [{ name: 'y', datatype: 'INT64', axes: 'n', shape: [-1], batchDim: 0 }],
  batchAxis: 'n',
  compiledBatchSizes: [1, 4],
  maxBatchSize: 4,
});
const dynamic = { batchSize: null, path: '/r/m/model.onnx' };
const fixed4 = { batchSize: 4, path: '/r/m/model.b4.onnx' };
/** A graph tensor as onnxruntime-node describes it: symbolic dimensions are strings. @param {(number | string)[]} shape */
const x = (shape, type = 'float32') => ({ name: 'x', isTensor: true, type, shape });
/** @param {(number | string)[]} shape */
const y = (shape = ['N'], type = 'int64') => ({ name: 'y', isTensor: true, type, shape });

test('a graph that matches passes, symbolic dimensions included', (t) => {
  t.notThrows(() => checkSignature(spec, dynamic, [x(['N', 2, 3])], [y()]));
  t.notThrows(() => checkSignature(spec, dynamic, [x(['N', 'H', 3])], [y()]), 'a symbolic non-batch axis is narrowed by the manifest');
  t.notThrows(() => checkSignature(spec, fixed4, [x([4, 2, 3])], [y([4])]));
});

test('every mismatch is named with the file, the tensor and both values', (t) => {
  const err = stowageThrows(t, () => checkSignature(spec, dynamic, [x(['N', 2, 4], 'float64'), { name: 'z', isTensor: true, type: 'float32', shape: [1] }], [y(['N', 1])]));
  t.is(err.code, 'STOWAGE_BUNDLE_INVALID');
  t.regex(err.message, /^bundle "m", model\.onnx: does not match manifest\.yaml: /);
  t.regex(err.message, /input "x": manifest dtype f32, graph dtype f64/);
  t.regex(err.message, /the graph has inputs "z" that executable_inputs does not declare/);
  t.regex(err.message, /output "y": manifest shape "n" has rank 1, graph shape \[N, 1\] has rank 2/);
});

test('fixed dimensions must agree', (t) => {
  t.regex(t.throws(() => checkSignature(spec, dynamic, [x(['N', 2, 4])], [y()])).message, /input "x": axis 'w' is 3 in the manifest, 4 in the graph/);
  t.regex(t.throws(() => checkSignature(spec, fixed4, [x([8, 2, 3])], [y([4])])).message, /model\.b4\.onnx.*batch axis 'n' is 8 in the graph, expected 4/);
});

test('model.onnx must leave the batch axis dynamic when several sizes are compiled', (t) => {
  t.regex(t.throws(() => checkSignature(spec, dynamic, [x([1, 2, 3])], [y([1])])).message,
    /fixes batch axis 'n' to 1, but compiled_batch_sizes is \[1, 4\]/);
  const one = { ...spec, compiledBatchSizes: [1], maxBatchSize: 1 };
  t.notThrows(() => checkSignature(one, dynamic, [x([1, 2, 3])], [y([1])]));
});

test('a missing tensor lists what the graph has', (t) => {
  t.regex(t.throws(() => checkSignature(spec, dynamic, [{ ...x(['N', 2, 3]), name: 'input' }], [y()])).message,
    /executable_inputs names "x", but the graph's inputs are "input"/);
});

test('bf16 is refused because the Node binding cannot feed it', (t) => {
  const bf = modelSpec({ ...spec, inputs: [{ ...spec.inputs[0], datatype: 'BF16' }] });
  t.regex(t.throws(() => checkSignature(bf, dynamic, [x(['N', 2, 3], 'bfloat16')], [y()])).message, /dtype bf16 cannot be fed/);
});
