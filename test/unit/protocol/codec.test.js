import test from 'ava';
import { fromModelInferRequest, inferResponse } from '../../../dist/protocol/codec.js';
import { checkRequest, checkTensors } from '../../../dist/shared/request-check.js';
import { joinBytesElements } from '../../../dist/shared/bytes-elements.js';
import { modelSpec } from '../../helpers/specs.js';
import { stowageThrows } from '../../helpers/errors.js';
import { fromErrorData } from '../../../dist/shared/errors.js';

// Requests as @grpc/proto-loader hands them over (defaults filled in, int64 as strings).
/** @typedef {import('../../../dist/protocol/types.js').ModelInferRequest} ModelInferRequest */
/** @typedef {import('../../../dist/protocol/types.js').InferInputTensor} InferInputTensor */
/**
 * @param {string} name
 * @param {string} datatype
 * @param {number[]} shape
 * @param {Partial<InferInputTensor>} [extra]
 * @returns {InferInputTensor}
 */
const input = (name, datatype, shape, extra = {}) => ({ name, datatype, shape: shape.map(String), parameters: {}, contents: null, ...extra });
/**
 * @param {InferInputTensor[]} inputs
 * @param {Buffer[]} [raw]
 * @param {Partial<ModelInferRequest>} [extra]
 * @returns {ModelInferRequest}
 */
const request = (inputs, raw = [], extra = {}) => ({ model_name: 'm', model_version: '', id: '', parameters: {}, inputs, outputs: [], raw_input_contents: raw, ...extra });
const raw = (/** @type {ArrayBufferView} */ typed) => Buffer.from(typed.buffer, typed.byteOffset, typed.byteLength);

const spec = modelSpec({
  name: 'm',
  dir: '/r/m',
  inputs: [
    { name: 'a', datatype: 'FP32', axes: 'nk', shape: [-1, 2], batchDim: 0 },
    { name: 's', datatype: 'BYTES', axes: 'n', shape: [-1], batchDim: 0 },
  ],
  outputs: [
    { name: 'p', datatype: 'FP32', axes: 'nk', shape: [-1, 2], batchDim: 0 },
    { name: 'q', datatype: 'INT64', axes: 'n', shape: [-1], batchDim: 0 },
  ],
  batchAxis: 'n',
  compiledBatchSizes: [1, 4],
  maxBatchSize: 4,
});
const strings = (/** @type {string[]} */ ...s) => joinBytesElements(s.map((x) => new TextEncoder().encode(x)));
/**
 * A gRPC request as the pipeline sees it: the codec's data-plane request (a message that does not
 * own its memory unless `owned`), what was wrong with it answered once the model is known (the
 * pipeline's order), then checked against the model (shared/request-check.js).
 * @param {ModelInferRequest} req
 * @param {import('../../../dist/shared/model-spec.js').ModelSpec} model
 * @param {{ owned?: boolean, handOver?: 'any' | 'aligned' }} [how]
 */
const decodeInferRequest = (req, model, { owned = false, handOver = 'any' } = {}) => {
  const request = fromModelInferRequest(req, owned);
  if (request.refused) throw fromErrorData(request.refused);
  return { ...checkRequest(request, model, undefined, handOver), timeoutUs: request.timeoutUs };
};
const decodeTensors = checkTensors;
const good = () => request([input('s', 'BYTES', [2]), input('a', 'FP32', [2, 2])],
  [Buffer.from(strings('x', 'yz')), raw(Float32Array.from([1, 2, 3, 4]))]);

/**
 * @param {import('ava').ExecutionContext} t
 * @param {ModelInferRequest} req
 * @param {RegExp} pattern
 * @param {import('../../../dist/shared/errors.js').ErrorCode} [code]
 */
const invalid = (t, req, pattern, code = 'STOWAGE_INVALID_TENSOR') => {
  const err = stowageThrows(t, () => decodeInferRequest(req, spec));
  t.is(err.code, code);
  t.regex(err.message, pattern);
};

test('raw inputs become transferable copies in manifest order, every output by default', (t) => {
  const req = good();
  const decoded = decodeInferRequest(req, spec);
  t.deepEqual(decoded.inputs.map((i) => i.name), ['a', 's']);
  t.deepEqual(decoded.outputs, ['p', 'q']);
  t.is(decoded.batchSize, 2);
  const a = decoded.inputs[0];
  t.deepEqual(a.shape, [2, 2]);
  t.is(a.data.byteOffset, 0);
  t.is(a.data.byteLength, a.data.buffer.byteLength, 'the whole buffer is the tensor, so it can be transferred');
  t.not(a.data.buffer, req.raw_input_contents[1].buffer, 'a copy, not a view of the message');
  t.deepEqual([...new Float32Array(a.data.buffer)], [1, 2, 3, 4]);
});

