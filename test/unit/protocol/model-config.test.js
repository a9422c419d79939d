import test from 'ava';
import { modelConfig, modelMetadata } from '../../../dist/protocol/model-config.js';
import { modelSpec, tensorSpec } from '../../helpers/specs.js';

const tensor = tensorSpec;
const base = modelSpec({
  name: 'm', dir: '/r/m', batchAxis: 'n', compiledBatchSizes: [1, 8], maxBatchSize: 8,
  executables: [{ batchSize: null, path: '/r/m/model.onnx' }],
  inputs: [tensor('x', 'FP32', 'nhw', [-1, 8, 8], 0)],
  outputs: [tensor('label', 'INT64', 'n', [-1], 0)],
});
/**
 * A spec whose client tensors are its executable tensors.
 * @param {Partial<import('../../../dist/shared/model-spec.js').ModelSpec>} s
 */
const plain = (s) => modelSpec({ ...s, clientInputs: s.inputs, clientOutputs: s.outputs });

test('a leading batch axis is implicit in ModelConfig, explicit (-1) in ModelMetadata', (t) => {
  const config = modelConfig(base);
  t.is(config.max_batch_size, 8);
  t.deepEqual(config.input, [{ name: 'x', data_type: 'TYPE_FP32', format: 'FORMAT_NONE', dims: [8, 8] }]);
  t.deepEqual(config.output, [{ name: 'label', data_type: 'TYPE_INT64', dims: [1], reshape: { shape: [] } }]);
  t.is(config.platform, 'onnxruntime_onnx');
  t.deepEqual(config.dynamic_batching, { preferred_batch_size: [1, 8], max_queue_delay_microseconds: 0 });
  t.is(modelConfig(base, 1).dynamic_batching, undefined, 'max_batch_size 1: requests run alone');
  t.deepEqual(modelConfig(base, 4).dynamic_batching?.preferred_batch_size, [1]);
  t.deepEqual(modelConfig(base, 8, { levels: 3, defaultLevel: 2 }).dynamic_batching, { preferred_batch_size: [1, 8], max_queue_delay_microseconds: 0, priority_levels: 3, default_priority_level: 2 },
    'the priority levels as Triton\'s dynamic batcher reports them');
  const md = modelMetadata(base);
  t.deepEqual(md.inputs, [{ name: 'x', datatype: 'FP32', shape: [-1, 8, 8] }]);
  t.deepEqual(md.versions, ['1']);
});

test('a batch axis that is not leading keeps -1 in place and max_batch_size 0', (t) => {
  const spec = plain({ ...base, inputs: [tensor('x', 'FP32', 'kn', [4, -1], 1)], outputs: [tensor('y', 'FP32', 'kn', [4, -1], 1)] });
  const config = modelConfig(spec);
  t.is(config.max_batch_size, 0);
  t.deepEqual(config.input[0].dims, [4, -1]);
});

test('an unbatched model has max_batch_size 0 and its full dims', (t) => {
  const spec = plain({ ...base, batchAxis: null, compiledBatchSizes: [], maxBatchSize: 0, inputs: [tensor('x', 'FP32', 'k', [3], -1)], outputs: [tensor('y', 'BYTES', 'k', [3], -1)] });
  const config = modelConfig(spec);
  t.is(config.max_batch_size, 0);
  t.deepEqual(config.output[0], { name: 'y', data_type: 'TYPE_STRING', dims: [3] });
});
