// Responses framed where the device placed their outputs: the device's layout (execution.js, frameOutputs)
// and the gRPC edge's framing (codec.js) together decode, in grpc-js's own
// deserializers, to the message protobufjs would have written, ModelInfer's and the stream's alike.
import test from 'ava';
import { frameResponse, passEncodedResponses, responseLayout, ResponseFrame, STREAM_HEADROOM } from '../../../dist/protocol/codec.js';
import { frameOf } from '../../../dist/shared/request-path.js';
import { frameOutputs } from '../../../dist/actors/device/execution.js';
import { loadInferenceClient } from '../../../dist/protocol/proto.js';

const { service } = loadInferenceClient();
const passed = passEncodedResponses(service);

const f32 = (/** @type {number[]} */ values) => new Uint8Array(Float32Array.from(values).buffer);

/** @typedef {import('../../../dist/shared/channels/inference.js').WireTensor} WireTensor */
/** @type {WireTensor[]} */
const outputs = [
  { name: 'probabilities', datatype: 'FP32', shape: [2, 3], data: f32([0.1, 0.2, 0.7, 1, 0, 0]) },
  { name: 'label', datatype: 'INT64', shape: [2], data: new Uint8Array(new BigInt64Array([2n, 0n]).buffer) },
  { name: 'scalar', datatype: 'FP32', shape: [], data: f32([4.5]) },
  { name: 'in_shm', datatype: 'FP32', shape: [2, 1000], data: new Uint8Array(0) }, // written to shared memory: an empty entry
  { name: 'big', datatype: 'UINT8', shape: [1, 300_000], data: new Uint8Array(300_000).fill(7) },
];
/** The model's outputs as the placement is made for them: the rank, not the sizes. */
const specs = (/** @type {WireTensor[]} */ tensors) => tensors.map((o) => ({ name: o.name, datatype: o.datatype, shape: o.shape.map(() => -1) }));

/** What the pipeline, the device and the edge do for one response: placed as the layout asks, transferred (here: as it is), framed. */
function respond(/** @type {string} */ model, /** @type {string} */ id, /** @type {WireTensor[]} */ tensors) {
  const placement = frameOf(responseLayout(model, '1', id), specs(tensors));
  const placed = frameOutputs(tensors, placement);
  return { placed, response: frameResponse(model, '1', id, placed.outputs, placed.framed, placement) };
}

test('a ModelInfer response decodes to the model, id, every output\'s metadata and its bytes in order', (t) => {
  const { placed, response } = respond('digits', 'request-ü-7', outputs);
  t.is(placed.framed.byteOffset, 0);
  t.is(placed.framed.buffer.byteLength, placed.framed.byteLength, 'one ArrayBuffer of its own, to transfer');
  outputs.forEach((o, i) => t.is(placed.outputs[i].data.buffer, placed.framed.buffer, `${o.name}: a view of the placed buffer`));
  const wire = passed.ModelInfer.responseSerialize(response);
  t.is(wire.buffer, placed.framed.buffer, 'the serializer returns the placed bytes, not a copy');
  t.true(wire.byteOffset >= STREAM_HEADROOM, 'room left in front for the stream wrapper');
  const res = /** @type {any} */ (service.ModelInfer.responseDeserialize(wire));
  t.is(res.model_name, 'digits');
  t.is(res.model_version, '1');
  t.is(res.id, 'request-ü-7');
  t.deepEqual(res.outputs.map((/** @type {any} */ o) => [o.name, o.datatype, o.shape.map(Number)]),
    outputs.map((o) => [o.name, o.datatype, o.shape]));
  t.is(res.raw_output_contents.length, outputs.length);
  outputs.forEach((o, i) => t.deepEqual(new Uint8Array(res.raw_output_contents[i]), o.data, o.name));
});

