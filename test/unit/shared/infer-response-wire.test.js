// Responses the device encodes: every client decodes them as the message protobufjs would have
// written (grpc-js's own deserializers stand in for them here), ModelInfer's and the stream's alike.
import test from 'ava';
import { encodeInferResponse, RESPONSE_HEADROOM } from '../../../dist/shared/infer-response-wire.js';
import { EncodedResponse, passEncodedResponses } from '../../../dist/protocol/encoded-response.js';
import { loadInferenceClient } from '../../../dist/protocol/proto.js';

const { service } = loadInferenceClient();
const passed = passEncodedResponses(service);

const f32 = (/** @type {number[]} */ values) => new Uint8Array(Float32Array.from(values).buffer);

/** @type {import('../../../dist/shared/channels/inference.js').WireTensor[]} */
const outputs = [
  { name: 'probabilities', datatype: 'FP32', shape: [2, 3], data: f32([0.1, 0.2, 0.7, 1, 0, 0]) },
  { name: 'label', datatype: 'INT64', shape: [2], data: new Uint8Array(new BigInt64Array([2n, 0n]).buffer) },
  { name: 'scalar', datatype: 'FP32', shape: [], data: f32([4.5]) },
  { name: 'in_shm', datatype: 'FP32', shape: [2, 1000], data: new Uint8Array(0) }, // written to shared memory: an empty entry
  { name: 'big', datatype: 'UINT8', shape: [1, 300_000], data: new Uint8Array(300_000).fill(7) },
];

test('a ModelInfer response decodes to the model, id, every output\'s metadata and its bytes in order', (t) => {
  const bytes = encodeInferResponse('digits', '1', 'request-ü-7', outputs);
  t.is(bytes.byteOffset, 0);
  t.is(bytes.buffer.byteLength, bytes.byteLength, 'one ArrayBuffer of its own, to transfer');
  const wire = passed.ModelInfer.responseSerialize(new EncodedResponse(bytes));
  t.is(wire.buffer, bytes.buffer, 'the serializer returns the device\'s bytes, not a copy');
  t.is(wire.byteOffset, RESPONSE_HEADROOM);
  const res = /** @type {any} */ (service.ModelInfer.responseDeserialize(wire));
  t.is(res.model_name, 'digits');
  t.is(res.model_version, '1');
  t.is(res.id, 'request-ü-7');
  t.deepEqual(res.outputs.map((/** @type {any} */ o) => [o.name, o.datatype, o.shape.map(Number)]),
    outputs.map((o) => [o.name, o.datatype, o.shape]));
  t.is(res.raw_output_contents.length, outputs.length);
  outputs.forEach((o, i) => t.deepEqual(new Uint8Array(res.raw_output_contents[i]), o.data, o.name));
});

test('it is the message protobufjs writes for the same response', (t) => {
  const object = {
    model_name: 'm', model_version: '1', id: 'x',
    outputs: outputs.map((o) => ({ name: o.name, datatype: o.datatype, shape: o.shape })),
    raw_output_contents: outputs.map((o) => Buffer.from(o.data)),
  };
  const mine = passed.ModelInfer.responseSerialize(new EncodedResponse(encodeInferResponse('m', '1', 'x', outputs)));
  t.deepEqual(new Uint8Array(mine), new Uint8Array(service.ModelInfer.responseSerialize(object)));
});

test('an empty id is left out, as proto3 leaves out empty strings', (t) => {
  const wire = passed.ModelInfer.responseSerialize(new EncodedResponse(encodeInferResponse('m', '1', '', outputs.slice(0, 1))));
  const res = /** @type {any} */ (service.ModelInfer.responseDeserialize(wire));
  t.is(res.id, '');
  t.is(res.outputs[0].name, 'probabilities');
});

test('on a stream it is field 2 of ModelStreamInferResponse, written in the headroom without a copy', (t) => {
  for (const size of [0, 100, 200_000]) {
    const tensors = [{ name: 'y', datatype: 'UINT8', shape: [size], data: new Uint8Array(size).fill(3) }];
    const bytes = encodeInferResponse('m', '1', `s${size}`, /** @type {any} */ (tensors));
    const wire = passed.ModelStreamInfer.responseSerialize({ error_message: '', infer_response: new EncodedResponse(bytes) });
    t.is(wire.buffer, bytes.buffer);
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