test('raw bytes the message owns go on as they are; hooks\' misaligned ones are copied', (t) => {
  const memory = new ArrayBuffer(64);
  const a = Buffer.from(memory, 4, 16);
  const s = Buffer.from(memory, 20, 11);
  s.set(strings('x', 'yz'));
  const req = request([input('a', 'FP32', [2, 2]), input('s', 'BYTES', [2])], [a, s]);
  const any = decodeInferRequest(req, spec, { owned: true, handOver: 'any' });
  t.is(any.inputs[0].data, a, 'handed over as the view it is (the device realigns it)');
  t.is(any.inputs[1].data, s);
  const aligned = decodeInferRequest(req, spec, { owned: true, handOver: 'aligned' });
  t.is(aligned.inputs[0].data, a, 'FP32 at offset 4 is aligned: as it is');
  const shifted = request([input('a', 'FP32', [2, 2]), input('s', 'BYTES', [2])], [Buffer.from(memory, 2, 16), s]);
  const copied = decodeInferRequest(shifted, spec, { owned: true, handOver: 'aligned' }).inputs[0].data;
  t.not(copied.buffer, memory, 'misaligned for a hook: copied into a buffer of its own');
  t.is(copied.byteOffset, 0);
});

test('typed contents are converted, checked for field, count and range', (t) => {
  /**
   * @param {Partial<import('../../../dist/protocol/types.js').InferTensorContents>} c
   * @param {string} [datatype]
   * @param {number[]} [shape]
   */
  const withContents = (c, datatype = 'FP32', shape = [1, 2]) =>
    request([input('a', datatype, shape, { contents: { bool_contents: [], int_contents: [], int64_contents: [], uint_contents: [], uint64_contents: [], fp32_contents: [], fp64_contents: [], bytes_contents: [], ...c } }),
      input('s', 'BYTES', [1], { contents: { bool_contents: [], int_contents: [], int64_contents: [], uint_contents: [], uint64_contents: [], fp32_contents: [], fp64_contents: [], bytes_contents: [Buffer.from('k')] } })]);
  const ok = decodeInferRequest(withContents({ fp32_contents: [0.5, 2] }), spec);
  t.deepEqual([...new Float32Array(ok.inputs[0].data.buffer)], [0.5, 2]);
  t.deepEqual([...ok.inputs[1].data], [1, 0, 0, 0, 107]);
  invalid(t, withContents({ int_contents: [1, 2] }), /input "a" is FP32: put its values in contents\.fp32_contents, not contents\.int_contents/);
  invalid(t, withContents({ fp32_contents: [1, 2, 3] }), /shape needs 2 elements, contents\.fp32_contents has 3/);
});

test('integer contents out of range for the datatype are refused', (t) => {
  const i8spec = modelSpec({ ...spec, inputs: [{ name: 'a', datatype: 'INT8', axes: 'n', shape: [-1], batchDim: 0 }], clientInputs: undefined });
  const req = request([input('a', 'INT8', [2], { contents: { bool_contents: [], int_contents: [1, 300], int64_contents: [], uint_contents: [], uint64_contents: [], fp32_contents: [], fp64_contents: [], bytes_contents: [] } })]);
  t.regex(t.throws(() => decodeInferRequest(req, i8spec)).message, /element 1 = 300 is out of range for INT8 \[-128, 127\]/);
});

test('datatype, shape, byte size and BYTES framing are each checked', (t) => {
  const r = good();
  invalid(t, { ...r, inputs: [r.inputs[0], input('a', 'FP64', [2, 2])] }, /input "a": expected datatype FP32, got FP64/);
  invalid(t, { ...r, inputs: [r.inputs[0], input('a', 'FP32', [2, 3])] }, /input "a": expected shape \[-1, 2\] \(axes "nk", -1 = batch axis 'n'\), got \[2, 3\]/);
  invalid(t, { ...r, inputs: [r.inputs[0], input('a', 'FP32', [2])] }, /expected shape \[-1, 2\].*got \[2\]/);
  invalid(t, { ...r, raw_input_contents: [r.raw_input_contents[0], Buffer.alloc(15)] }, /input "a": expected 16 bytes \(4 FP32 elements of 4 bytes\), got 15/);
  invalid(t, { ...r, raw_input_contents: [Buffer.from([5, 0, 0, 0, 1]), r.raw_input_contents[1]] }, /input "s": BYTES contents must be elements each prefixed/);
  invalid(t, { ...r, raw_input_contents: [Buffer.from(strings('only one')), r.raw_input_contents[1]] }, /input "s": shape needs 2 BYTES elements, raw contents hold 1/);
  invalid(t, { ...r, inputs: [r.inputs[0], input('a', 'FP32', [-1, 2])] }, /invalid dimension -1/);
});

