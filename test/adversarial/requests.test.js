// The bad-request corpus: each malformed ModelInfer (decodable, but wrong for the protocol or the
// model) with the exact status it gets and what its message must name, sent to a node and to a
// gateway-only process in front of it (which must answer the same), unary and on a stream (where
// the error is that response's error_message and the stream goes on). Undecodable bytes are in
// streams.test.js and unit/protocol/wire-check.test.js; shared-memory edges in
// shared-memory.test.js; every row here leaves both processes serving.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import test from 'ava';
import { status } from '@grpc/grpc-js';
import { FIXTURES, ROOT, makeRepository, startServer, tempDir } from '../helpers/server.js';

const heldout = JSON.parse(readFileSync(path.join(FIXTURES, 'digits_heldout.json'), 'utf8'));
const img = Buffer.from(Float32Array.from(heldout.images[0]).buffer);
const { OK, INVALID_ARGUMENT, NOT_FOUND, DEADLINE_EXCEEDED } = status;

/** A request for digits (input image FP32 [-1, 8, 8], max_batch_size 32), with `over` replacing fields. */
const digits = (/** @type {Record<string, unknown>} */ over = {}) => ({ model_name: 'digits', inputs: [{ name: 'image', datatype: 'FP32', shape: ['1', '8', '8'] }], raw_input_contents: [img], ...over });
/**
 * digits with its one input replaced by `input` (and the raw contents by `raw`).
 * @param {Record<string, unknown>} input
 */
const image = (input, raw = [img]) => digits({ inputs: [{ name: 'image', datatype: 'FP32', shape: ['1', '8', '8'], ...input }], raw_input_contents: raw });

/** BYTES raw contents: each element after its 4-byte little-endian length. */
const elements = (/** @type {string[]} */ ...strings) => Buffer.concat(strings.flatMap((s) => {
  const b = Buffer.from(s);
  const n = Buffer.alloc(4);
  n.writeUInt32LE(b.length);
  return [n, b];
}));
const lengthAt = (/** @type {Buffer} */ bytes, /** @type {number} */ at, /** @type {number} */ value) => {
  const b = Buffer.from(bytes);
  b.writeUInt32LE(value, at);
  return b;
};
const twelve = Array.from({ length: 12 }, (_, i) => `s${i}`);
/** @type {Record<string, number>} */
const WIDTHS = { BOOL: 1, UINT8: 1, UINT16: 2, UINT32: 4, UINT64: 8, INT8: 1, INT16: 2, INT32: 4, INT64: 8, FP16: 2, FP32: 4, FP64: 8 };
const DTYPES = [['in_bool', 'BOOL'], ['in_u8', 'UINT8'], ['in_u16', 'UINT16'], ['in_u32', 'UINT32'], ['in_u64', 'UINT64'], ['in_i8', 'INT8'], ['in_i16', 'INT16'],
  ['in_i32', 'INT32'], ['in_i64', 'INT64'], ['in_f16', 'FP16'], ['in_f32', 'FP32'], ['in_f64', 'FP64'], ['in_bytes', 'BYTES']];
/** A request for the every-datatype fixture (13 inputs of shape [4, 3]) with `bytesRaw` as in_bytes' contents. */
const dtypes = (/** @type {Buffer} */ bytesRaw, drop = '') => {
  const kept = DTYPES.filter(([name]) => name !== drop);
  return {
    model_name: 'dtypes',
    inputs: kept.map(([name, datatype]) => ({ name, datatype, shape: ['4', '3'] })),
    raw_input_contents: kept.map(([, dt]) => (dt === 'BYTES' ? bytesRaw : Buffer.alloc(12 * WIDTHS[dt], 1))),
  };
};

/** @type {[type: string, value: unknown][]} */
const PARAMETER_TYPES = [['bool_param', true], ['int64_param', '5'], ['uint64_param', '7'], ['double_param', 1.5], ['string_param', 'x']];
/** @typedef {[label: string, request: any, code: number, names: RegExp]} Row */
/** @type {(label: string, request: any, code: number, names: RegExp) => Row} */
const row = (label, request, code, names) => [label, request, code, names];

