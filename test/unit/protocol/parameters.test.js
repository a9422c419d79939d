import test from 'ava';
import { parameterValues } from '../../../dist/protocol/codec.js';
import { jsonParameters, parseRestInfer } from '../../../dist/protocol/rest-tensors.js';
import { fromModelInferRequest } from '../../../dist/protocol/codec.js';
import { plainParameters, requestedOutput, requestParameters, sharedMemoryRef } from '../../../dist/shared/request-check.js';
import { stowageThrows } from '../../helpers/errors.js';

/**
 * `fn` throws a StowageError with `code` whose message matches `message`.
 * @param {import('ava').ExecutionContext} t
 * @param {() => unknown} fn
 * @param {RegExp} message
 * @param {import('../../../dist/shared/errors.js').ErrorCode} code
 */
const refused = (t, fn, message, code) => {
  const err = stowageThrows(t, fn);
  t.regex(err?.message ?? '', message);
  t.is(err?.code, code);
};

// The same parameters as gRPC carries them (proto-loader's oneofs, int64 as strings) and as REST's JSON does.
/** @type {import('../../../dist/protocol/types.js').Parameters} */
const grpc = {
  flag: { parameter_choice: 'bool_param', bool_param: true },
  count: { parameter_choice: 'int64_param', int64_param: '-9007199254740993' },
  big: { parameter_choice: 'uint64_param', uint64_param: '18446744073709551615' },
  ratio: { parameter_choice: 'double_param', double_param: 0.5 },
  label: { parameter_choice: 'string_param', string_param: 'x' },
};

test('both protocols\' parameters become the same values: integers as bigint with every digit, doubles as numbers', (t) => {
  const values = parameterValues(grpc);
  t.deepEqual({ ...values }, { flag: true, count: -9007199254740993n, big: 18446744073709551615n, ratio: 0.5, label: 'x' });
  t.is(Object.getPrototypeOf(values), null, 'a parameter named __proto__ is one like any other');
  const json = jsonParameters({ flag: true, count: 12, ratio: 0.5, label: 'x' }, 'the request');
  t.deepEqual({ ...json }, { flag: true, count: 12n, ratio: 0.5, label: 'x' });
  // A oneof left unset is a parameter without a value; a message built by hand may set only the field.
  t.deepEqual({ ...parameterValues({ empty: {}, bare: { int64_param: '3' } }) }, { empty: null, bare: 3n });
  refused(t, () => jsonParameters({ bad: null }, 'the request'), /the request: parameter "bad" must be a boolean, a finite number or a string/, 'STOWAGE_INVALID_REQUEST');
  refused(t, () => jsonParameters([1], 'output "p"'), /output "p": parameters must be an object/, 'STOWAGE_INVALID_REQUEST');
});

test('plain parameters, as hooks see them: integers as numbers, a parameter without a value left out', (t) => {
  t.deepEqual(plainParameters(parameterValues({ ...grpc, empty: {} })), { flag: true, count: -9007199254740992, big: 18446744073709552000, ratio: 0.5, label: 'x' });
});

test('a request\'s timeout, priority and sequence are read alike from gRPC and from JSON', (t) => {
  for (const [name, read] of /** @type {const} */ ([['grpc', (/** @type {any} */ p) => parameterValues(p)], ['json', (/** @type {any} */ p) => jsonParameters(p, 'the request')]])) {
    const g = name === 'grpc';
    const int = (/** @type {number} */ v) => (g ? { int64_param: String(v) } : v);
    const dbl = (/** @type {number} */ v) => (g ? { double_param: v } : v);
    t.deepEqual(requestParameters(read({ timeout: int(2500) })), { parameters: { timeout: 2500 }, timeoutUs: 2500 }, name);
    t.deepEqual(requestParameters(read({ timeout: int(0) })), { parameters: { timeout: 0 } }, `${name}: 0 is no timeout`);
    t.is(requestParameters(read({ timeout: int(2 ** 52) })).timeoutUs, undefined, `${name}: past a timer's range, no timeout`);
    t.deepEqual(requestParameters(read({ priority: int(1) })), { parameters: { priority: 1 }, priority: 1 }, name);
    t.deepEqual(requestParameters(read({ priority: int(0) })), { parameters: { priority: 0 } }, `${name}: 0 is the model's default`);
    t.deepEqual(requestParameters(read({ sequence_id: int(0) })), { parameters: { sequence_id: 0 } }, `${name}: sequence 0 is none`);
    refused(t, () => requestParameters(read({ sequence_id: int(7) })), /no sequence batching/, 'STOWAGE_UNSUPPORTED');
    refused(t, () => requestParameters(read({ sequence_id: g ? { string_param: 'a' } : 'a' })), /no sequence batching/, 'STOWAGE_UNSUPPORTED');
    refused(t, () => requestParameters(read({ sequence_end: g ? { bool_param: true } : true })), /no sequence batching/, 'STOWAGE_UNSUPPORTED');
    refused(t, () => requestParameters(read({ timeout: int(-5) })), /parameter "timeout" must be a non-negative int64 \(microseconds\), got the integer -5$/, 'STOWAGE_INVALID_REQUEST');
    refused(t, () => requestParameters(read({ timeout: dbl(1.5) })), /"timeout" must be a non-negative int64 \(microseconds\), got the double 1.5$/, 'STOWAGE_INVALID_REQUEST');
    refused(t, () => requestParameters(read({ priority: int(-1) })), /parameter "priority" must be an unsigned integer \(uint64_param\), got the integer -1$/, 'STOWAGE_INVALID_REQUEST');
    refused(t, () => requestParameters(read({ priority: g ? { string_param: 'high' } : 'high' })), /got the string "high"$/, 'STOWAGE_INVALID_REQUEST');
  }
  // gRPC's double 2 is a double, as Triton reads it; JSON has one kind of number, and 2 is whole.
  refused(t, () => requestParameters(parameterValues({ timeout: { double_param: 2 } })), /got the double 2$/, 'STOWAGE_INVALID_REQUEST');
  t.is(requestParameters(jsonParameters({ timeout: 2 }, 'the request')).timeoutUs, 2);
  refused(t, () => requestParameters(parameterValues({ timeout: {} })), /got no value$/, 'STOWAGE_INVALID_REQUEST');
});