test('input names: unknown, duplicated and missing', (t) => {
  const r = good();
  invalid(t, { ...r, inputs: [r.inputs[0], input('b', 'FP32', [2, 2])] }, /unknown input "b" for model "m"; expected inputs: a, s/);
  invalid(t, { ...r, inputs: [r.inputs[1], r.inputs[1]], raw_input_contents: [r.raw_input_contents[1], r.raw_input_contents[1]] }, /input "a" is given twice/);
  invalid(t, request([input('a', 'FP32', [2, 2])], [r.raw_input_contents[1]]), /model "m" needs input "s"; the request has "a"/);
});

test('raw contents must match the inputs one to one and exclude typed contents', (t) => {
  const r = good();
  invalid(t, { ...r, raw_input_contents: [r.raw_input_contents[0]] }, /raw_input_contents has 1 entries for 2 inputs not in shared memory/, 'STOWAGE_INVALID_REQUEST');
  const mixed = { ...r, inputs: [r.inputs[0], { ...r.inputs[1], contents: /** @type {import('../../../dist/protocol/types.js').InferTensorContents} */ ({ fp32_contents: [1, 2, 3, 4] }) }] };
  invalid(t, mixed, /input "a" sets contents while the request uses raw_input_contents/, 'STOWAGE_INVALID_REQUEST');
  invalid(t, request([input('a', 'FP32', [1, 2])]), /input "a" has no data/);
});

