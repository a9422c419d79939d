// The strict wire check: whatever protobufjs encodes passes it (every field kind of the KServe
// requests, packed and unpacked repeated scalars, maps, unknown fields), and what protobufjs would
// decode leniently into something else is refused, naming the field and the byte.
import test from 'ava';
import { inferenceWireSchema, loadInferenceClient } from '../../../dist/protocol/proto.js';
import { WireError } from '../../../dist/protocol/proto.js';

const { service } = loadInferenceClient();
const schema = inferenceWireSchema();
const REQUEST = 'inference.ModelInferRequest';

const rich = {
  model_name: 'dïgits', model_version: '1', id: 'req-1',
  parameters: {
    b: { bool_param: true }, i: { int64_param: '-9007199254740993' }, s: { string_param: 'x' },
    d: { double_param: 0.5 }, u: { uint64_param: '18446744073709551615' },
  },
  inputs: [
    { name: 'a', datatype: 'FP32', shape: ['2', '3'], parameters: { p: { bool_param: false } }, contents: { fp32_contents: [1, 2, 3, 4, 5, 6] } },
    { name: 'b', datatype: 'INT64', shape: ['2'], contents: { int64_contents: ['-1', '9007199254740993'] } },
    { name: 'c', datatype: 'BYTES', shape: ['2'], contents: { bytes_contents: [Buffer.from('hi'), Buffer.alloc(0)] } },
    { name: 'd', datatype: 'BOOL', shape: ['1'], contents: { bool_contents: [true], int_contents: [-5], uint_contents: [7], uint64_contents: ['8'], fp64_contents: [0.25] } },
    { name: 'e', datatype: 'FP32', shape: ['1', '4'] },
  ],
  outputs: [{ name: 'y', parameters: { binary_data: { bool_param: true } } }],
  raw_input_contents: [Buffer.alloc(16, 7)],
};

test('every request protobufjs encodes passes, every RPC\'s', (t) => {
  t.notThrows(() => schema.check(service.ModelInfer.requestSerialize(rich), REQUEST));
  t.notThrows(() => schema.check(Buffer.alloc(0), REQUEST), 'the empty message');
  for (const [name, method] of Object.entries(service)) {
    t.notThrows(() => method.requestDeserialize(method.requestSerialize({})), name);
  }
  t.deepEqual(service.ModelInfer.requestDeserialize(service.ModelInfer.requestSerialize(rich)).inputs[1].contents.int64_contents, ['-1', '9007199254740993']);
});

test('repeated scalars may come unpacked, and unknown fields of every wire type are skipped', (t) => {
  // inputs { name: "x", shape: 2, shape: 3 } with each dim as its own varint, then unknown fields 100-103.
  const unpacked = Buffer.from('2a07' + '0a0178' + '1802' + '1803', 'hex');
  const unknown = Buffer.from('a006' + '01' + 'a9060102030405060708' + 'b20603616263' + 'bd0601020304', 'hex');
  const bytes = Buffer.concat([unpacked, unknown]);
  t.notThrows(() => schema.check(bytes, REQUEST));
  t.deepEqual(service.ModelInfer.requestDeserialize(bytes).inputs[0].shape, ['2', '3']);
});

test('malformed wire is refused naming the field and the byte', (t) => {
  /** @type {[string, RegExp][]} */
  const corpus = [
    ['0a0561', /^model_name at byte 1 claims 5 bytes, but its message has 1 left$/],
    ['0a8080808010', /model_name: its length at byte 1 is 4294967296, more than any message holds/],
    ['0a01', /model_name at byte 1 claims 1 bytes, but its message has 0 left/],
    ['0aff', /model_name: its length at byte 1 is a truncated or over-long varint/],
    ['08ffffffffffffffffffff01', /model_name at byte 0 is varint, but the field is length-delimited/],
    ['a006ffffffffffffffffffff01', /field 100 at byte 2 is a truncated or over-long varint/],
    ['a90601', /field 101 at byte 2 runs past the end of its message/],
    ['0200', /field number 0 at byte 0/],
    ['0e00', /model_name at byte 0 is wire type 6/],
    ['a406', /field 100 at byte 0 has group end/],
    ['2a03' + '1a0180', /^inputs\.shape: an element at byte 4 is a truncated or over-long varint$/],
    ['2a04' + '2a02' + '0a05', /^inputs\.contents\.bool_contents at byte 5 claims 5 bytes, but its message has 0 left$/],
    ['2a03' + '120180', /inputs\.datatype at byte 4 is not valid UTF-8/],
    ['3a0100' + '3a', /raw_input_contents: its length at byte 4 is a truncated or over-long varint/],
  ];
  for (const [hex, message] of corpus) {
    const err = t.throws(() => schema.check(Buffer.from(hex, 'hex'), REQUEST), { instanceOf: WireError }, hex);
    t.regex(err?.message ?? '', message, hex);
  }
});