test('it decodes to what protobufjs\'s own encoding of the same response decodes to, at every length a varint changes size', (t) => {
  for (const size of [0, 1, 127, 128, 16_383, 16_384, 2_097_152]) {
    /** @type {WireTensor[]} */
    const tensors = [...outputs.slice(0, 2), { name: 'y', datatype: 'UINT8', shape: [1, size], data: new Uint8Array(size).fill(size % 251) }];
    const object = {
      model_name: 'm', model_version: '1', id: 'x',
      outputs: tensors.map((o) => ({ name: o.name, datatype: o.datatype, shape: o.shape })),
      raw_output_contents: tensors.map((o) => Buffer.from(o.data)),
    };
    const mine = service.ModelInfer.responseDeserialize(passed.ModelInfer.responseSerialize(respond('m', 'x', tensors).response));
    const theirs = service.ModelInfer.responseDeserialize(service.ModelInfer.responseSerialize(object));
    t.deepEqual(mine, theirs, `an output of ${size} bytes`);
  }
});

test('an empty id is left out, as proto3 leaves out empty strings; the header fits whatever the shapes\' sizes', (t) => {
  /** @type {WireTensor[]} */
  const huge = [{ name: 'ü'.repeat(300), datatype: 'INT64', shape: [2 ** 53 - 1, 0, 1], data: new Uint8Array(0) }];
  const wire = passed.ModelInfer.responseSerialize(respond('m', '', huge).response);
  const res = /** @type {any} */ (service.ModelInfer.responseDeserialize(wire));
  t.is(res.id, '');
  t.is(res.outputs[0].name, 'ü'.repeat(300));
  t.deepEqual(res.outputs[0].shape.map(Number), [2 ** 53 - 1, 0, 1]);
});

test('an output of a higher rank than its model declares is refused, never written past the headroom', (t) => {
  const placement = frameOf(responseLayout('m', '1', 'x'), specs([{ name: 'y', datatype: 'FP32', shape: [1], data: new Uint8Array(0) }]));
  const placed = frameOutputs([{ name: 'y', datatype: 'FP32', shape: Array(20).fill(2 ** 40), data: new Uint8Array(0) }], placement);
  t.throws(() => frameResponse('m', '1', 'x', placed.outputs, placed.framed, placement), { message: /header needs \d+ bytes, its frame left \d+/ });
});

test('a frame frames only what was written into a frame: hooks\' outputs go to protobufjs', (t) => {
  const frame = new ResponseFrame('m', '1', 'x');
  t.is(frame.frame({ outputs, framed: null }), null, 'not in a frame');
  const placement = frameOf(frame.layout, specs(outputs));
  const placed = frameOutputs(outputs, placement);
  const res = /** @type {any} */ (service.ModelInfer.responseDeserialize(passed.ModelInfer.responseSerialize(frame.frame({ outputs: placed.outputs, framed: { bytes: placed.framed, frame: placement } }))));
  t.is(res.raw_output_contents.length, outputs.length);
});

test('on a stream it is field 2 of ModelStreamInferResponse, written in the headroom without a copy', (t) => {
  for (const size of [0, 100, 200_000]) {
    const tensors = [{ name: 'y', datatype: 'UINT8', shape: [size], data: new Uint8Array(size).fill(3) }];
    const { placed, response } = respond('m', `s${size}`, /** @type {any} */ (tensors));
    const wire = passed.ModelStreamInfer.responseSerialize({ error_message: '', infer_response: response });
    t.is(wire.buffer, placed.framed.buffer);
    const res = /** @type {any} */ (service.ModelStreamInfer.responseDeserialize(wire));
    t.is(res.error_message, '');
    t.is(res.infer_response.id, `s${size}`);
    t.is(res.infer_response.raw_output_contents[0].length, size);
  }
  // An error answer on the stream, and a response object, still go through protobufjs.
  const failed = passed.ModelStreamInfer.responseSerialize({ error_message: 'no', infer_response: { id: 'e' } });
  t.is(/** @type {any} */ (service.ModelStreamInfer.responseDeserialize(failed)).error_message, 'no');
  const plain = passed.ModelInfer.responseSerialize({ model_name: 'p', id: 'q', outputs: [], raw_output_contents: [] });
  t.is(/** @type {any} */ (service.ModelInfer.responseDeserialize(plain)).model_name, 'p');
});