test('inputs must agree on the batch size, which must fit max_batch_size', (t) => {
  invalid(t, request([input('s', 'BYTES', [1]), input('a', 'FP32', [2, 2])], [Buffer.from(strings('x')), raw(new Float32Array(4))]),
    /inputs disagree on the batch size: "s" has 1 rows, "a" has 2/);
  invalid(t, request([input('s', 'BYTES', [5]), input('a', 'FP32', [5, 2])], [Buffer.from(strings('1', '2', '3', '4', '5')), raw(new Float32Array(10))]),
    /batch of 5 rows exceeds model "m"'s max_batch_size 4/);
});

test('requested outputs select and order the response; unknown, repeated and classification are refused', (t) => {
  const r = good();
  const out = (/** @type {string[]} */ ...names) => names.map((name) => ({ name, parameters: {} }));
  t.deepEqual(decodeInferRequest({ ...r, outputs: out('q', 'p') }, spec).outputs, ['q', 'p']);
  invalid(t, { ...r, outputs: out('z') }, /unknown output "z" for model "m"; expected one of: p, q/);
  invalid(t, { ...r, outputs: out('p', 'p') }, /output "p" is requested twice/);
  invalid(t, { ...r, outputs: [{ name: 'p', parameters: { classification: { int64_param: '3' } } }] }, /classification/, 'STOWAGE_UNSUPPORTED');
  invalid(t, { ...r, outputs: [{ name: 'p', parameters: { shared_memory_region: { parameter_choice: 'string_param', string_param: 'r' }, shared_memory_byte_size: { parameter_choice: 'int64_param', int64_param: '64' } } }] },
    /no shared-memory region "r" is registered/, 'STOWAGE_SHM_REGION_NOT_FOUND');
  invalid(t, { ...r, outputs: [{ name: 'p', parameters: { shared_memory_region: { parameter_choice: 'string_param', string_param: 'r' } } }] },
    /output "p": shared_memory_byte_size is required/, 'STOWAGE_INVALID_REQUEST');
});

test('request parameters: timeout in microseconds (past a timer\'s range, none), sequences refused, an unsigned priority accepted', (t) => {
  const r = good();
  t.is(decodeInferRequest({ ...r, parameters: { timeout: { int64_param: '2500' } } }, spec).timeoutUs, 2500);
  t.is(decodeInferRequest({ ...r, parameters: { priority: { uint64_param: '1' } } }, spec).timeoutUs, undefined);
  t.is(decodeInferRequest({ ...r, parameters: { sequence_id: { int64_param: '0' } } }, spec).batchSize, 2);
  invalid(t, { ...r, parameters: { sequence_id: { int64_param: '7' } } }, /no sequence batching/, 'STOWAGE_UNSUPPORTED');
  invalid(t, { ...r, parameters: { sequence_start: { bool_param: true } } }, /no sequence batching/, 'STOWAGE_UNSUPPORTED');
  invalid(t, { ...r, parameters: { timeout: { string_param: 'soon' } } }, /parameter "timeout" must be a non-negative int64/, 'STOWAGE_INVALID_REQUEST');
  // 2^31-1 ms is the longest a timer holds; longer would fire at once, so it means no timeout.
  t.is(decodeInferRequest({ ...r, parameters: { timeout: { int64_param: String((2 ** 31 - 1) * 1000) } } }, spec).timeoutUs, (2 ** 31 - 1) * 1000);
  t.is(decodeInferRequest({ ...r, parameters: { timeout: { uint64_param: '18446744073709551615' } } }, spec).timeoutUs, undefined);
  t.is(decodeInferRequest({ ...r, parameters: { priority: { int64_param: '3' } } }, spec).batchSize, 2);
  invalid(t, { ...r, parameters: { priority: { int64_param: '-1' } } }, /parameter "priority" must be an unsigned integer/, 'STOWAGE_INVALID_REQUEST');
  invalid(t, { ...r, parameters: { priority: { double_param: 1 } } }, /parameter "priority" must be an unsigned integer/, 'STOWAGE_INVALID_REQUEST');
});

test('the response carries outputs in order with views of their bytes', (t) => {
  const data = new Uint8Array(Float32Array.from([1, 2]).buffer);
  const res = inferResponse('m', 'id-1', [{ name: 'p', datatype: 'FP32', shape: [1, 2], data }]);
  t.is(res.model_name, 'm');
  t.is(res.model_version, '1');
  t.is(res.id, 'id-1');
  t.deepEqual(res.outputs, [{ name: 'p', datatype: 'FP32', shape: [1, 2] }]);
  t.is(res.raw_output_contents[0].buffer, data.buffer);
});

test('a meta sub-call\'s tensors get the same checks as a request, without a copy', (t) => {
  /** @type {import('../../../dist/shared/channels/inference.js').WireTensor[]} */
  const [a, s] = [
    { name: 'a', datatype: 'FP32', shape: [2, 2], data: new Uint8Array(new Float32Array([1, 2, 3, 4]).buffer) },
    { name: 's', datatype: 'BYTES', shape: [2], data: strings('x', 'yz') },
  ];
  const decoded = decodeTensors([s, a], ['q'], spec);
  t.deepEqual(decoded.inputs.map((x) => x.name), ['a', 's'], 'in manifest order');
  t.is(decoded.inputs[0], a, 'the very tensor, not a copy');
  t.deepEqual([decoded.outputs, decoded.batchSize], [['q'], 2]);
  t.deepEqual(decodeTensors([a, s], [], spec).outputs, ['p', 'q'], 'no outputs named: all of them');
  /** @param {import('../../../dist/shared/channels/inference.js').WireTensor[]} tensors @param {string[]} outputs @param {RegExp} pattern */
  const fails = (tensors, outputs, pattern) => t.regex(t.throws(() => decodeTensors(tensors, outputs, spec)).message, pattern);
  fails([a], [], /model "m" needs input "s"; the request has "a"/);
  fails([a, { ...s, shape: [3] }], [], /inputs disagree on the batch size: "a" has 2 rows, "s" has 3/);
  fails([{ ...a, data: new Uint8Array(12) }, s], [], /input "a": expected 16 bytes \(4 FP32 elements of 4 bytes\), got 12/);
  fails([{ ...a, datatype: 'INT32' }, s], [], /input "a": expected datatype FP32, got INT32/);
  fails([a, s, a], [], /input "a" is given twice/);
  fails([a, s], ['r'], /unknown output "r" for model "m"; expected one of: p, q/);
});

test('a fault in a request\'s tensors or parameters is carried, not thrown: the model is looked up first', (t) => {
  const noData = fromModelInferRequest(request([input('a', 'FP32', [1, 2])], [], { model_name: 'ghost', model_version: '3', id: 'r1' }), false);
  t.like(noData, { model: 'ghost', version: '3', id: 'r1', inputs: [], outputs: [] });
  t.is(noData.refused?.code, 'STOWAGE_INVALID_TENSOR');
  t.regex(noData.refused?.message ?? '', /input "a" has no data/);
  const sequence = fromModelInferRequest(request([], [], { parameters: { sequence_id: { parameter_choice: 'int64_param', int64_param: '3' } } }), false);
  t.is(sequence.refused?.code, 'STOWAGE_UNSUPPORTED');
  t.is(fromModelInferRequest(good(), false).refused, undefined, 'nothing wrong: nothing carried');
});