/** @type {Row[]} */
const CORPUS = [
  ['a good request for digits', digits(), OK, /^$/],
  ['a good request for every datatype', dtypes(elements(...twelve)), OK, /^$/],

  // BYTES with broken length prefixes
  ['BYTES: a length prefix past the end', dtypes(lengthAt(elements(...twelve), 0, 1000)), INVALID_ARGUMENT, /input "in_bytes": BYTES contents must be elements each prefixed by a 4-byte little-endian length; the 74 bytes sent are not/],
  ['BYTES: a length prefix of 2^32-1', dtypes(lengthAt(elements(...twelve), 0, 0xffffffff)), INVALID_ARGUMENT, /input "in_bytes": BYTES contents must be elements each prefixed/],
  ['BYTES: the last element cut short', dtypes(elements(...twelve).subarray(0, 70)), INVALID_ARGUMENT, /input "in_bytes": BYTES contents .* the 70 bytes sent are not/],
  ['BYTES: bytes left over after the last element', dtypes(Buffer.concat([elements(...twelve), Buffer.from([1, 2])])), INVALID_ARGUMENT, /input "in_bytes": BYTES contents .* the 76 bytes sent are not/],
  ['BYTES: fewer elements than the shape holds', dtypes(elements(...twelve.slice(1))), INVALID_ARGUMENT, /input "in_bytes": shape needs 12 BYTES elements, raw contents hold 11/],
  ['BYTES: more elements than the shape holds', dtypes(elements(...twelve, 'x')), INVALID_ARGUMENT, /input "in_bytes": shape needs 12 BYTES elements, raw contents hold 13/],

  // datatypes
  ['a datatype other than the model\'s', image({ datatype: 'FP64' }, [Buffer.alloc(512)]), INVALID_ARGUMENT, /input "image": expected datatype FP32, got FP64/],
  ['an unknown datatype', image({ datatype: 'FP8' }), INVALID_ARGUMENT, /input "image": unknown datatype "FP8"; KServe datatypes are BOOL, .*BYTES/],
  ['a datatype in lower case', image({ datatype: 'fp32' }), INVALID_ARGUMENT, /unknown datatype "fp32"/],
  ['an empty datatype', image({ datatype: '' }), INVALID_ARGUMENT, /unknown datatype ""/],

  // shapes: wrong, negative, overflowing, huge with tiny data
  ['a shape of the wrong rank', image({ shape: ['1', '64'] }), INVALID_ARGUMENT, /input "image": expected shape \[-1, 8, 8\] \(axes "nhw", -1 = batch axis 'n'\), got \[1, 64\]/],
  ['an empty shape', image({ shape: [] }, [Buffer.alloc(4)]), INVALID_ARGUMENT, /expected shape \[-1, 8, 8\].*got \[\]/],
  ['a dim of -1', image({ shape: ['-1', '8', '8'] }), INVALID_ARGUMENT, /input "image": shape \[-1, 8, 8\] has an invalid dimension -1: each must be a whole number from 0 to 2\^53-1/],
  ['a dim of -2^63', image({ shape: ['-9223372036854775808', '8', '8'] }), INVALID_ARGUMENT, /shape \[-9223372036854775808, 8, 8\] has an invalid dimension -9223372036854775808/],
  ['a dim of 2^63-1 with 256 bytes', image({ shape: ['9223372036854775807', '8', '8'] }), INVALID_ARGUMENT, /has an invalid dimension 9223372036854775807/],
  ['a batch whose byte size passes 2^64', image({ shape: ['4611686018427387904', '8', '8'] }), INVALID_ARGUMENT, /has an invalid dimension 4611686018427387904/],
  ['dims whose product passes 2^64', image({ shape: ['4294967296', '4294967296', '8'] }), INVALID_ARGUMENT, /expected shape \[-1, 8, 8\].*got \[4294967296, 4294967296, 8\]/],
  ['2^31 rows declared, 256 bytes sent', image({ shape: ['2147483648', '8', '8'] }), INVALID_ARGUMENT, /input "image": expected 549755813888 bytes \(137438953472 FP32 elements of 4 bytes\), got 256/],
  ['a shape of 100000 dims', image({ shape: new Array(100000).fill('1') }), INVALID_ARGUMENT, /got \[1, 1, 1, 1, 1, 1, 1, 1, \.\.\. 100000 dims in all\]$/],
  ['a shape of 100000 dims, the last negative', image({ shape: [...new Array(99999).fill('1'), '-3'] }), INVALID_ARGUMENT, /\.\.\. 100000 dims in all\] has an invalid dimension -3/],
  ['a batch past max_batch_size', image({ shape: ['33', '8', '8'] }, [Buffer.alloc(33 * 256)]), INVALID_ARGUMENT, /batch of 33 rows exceeds model "digits"'s max_batch_size 32 \(compiled batch sizes \[1, 8, 32\]\); split the request/],
  ['zero rows', image({ shape: ['0', '8', '8'] }, [Buffer.alloc(0)]), INVALID_ARGUMENT, /got \[0, 8, 8\]/],

  // byte sizes
  ['raw contents 4 bytes short', image({}, [img.subarray(0, 252)]), INVALID_ARGUMENT, /input "image": expected 256 bytes \(64 FP32 elements of 4 bytes\), got 252/],
  ['raw contents 4 bytes long', image({}, [Buffer.concat([img, Buffer.alloc(4)])]), INVALID_ARGUMENT, /expected 256 bytes .*got 260/],
  ['raw contents empty', image({}, [Buffer.alloc(0)]), INVALID_ARGUMENT, /expected 256 bytes .*got 0/],
  ['raw contents of 3 bytes', image({}, [Buffer.alloc(3)]), INVALID_ARGUMENT, /expected 256 bytes .*got 3/],

  // typed contents, alone and mixed with raw
  ['typed contents in the wrong field', image({ contents: { int_contents: new Array(64).fill(1) } }, []), INVALID_ARGUMENT, /input "image" is FP32: put its values in contents\.fp32_contents, not contents\.int_contents/],
  ['typed contents one short', image({ contents: { fp32_contents: new Array(63).fill(1) } }, []), INVALID_ARGUMENT, /input "image": shape needs 64 elements, contents\.fp32_contents has 63/],
  ['typed contents in two fields', image({ contents: { fp32_contents: new Array(64).fill(1), fp64_contents: [1] } }, []), INVALID_ARGUMENT, /not contents\.fp64_contents/],
  ['typed contents and raw contents both', image({ contents: { fp32_contents: new Array(64).fill(1) } }), INVALID_ARGUMENT, /input "image" sets contents while the request uses raw_input_contents; use one or the other/],
  ['no contents at all', image({}, []), INVALID_ARGUMENT, /input "image" has no data: send it in raw_input_contents or contents\.fp32_contents/],

  // duplicate, missing and extra tensors
  ['no inputs', digits({ inputs: [], raw_input_contents: [] }), INVALID_ARGUMENT, /model "digits" needs input "image"; the request has none/],
  ['an input given twice', digits({ inputs: [digits().inputs[0], digits().inputs[0]], raw_input_contents: [img, img] }), INVALID_ARGUMENT, /input "image" is given twice/],
  ['an unknown input beside the right one', digits({ inputs: [digits().inputs[0], { name: 'extra', datatype: 'FP32', shape: ['1'] }], raw_input_contents: [img, Buffer.alloc(4)] }), INVALID_ARGUMENT, /unknown input "extra" for model "digits"; expected inputs: image/],
  ['more raw contents than inputs', digits({ raw_input_contents: [img, img] }), INVALID_ARGUMENT, /raw_input_contents has 2 entries for 1 inputs not in shared memory/],
  ['one input of thirteen missing', dtypes(elements(...twelve), 'in_bool'), INVALID_ARGUMENT, /model "dtypes" needs input "in_bool"; the request has "in_u8"/],
  ['an output requested twice', digits({ outputs: [{ name: 'label' }, { name: 'label' }] }), INVALID_ARGUMENT, /output "label" is requested twice/],
  ['an unknown output', digits({ outputs: [{ name: 'labels' }] }), INVALID_ARGUMENT, /unknown output "labels" for model "digits"; expected one of: logits, probabilities, label/],
  ['an output with an empty name', digits({ outputs: [{ name: '' }] }), INVALID_ARGUMENT, /unknown output "" for model "digits"/],

  // models and versions
  ['an empty model name', digits({ model_name: '' }), NOT_FOUND, /unknown model ""; the repository serves: digits, dtypes/],
  ['an unknown model', digits({ model_name: 'ghost' }), NOT_FOUND, /unknown model "ghost"/],
  // Which model is asked for is checked before its tensors and parameters, as Triton does.
  ['an unknown model whose input has no data', { ...image({}, []), model_name: 'ghost' }, NOT_FOUND, /unknown model "ghost"/],
  ['an unknown model whose input has an unknown datatype', { ...image({ datatype: 'FP8' }), model_name: 'ghost' }, NOT_FOUND, /unknown model "ghost"/],
  ['an unknown model with a sequence id', digits({ model_name: 'ghost', parameters: { sequence_id: { int64_param: '3' } } }), NOT_FOUND, /unknown model "ghost"/],
  ['an input with no data for a version not served', { ...image({}, []), model_version: '2' }, NOT_FOUND, /model "digits" has no version "2"/],
  ['a version that is not a number', digits({ model_version: 'one' }), NOT_FOUND, /model "digits" has no version "one"; available versions: 1/],
  ['a version not served', digits({ model_version: '2' }), NOT_FOUND, /no version "2"/],

  // parameters of every type, at every level
  ...PARAMETER_TYPES.flatMap(([type, value]) => [
    row(`an unknown request parameter as ${type}: ignored`, digits({ parameters: { my_tag: { [type]: value } } }), OK, /^$/),
    row(`an unknown input parameter as ${type}: ignored`, image({ parameters: { my_tag: { [type]: value } } }), OK, /^$/),
    row(`an output parameter as ${type}: ignored`, digits({ outputs: [{ name: 'label', parameters: { binary_data_output: { [type]: value } } }] }), OK, /^$/),
  ]),
  ...PARAMETER_TYPES.filter(([type]) => !type.endsWith('64_param')).flatMap(([type, value]) => [
    row(`timeout as ${type}`, digits({ parameters: { timeout: { [type]: value } } }), INVALID_ARGUMENT, /parameter "timeout" must be a non-negative int64 \(microseconds\)/),
    row(`priority as ${type}`, digits({ parameters: { priority: { [type]: value } } }), INVALID_ARGUMENT, /parameter "priority" must be an unsigned integer \(uint64_param\)/),
  ]),
  ['a timeout with no value set', digits({ parameters: { timeout: {} } }), INVALID_ARGUMENT, /parameter "timeout" must be a non-negative int64 \(microseconds\), got no value/],
  ['a timeout of a 1 MB string', digits({ parameters: { timeout: { string_param: 't'.repeat(1 << 20) } } }), INVALID_ARGUMENT, /got the string "t{200}"\.\.\. \(1048576 characters\)$/],
  ['a priority of a 1 MB string', digits({ parameters: { priority: { string_param: 'p'.repeat(1 << 20) } } }), INVALID_ARGUMENT, /got the string "p{200}"\.\.\. \(1048576 characters\)$/],
  ['a negative timeout', digits({ parameters: { timeout: { int64_param: '-5' } } }), INVALID_ARGUMENT, /parameter "timeout" must be a non-negative int64/],
  ['a timeout of 1 µs', digits({ parameters: { timeout: { int64_param: '1' } } }), DEADLINE_EXCEEDED, /request for model "digits" (did not run after \d+ ms: it passed its deadline|refused before it ran: its deadline is 0 ms away)/],
  ['a timeout of 2^64-1 µs: no timeout', digits({ parameters: { timeout: { uint64_param: '18446744073709551615' } } }), OK, /^$/],
  ['a timeout of 60 s', digits({ parameters: { timeout: { int64_param: '60000000' } } }), OK, /^$/],
  ['a priority of 2^64-1', digits({ parameters: { priority: { uint64_param: '18446744073709551615' } } }), INVALID_ARGUMENT, /parameter "priority" 18446744073709551615 is above every priority level \(scheduler\.priority_levels is at most 1000\)/],
  ['a priority above the node\'s levels', digits({ parameters: { priority: { uint64_param: '4' } } }), INVALID_ARGUMENT, /priority 4 is above this server's 3 priority levels \(scheduler\.priority_levels\)/],
  ['the highest priority', digits({ parameters: { priority: { uint64_param: '1' } } }), OK, /^$/],
  ['a negative priority', digits({ parameters: { priority: { int64_param: '-1' } } }), INVALID_ARGUMENT, /parameter "priority" must be an unsigned integer/],
  ['a sequence id', digits({ parameters: { sequence_id: { int64_param: '3' } } }), INVALID_ARGUMENT, /this server has no sequence batching/],
  ['a shared-memory region not registered', image({ parameters: { shared_memory_region: { string_param: 'nowhere' }, shared_memory_byte_size: { int64_param: '256' } } }, []), NOT_FOUND, /no shared-memory region "nowhere" is registered/],
  ['a shared-memory size without a region', image({ parameters: { shared_memory_byte_size: { int64_param: '256' } } }, []), INVALID_ARGUMENT, /input "image": shared_memory_region must be a string parameter naming a registered region/],
  ['a shared-memory region as int64', image({ parameters: { shared_memory_region: { int64_param: '1' } } }, []), INVALID_ARGUMENT, /shared_memory_region must be a string parameter/],
  ['shared memory and raw contents for one input', image({ parameters: { shared_memory_region: { string_param: 'nowhere' }, shared_memory_byte_size: { int64_param: '256' } } }), INVALID_ARGUMENT, /raw_input_contents has 1 entries for 0 inputs not in shared memory/],
  ['classification asked of an output', digits({ outputs: [{ name: 'probabilities', parameters: { classification: { int64_param: '3' } } }] }), INVALID_ARGUMENT, /output "probabilities" asks for classification, an extension this server does not provide/],
];

/** @type {import('../helpers/server.js').Server} */
let node;
/** @type {import('../helpers/server.js').Server} */
let gateway;
/** @type {import('../helpers/server.js').TempDir} */
let temp;
test.before(async () => {
  temp = tempDir();
  const repo = makeRepository(temp.dir, { digits: path.join(ROOT, 'bundles', 'digits'), dtypes: path.join(FIXTURES, 'models', 'dtypes') });
  node = await startServer({ model_repo: repo }, { root: temp.dir });
  gateway = await startServer({ gateway: { endpoints: [node.address] } });
});
test.after.always(async () => {
  await gateway?.stop();
  await node?.stop();
  temp?.cleanup();
});

/**
 * The status `request` gets and its message.
 * @param {import('../../dist/client/client.js').InferenceClient} client
 * @param {unknown} request
 * @returns {Promise<{ code: number, details: string }>}
 */
const answer = (client, request) => client.call('ModelInfer', request).then(() => ({ code: OK, details: '' }), (/** @type {import('@grpc/grpc-js').ServiceError} */ err) => ({ code: err.code, details: err.details }));

for (const target of ['node', 'gateway']) {
  test(`${target}: each request of the corpus gets its exact status and a message naming what is wrong`, async (t) => {
    const server = target === 'node' ? node : gateway;
    for (const [label, request, code, names] of CORPUS) {
      const { code: got, details } = await answer(server.client, request);
      t.is(status[got], status[code], `${label}: ${details}`);
      t.regex(details, names, label);
      t.true(details.length < 1024, `${label}: a short message (${details.length} characters)`);
    }
    // Every row left the process serving.
    t.is((await answer(server.client, digits())).code, OK);
  });
}

test('on a stream, each bad request is its own error_message and the stream goes on; the good ones are answered', async (t) => {
  for (const server of [node, gateway]) {
    const call = server.client.stream();
    /** @type {import('../../dist/client/client.js').ModelStreamInferResponse[]} */
    const replies = [];
    call.on('data', (/** @type {import('../../dist/client/client.js').ModelStreamInferResponse} */ r) => replies.push(r));
    const ended = new Promise((resolve, reject) => {
      call.on('end', resolve);
      call.on('error', reject);
    });
    CORPUS.forEach(([, request], i) => call.write({ ...request, id: `row${i}` }));
    call.end();
    await ended;
    t.is(replies.length, CORPUS.length, 'one reply per request');
    const byId = new Map(replies.map((r) => [r.infer_response?.id, r]));
    CORPUS.forEach(([label, , code, names], i) => {
      const reply = byId.get(`row${i}`);
      if (code === OK) t.is(reply?.error_message, '', label);
      else t.regex(reply?.error_message ?? '(no reply)', names, label);
    });
  }
});