test('Triton\'s shared-memory parameters become a region reference; classification is refused', (t) => {
  t.is(sharedMemoryRef('input', 'a', jsonParameters({ binary_data_size: 4 }, 'input "a"')), null);
  t.deepEqual(sharedMemoryRef('input', 'a', jsonParameters({ shared_memory_region: 'r', shared_memory_byte_size: 64 }, 'input "a"')),
    { kind: 'region', region: 'r', byteSize: 64, offset: 0 });
  t.deepEqual(sharedMemoryRef('input', 'a', parameterValues({ shared_memory_region: { string_param: 'r' }, shared_memory_byte_size: { uint64_param: '64' }, shared_memory_offset: { int64_param: '128' } })),
    { kind: 'region', region: 'r', byteSize: 64, offset: 128 });
  refused(t, () => sharedMemoryRef('input', 'a', jsonParameters({ shared_memory_byte_size: 64 }, '')), /input "a": shared_memory_region must be a string parameter/, 'STOWAGE_INVALID_REQUEST');
  refused(t, () => sharedMemoryRef('input', 'a', jsonParameters({ shared_memory_region: 'r' }, '')), /input "a": shared_memory_byte_size is required/, 'STOWAGE_INVALID_REQUEST');
  refused(t, () => sharedMemoryRef('input', 'a', jsonParameters({ shared_memory_region: 'r', shared_memory_byte_size: 1.5 }, '')), /shared_memory_byte_size must be a non-negative int64/, 'STOWAGE_INVALID_REQUEST');
  refused(t, () => sharedMemoryRef('input', 'a', parameterValues({ shared_memory_region: { string_param: 'r' }, shared_memory_byte_size: { uint64_param: '18446744073709551615' } })),
    /shared_memory_byte_size must be a non-negative int64/, 'STOWAGE_INVALID_REQUEST');
  t.deepEqual(requestedOutput('p', jsonParameters({ binary_data: true }, '')), { name: 'p', region: null });
  refused(t, () => requestedOutput('p', jsonParameters({ classification: 3 }, '')), /output "p" asks for classification/, 'STOWAGE_UNSUPPORTED');
});

test('a request\'s parameters reach the data plane alike from gRPC and REST: every field requestParameters reads (priority, timeout, the values), none listed apart', async (t) => {
  const rest = async (/** @type {Record<string, unknown>} */ parameters) => (await parseRestInfer(Buffer.from(JSON.stringify({
    inputs: [{ name: 'x', datatype: 'FP32', shape: [1], data: [1] }], parameters,
  })), undefined, 'm', '')).request;
  const grpcRequest = (/** @type {import('../../../dist/protocol/types.js').Parameters} */ parameters) => fromModelInferRequest(/** @type {any} */ ({
    model_name: 'm', model_version: '', id: '', inputs: [{ name: 'x', datatype: 'FP32', shape: ['1'], parameters: {}, contents: null }],
    outputs: [], parameters, raw_input_contents: [new Uint8Array(4)],
  }), false);
  const cases = [
    { rest: { priority: 2, timeout: 5000, tag: 'a' }, grpc: { priority: { parameter_choice: 'uint64_param', uint64_param: '2' }, timeout: { parameter_choice: 'int64_param', int64_param: '5000' }, tag: { parameter_choice: 'string_param', string_param: 'a' } } },
    { rest: { priority: 0 }, grpc: { priority: { parameter_choice: 'uint64_param', uint64_param: '0' } } },
    { rest: {}, grpc: {} },
  ];
  for (const c of cases) {
    const fromRest = await rest(c.rest);
    const fromGrpc = grpcRequest(/** @type {any} */ (c.grpc));
    t.is(fromGrpc.refused, undefined, JSON.stringify(fromGrpc.refused));
    const read = requestParameters(parameterValues(/** @type {any} */ (c.grpc)));
    for (const key of /** @type {(keyof typeof read)[]} */ (Object.keys(read))) {
      t.deepEqual(fromGrpc[key], read[key], `gRPC carries ${key}`);
      t.deepEqual(fromRest[key], read[key], `REST carries ${key}`);
    }
    t.deepEqual(Object.keys(fromGrpc).filter((k) => !['model', 'version', 'id', 'inputs', 'outputs'].includes(k)).sort(), Object.keys(read).sort(), 'gRPC adds nothing else and drops nothing');
  }
  t.is(grpcRequest(/** @type {any} */ (cases[0].grpc)).priority, 2, 'Triton\'s priority, carried');
  t.is(grpcRequest(/** @type {any} */ (cases[1].grpc)).priority, undefined, 'priority 0: the model\'s default, nothing carried');
});
