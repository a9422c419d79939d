// The REST bodies' JSON reader (src/protocol/json-reader.ts) and a tensor's data both ways
// (json-tensors.ts): what JSON.parse would give, within bounds, in slices, with the deferred
// `data` decoded straight into its datatype's bytes and checked against its range.
import test from 'ava';
import { JsonError, RawJson, readJson, readJsonNow } from '../../../dist/protocol/json-reader.js';
import { decodeJsonData, encodeJsonData } from '../../../dist/protocol/json-tensors.js';
import { StowageError } from '../../../dist/shared/errors.js';

const LIMITS = { maxDepth: 100, maxValues: 1000 };
const read = (/** @type {string} */ text, /** @type {Partial<import('../../../dist/protocol/json-reader.js').ReadJsonOptions>} */ options = {}) => readJsonNow(Buffer.from(text), { limits: LIMITS, ...options });
const isData = (/** @type {readonly (string | number)[]} */ p) => p.length === 3 && p[0] === 'inputs' && p[2] === 'data';

test('it reads what JSON.parse reads, objects without a prototype', (t) => {
  for (const text of ['{"a":[1,-2.5e3,{"b":null}],"c":"x\\n\\u00e9\\"","d":true,"e":false}', '[]', '{}', '"s"', '0', '[[[]]]', ' \n\t{ "k" : [ 1 , 2 ] } ']) {
    t.deepEqual(JSON.parse(JSON.stringify(read(text))), JSON.parse(text), text);
  }
  const proto = /** @type {Record<string, unknown>} */ (read('{"__proto__":"x","constructor":1}'));
  t.is(Object.getPrototypeOf(proto), null);
  t.deepEqual(Object.keys(proto), ['__proto__', 'constructor'], 'a key like any other');
  t.deepEqual(read('[NaN,Infinity,-Infinity]'), [NaN, Infinity, -Infinity], 'as Triton\'s reader takes them');
});

test('what is not JSON, or past the limits, is refused naming the byte', (t) => {
  for (const [text, message] of [
    ['[1,]', /unexpected "\]" at byte 3/], ['{"a":1,}', /expected a key \(a string\) at byte 7/], ['[01]', /"01" is not a JSON value at byte 1/],
    ['"abc', /a string that does not end at byte 0/], ['[1] x', /more JSON after the document at byte 4/], ['["a\u0001"]', /a control character inside a string at byte 3/],
    ['[1e400]', /the number 1e400 is too large for a double at byte 1/], ['[0x10]', /"0x10" is not a JSON value/], ['{"a" 1}', /expected ":" after a key at byte 5/],
    ['[1 2]', /expected "," or "\]" at byte 3/], ['', /the JSON ends early at byte 0/], [`${'['.repeat(101)}${']'.repeat(101)}`, /nesting deeper than 100 levels at byte 100/],
    [JSON.stringify(Array(1000).fill(0)), /more than 1000 values at byte 1999/],
  ]) {
    const err = t.throws(() => read(/** @type {string} */ (text)), { instanceOf: JsonError });
    t.regex(err?.message ?? '', /** @type {RegExp} */ (message), /** @type {string} */ (text));
  }
});

test('a deferred value is left unbuilt: where it is, how deep, how many scalars; its nesting counts against the limit', (t) => {
  const text = '{"inputs":[{"name":"x","data":[[1,2],[3,4.5]]},{"data":5},{"data":"s"},{"data":[]}],"data":[1]}';
  const doc = /** @type {any} */ (read(text, { defer: isData }));
  const spans = doc.inputs.map((/** @type {any} */ i) => i.data);
  for (const span of spans) t.true(span instanceof RawJson);
  t.deepEqual(spans.map((/** @type {RawJson} */ s) => [text.slice(s.start, s.end), s.depth, s.scalars]), [['[[1,2],[3,4.5]]', 2, 4], ['5', 0, 1], ['"s"', 0, 1], ['[]', 1, 0]]);
  t.deepEqual(doc.data, [1], 'only the paths asked for are deferred');
  t.throws(() => read(`{"inputs":[{"data":${'['.repeat(99)}${']'.repeat(99)}}]}`, { defer: isData }), { message: /nesting deeper than 100 levels/ });
});

test('read in slices, it gives the same as read in one go, turning the event loop between slices', async (t) => {
  const text = JSON.stringify({ inputs: [{ name: 'x', datatype: 'FP32', shape: [2, 300], data: Array.from({ length: 600 }, (_, i) => i / 7) }], id: 'é'.repeat(50) });
  const whole = read(text, { defer: isData });
  let turns = 0;
  const timer = setInterval(() => turns++, 0);
  const sliced = await readJson(Buffer.from(text), { limits: LIMITS, defer: isData, sliceBytes: 64 });
  clearInterval(timer);
  t.deepEqual(sliced, whole);
  t.true(turns > 0, 'other work ran meanwhile');
});

/** The span of input 0's data in `text` and the body's bytes. @param {string} text */
const dataOf = (text) => {
  const body = Buffer.from(text);
  return { body, raw: /** @type {any} */ (readJsonNow(body, { limits: LIMITS, defer: isData })).inputs[0].data };
};
const decode = (/** @type {string} */ data, /** @type {any} */ datatype, /** @type {number[]} */ shape) => {
  const { body, raw } = dataOf(`{"inputs":[{"data":${data}}]}`);
  return decodeJsonData(body, raw, 'x', datatype, shape);
};

test('data is decoded into its datatype\'s bytes, flat or nested, exactly', async (t) => {
  t.deepEqual([...new Float32Array((await decode('[[1,2.5],[-0.125,1e-3]]', 'FP32', [2, 2])).buffer)], [1, 2.5, -0.125, Math.fround(1e-3)]);
  t.deepEqual([...new Float64Array((await decode('[0.1,1.7976931348623157e308,NaN,-Infinity,123456789012345678]', 'FP64', [5])).buffer)], [0.1, 1.7976931348623157e308, NaN, -Infinity, 123456789012345678]);
  t.deepEqual([...new BigInt64Array((await decode('[9223372036854775807,-9223372036854775808,0]', 'INT64', [3])).buffer)], [9223372036854775807n, -9223372036854775808n, 0n]);
  t.deepEqual([...new BigUint64Array((await decode('[18446744073709551615]', 'UINT64', [1])).buffer)], [18446744073709551615n]);
  t.deepEqual([...(await decode('[true,false]', 'BOOL', [2]))], [1, 0]);
  t.deepEqual([...new Int8Array((await decode('[-128,127,-0]', 'INT8', [3])).buffer)], [-128, 127, 0]);
  const bytes = await decode('["a","\\"é\\u0000",""]', 'BYTES', [3]);
  t.deepEqual([...bytes], [1, 0, 0, 0, 0x61, 4, 0, 0, 0, 0x22, 0xc3, 0xa9, 0, 0, 0, 0, 0], 'length-prefixed, escapes resolved, UTF-8');
  // Every float with up to 17 digits reads as Number() reads it.
  const values = Array.from({ length: 2000 }, (_, i) => (Math.sin(i) * 10 ** ((i % 40) - 20)));
  const back = new Float64Array((await decode(JSON.stringify(values), 'FP64', [2000])).buffer);
  t.true(values.every((v, i) => Object.is(v, back[i])));
});

test('an element outside its datatype\'s range, of the wrong kind, or one too many is refused naming it', async (t) => {
  for (const [data, datatype, shape, message] of [
    ['[300]', 'UINT8', [1], /element 0 is 300, not an integer from 0 to 255/], ['[-1]', 'UINT16', [1], /element 0 is -1, not an integer from 0 to 65535/],
    ['[2147483648]', 'INT32', [1], /not an integer from -2147483648 to 2147483647/], ['[9223372036854775808]', 'INT64', [1], /not an integer from/],
    ['[1.0]', 'INT32', [1], /element 0 is 1\.0, not an integer/], ['[1e2]', 'UINT8', [1], /not an integer/], ['["1"]', 'INT32', [1], /element 0 is "1", not an integer/],
    ['[1e39]', 'FP32', [1], /not a number within FP32's range/], ['[1e400]', 'FP64', [1], /not a number a double holds/], ['[true]', 'FP32', [1], /element 0 is true, not a number/],
    ['[1]', 'BOOL', [1], /element 0 is 1, not true or false/], ['[1]', 'BYTES', [1], /element 0 is 1, not a string/], ['[1.2.3]', 'FP32', [1], /element 0 is 1\.2\.3, not a number/],
    ['[1,2,3]', 'FP32', [2], /shape \[2\] needs 2 elements, its data holds 3/], ['[1]', 'FP16', [1], /FP16 has no JSON form/], ['[{"a":1}]', 'FP32', [2], /holds an object/],
  ]) {
    const err = await t.throwsAsync(decode(/** @type {string} */ (data), datatype, /** @type {number[]} */ (shape)));
    t.true(err instanceof StowageError, String(message));
    t.regex(err?.message ?? '', /** @type {RegExp} */ (message));
  }
});

test('data written back as Triton writes it: NaN and Infinity as words, never null; booleans; a misaligned output', async (t) => {
  t.is((await encodeJsonData('FP32', new Uint8Array(new Float32Array([1.5, NaN, Infinity, -Infinity]).buffer))).join(''), '[1.5,NaN,Infinity,-Infinity]');
  t.is((await encodeJsonData('BOOL', Uint8Array.from([1, 0, 2]))).join(''), '[true,false,true]');
  t.is((await encodeJsonData('INT64', new Uint8Array(new BigInt64Array([-5n, 9007199254740993n]).buffer))).join(''), '[-5,9007199254740993]');
  const misaligned = new Uint8Array(9).subarray(1);
  new DataView(misaligned.buffer, 1).setFloat32(0, 2.5, true);
  new DataView(misaligned.buffer, 1).setFloat32(4, -1, true);
  t.is((await encodeJsonData('FP32', misaligned)).join(''), '[2.5,-1]');
  t.is((await encodeJsonData('BYTES', Uint8Array.from([1, 0, 0, 0, 0x61]))).join(''), '["a"]');
  const big = await encodeJsonData('UINT8', new Uint8Array(200_000).fill(7));
  t.true(big.length > 3, 'written in pieces');
  t.is(JSON.parse(big.join('')).length, 200_000);
});
