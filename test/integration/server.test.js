// The real program over real gRPC: every RPC of the foundation, the example
// model's accuracy, every datatype through ONNX Runtime, padding to compiled
// batch sizes, refused bundles beside serving ones, and the error answers.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import test from 'ava';
import { status } from '@grpc/grpc-js';
import { FIXTURES, ROOT, bytesOf, dataAs, makeRepository, startServer, tempDir, tensor } from '../helpers/server.js';
import { grpcError } from '../helpers/errors.js';

const DIGITS = path.join(ROOT, 'bundles', 'digits');
const MODELS = path.join(FIXTURES, 'models');
const heldout = JSON.parse(readFileSync(path.join(FIXTURES, 'digits_heldout.json'), 'utf8'));
// The digits manifest without its `name:` line, so a copy can live under another directory name.
const digitsManifest = readFileSync(path.join(DIGITS, 'manifest.yaml'), 'utf8').replace(/^name: .*$/m, '');
const digitsOnnx = readFileSync(path.join(DIGITS, 'model.onnx'));

/** @type {import('../helpers/server.js').Server} */
let server;
/** @type {import('../helpers/server.js').TempDir} */
let temp;

test.before(async () => {
  temp = tempDir();
  const repo = makeRepository(temp.dir, {
    digits: DIGITS,
    dtypes: path.join(MODELS, 'dtypes'),
    fixed: path.join(MODELS, 'fixed'),
    echo: path.join(MODELS, 'echo'),
    negate: path.join(MODELS, 'negate'),
  }, {
    // The graph takes f32; the manifest says f64.
    'bad_dtype/manifest.yaml': digitsManifest.replace('dtype: "f32"', 'dtype: "f64"'),
    'bad_dtype/model.onnx': digitsOnnx,
    // The graph's image is 8x8; the manifest says 8x7.
    'bad_dims/manifest.yaml': digitsManifest.replace('dims: { h: 8, w: 8 }', 'dims: { h: 8, w: 7 }'),
    'bad_dims/model.onnx': digitsOnnx,
    'bad_yaml/manifest.yaml': 'format_version: "2.0"\nexecutable_inputs: [\n',
    'no_onnx/manifest.yaml': digitsManifest,
  });
  server = await startServer({ model_repo: repo, global: { logging: { level: 'info' } } }, { root: temp.dir });
});

test.after.always(async () => {
  await server?.stop();
  temp?.cleanup();
});

/**
 * The call fails with status `code`, its message naming every fragment.
 * @param {import('ava').ExecutionContext} t
 * @param {Promise<unknown>} promise
 * @param {status} code
 * @param {...string} fragments
 */
async function rejects(t, promise, code, ...fragments) {
  const err = await grpcError(t, promise);
  t.is(err.code, code, `expected ${status[code]}, got ${status[err.code]}: ${err.details}`);
  for (const f of fragments) t.true(err.details.includes(f), `"${err.details}" should mention ${f}`);
  return err;
}

/**
 * Digit images (8x8 each) as the digits model's input.
 * @param {number[][]} rows
 * @returns {import('../../dist/client/client.js').Tensor}
 */
const digitsInput = (rows) => ({
  name: 'image', datatype: 'FP32', shape: [rows.length, 8, 8], data: Float32Array.from(rows.flat()),
});

test('ServerLive and ServerReady answer true once the repository has loaded', async (t) => {
  t.true(await server.client.serverLive());
  t.true(await server.client.serverReady());
});

test('ServerMetadata names the server and only the extensions it implements', async (t) => {
  const md = await server.client.call('ServerMetadata');
  t.is(md.name, 'stowage');
  t.regex(md.version, /^\d+\.\d+\.\d+/);
  t.deepEqual(md.extensions, ['model_repository', 'model_configuration', 'system_shared_memory', 'binary_tensor_data', 'parameters', 'statistics', 'logging']);
});

test('RepositoryIndex lists every bundle, refused ones UNAVAILABLE with the reason', async (t) => {
  const { models } = await server.client.call('RepositoryIndex', {});
  const by = Object.fromEntries(models.map((m) => [m.name, m]));
  t.deepEqual(Object.keys(by).sort(), ['bad_dims', 'bad_dtype', 'bad_yaml', 'digits', 'dtypes', 'echo', 'fixed', 'negate', 'no_onnx']);
  for (const name of ['digits', 'dtypes', 'echo', 'fixed', 'negate']) t.is(by[name].state, 'READY', by[name].reason);
  t.is(by.bad_dtype.state, 'UNAVAILABLE');
  t.regex(by.bad_dtype.reason, /bad_dtype.*model\.onnx.*"image".*manifest dtype f64, graph dtype f32/);
  t.regex(by.bad_dims.reason, /bad_dims.*model\.onnx.*"image".*axis 'w' is 7 in the manifest, 8 in the graph/);
  t.regex(by.bad_yaml.reason, /bad_yaml.*manifest\.yaml.*not valid YAML/);
  t.regex(by.no_onnx.reason, /no_onnx.*no executable: expected model\.onnx/);

  const ready = await server.client.call('RepositoryIndex', { ready: true });
  t.deepEqual(ready.models.map((m) => m.name).sort(), ['digits', 'dtypes', 'echo', 'fixed', 'negate']);
});

test('ModelReady is true for a loaded model, false for a refused one, NOT_FOUND for an unknown one', async (t) => {
  t.true(await server.client.modelReady('digits'));
  t.false(await server.client.modelReady('bad_dtype'));
  await rejects(t, server.client.modelReady('nope'), status.NOT_FOUND, '"nope"', 'digits');
});

test('ModelMetadata reports tensors in KServe datatypes with -1 on the batch axis', async (t) => {
  const md = await server.client.call('ModelMetadata', { name: 'digits' });
  t.is(md.name, 'digits');
  t.deepEqual(md.versions, ['1']);
  t.is(md.platform, 'onnxruntime_onnx');
  t.deepEqual(md.inputs.map((i) => [i.name, i.datatype, i.shape.map(Number)]), [['image', 'FP32', [-1, 8, 8]]]);
  t.deepEqual(md.outputs.map((o) => [o.name, o.datatype, o.shape.map(Number)]),
    [['logits', 'FP32', [-1, 10]], ['probabilities', 'FP32', [-1, 10]], ['label', 'INT64', [-1]]]);
  await rejects(t, server.client.call('ModelMetadata', { name: 'digits', version: '7' }), status.NOT_FOUND, 'version "7"');
  await rejects(t, server.client.call('ModelMetadata', { name: 'missing' }), status.NOT_FOUND, '"missing"');
});

test('ModelConfig is a Triton config synthesised from the manifest', async (t) => {
  const { config } = await server.client.call('ModelConfig', { name: 'digits' });
  t.is(config.name, 'digits');
  t.is(config.platform, 'onnxruntime_onnx');
  t.is(config.max_batch_size, 32);
  t.deepEqual(config.input.map((i) => [i.name, i.data_type, i.dims.map(Number)]), [['image', 'TYPE_FP32', [8, 8]]]);
  const label = config.output.find((o) => o.name === 'label');
  t.is(label?.data_type, 'TYPE_INT64');
  t.deepEqual(label?.dims.map(Number), [1]);
  t.deepEqual(label?.reshape?.shape, []);
  t.deepEqual(config.dynamic_batching?.preferred_batch_size, [1, 8, 32], 'requests are coalesced: the config says so');
  t.deepEqual([config.dynamic_batching?.priority_levels, config.dynamic_batching?.default_priority_level].map(Number), [3, 2], 'and which priority levels a request may name');
  const fixed = (await server.client.call('ModelConfig', { name: 'fixed' })).config;
  t.is(fixed.max_batch_size, 4);
});

test('the example model classifies the held-out digits with the accuracy the README states', async (t) => {
  let correct = 0;
  for (let i = 0; i < heldout.images.length; i += 32) {
    const rows = heldout.images.slice(i, i + 32);
    const { outputs } = await server.client.infer('digits', [digitsInput(rows)], { outputs: ['label'] });
    t.is(outputs.length, 1);
    t.deepEqual(outputs[0].shape, [rows.length]);
    dataAs(outputs[0], BigInt64Array).forEach((label, j) => { if (Number(label) === heldout.labels[i + j]) correct++; });
  }
  const accuracy = correct / heldout.labels.length;
  t.is(Math.round(accuracy * 10000) / 10000, heldout.accuracy);
  t.true(readFileSync(path.join(ROOT, 'README.md'), 'utf8').includes(`${(heldout.accuracy * 100).toFixed(1)}%`));
});

test('ModelInfer returns every output in manifest order when none is requested, and echoes the id', async (t) => {
  const { id, outputs } = await server.client.infer('digits', [digitsInput([heldout.images[0]])], { id: 'req-42' });
  t.is(id, 'req-42');
  t.deepEqual(outputs.map((o) => o.name), ['logits', 'probabilities', 'label']);
  const probs = [...dataAs(outputs[1], Float32Array)];
  t.true(Math.abs(probs.reduce((a, b) => a + b, 0) - 1) < 1e-5);
  t.is(Number(dataAs(outputs[2], BigInt64Array)[0]), probs.indexOf(Math.max(...probs)));
});

/** Each numeric datatype: its typed array and six values that probe its range. @type {Record<string, [{ from(values: any[]): import('../../dist/client/client.js').TypedArray }, any[]]>} */
const DTYPE_VALUES = {
  BOOL: [Uint8Array, [1, 0, 1, 0, 0, 1]],
  UINT8: [Uint8Array, [0, 1, 255, 7, 8, 9]],
  UINT16: [Uint16Array, [0, 1, 65535, 7, 8, 9]],
  UINT32: [Uint32Array, [0, 1, 4294967295, 7, 8, 9]],
  UINT64: [BigUint64Array, [0n, 1n, 18446744073709551615n, 7n, 8n, 9n]],
  INT8: [Int8Array, [-128, 127, 0, -1, 5, 6]],
  INT16: [Int16Array, [-32768, 32767, 0, -1, 5, 6]],
  INT32: [Int32Array, [-2147483648, 2147483647, 0, -1, 5, 6]],
  INT64: [BigInt64Array, [-9223372036854775808n, 9223372036854775807n, 0n, -1n, 5n, 6n]],
  FP16: [Uint16Array, [0x3c00, 0xc000, 0x7bff, 0, 0x3555, 0x0001]],
  FP32: [Float32Array, [1.5, -2.25, 3.4e38, 0, 1e-30, 7]],
  FP64: [Float64Array, [1.5, -2.25, 1.7e308, 0, 1e-300, 7]],
};
/** @type {Record<string, string>} */
const MANIFEST_NAME = { BOOL: 'bool', UINT8: 'u8', UINT16: 'u16', UINT32: 'u32', UINT64: 'u64', INT8: 'i8', INT16: 'i16', INT32: 'i32', INT64: 'i64', FP16: 'f16', FP32: 'f32', FP64: 'f64', BYTES: 'bytes' };
const utf8 = (/** @type {string} */ s) => new TextEncoder().encode(s);
const STRINGS = ['', 'a', 'stowage', 'ünïcødé', 'x'.repeat(300), '7'];

/** @returns {import('../../dist/client/client.js').Tensor[]} */
function dtypesInputs() {
  const inputs = Object.entries(DTYPE_VALUES).map(([datatype, [Ctor, values]]) => tensor(`in_${MANIFEST_NAME[datatype]}`, /** @type {any} */ (datatype), [2, 3], Ctor.from(values)));
  inputs.push({ name: 'in_bytes', datatype: 'BYTES', shape: [2, 3], data: STRINGS.map(utf8) });
  return inputs;
}

test('every datatype ONNX Runtime can hold round-trips exactly through raw contents', async (t) => {
  const { outputs } = await server.client.infer('dtypes', dtypesInputs());
  t.is(outputs.length, 13);
  for (const out of outputs) {
    t.deepEqual(out.shape, [2, 3], out.name);
    if (out.datatype === 'BYTES') {
      t.deepEqual(bytesOf(out).map((b) => new TextDecoder().decode(b)), STRINGS);
      continue;
    }
    const [Ctor, values] = DTYPE_VALUES[out.datatype];
    t.deepEqual([...out.data], [...Ctor.from(values)], out.name); // as the sender's typed array held them
  }
});

test('typed contents fields are accepted for every datatype that has one', async (t) => {
  /** @type {{ name: string, datatype: string, shape: number[], contents: Record<string, unknown[]> }[]} */
  const inputs = [];
  /** @type {Record<string, Record<string, unknown[]>>} */
  const contents = {
    BOOL: { bool_contents: [true, false, true, false, false, true] },
    UINT8: { uint_contents: [0, 1, 255, 7, 8, 9] },
    UINT16: { uint_contents: [0, 1, 65535, 7, 8, 9] },
    UINT32: { uint_contents: [0, 1, 4294967295, 7, 8, 9] },
    UINT64: { uint64_contents: ['0', '1', '18446744073709551615', '7', '8', '9'] },
    INT8: { int_contents: [-128, 127, 0, -1, 5, 6] },
    INT16: { int_contents: [-32768, 32767, 0, -1, 5, 6] },
    INT32: { int_contents: [-2147483648, 2147483647, 0, -1, 5, 6] },
    INT64: { int64_contents: ['-9223372036854775808', '9223372036854775807', '0', '-1', '5', '6'] },
    FP32: { fp32_contents: [1.5, -2.25, 3.4e38, 0, 1e-30, 7] },
    FP64: { fp64_contents: [1.5, -2.25, 1.7e308, 0, 1e-300, 7] },
    BYTES: { bytes_contents: STRINGS.map((s) => Buffer.from(s)) },
  };
  for (const [datatype, c] of Object.entries(contents)) {
    inputs.push({ name: `in_${MANIFEST_NAME[datatype]}`, datatype, shape: [2, 3], contents: c });
  }
  // FP16 has no typed field: it must still come raw, so this request mixes... no: KServe forbids mixing.
  // Send FP16 as typed contents of nothing and expect the clear refusal instead.
  const request = { model_name: 'dtypes', inputs: [...inputs, { name: 'in_f16', datatype: 'FP16', shape: [2, 3], contents: { fp32_contents: [1, 2, 3, 4, 5, 6] } }] };
  await rejects(t, server.client.call('ModelInfer', request), status.INVALID_ARGUMENT, 'in_f16', 'raw_input_contents');

  // Without the FP16 input the request is incomplete: the error names it.
  await rejects(t, server.client.call('ModelInfer', { model_name: 'dtypes', inputs }), status.INVALID_ARGUMENT, 'needs input', '"in_f16"');

  // The typed path itself, checked on the echo model (FP32).
  const res = await server.client.call('ModelInfer', {
    model_name: 'echo',
    inputs: [{ name: 'x', datatype: 'FP32', shape: [1, 1024], contents: { fp32_contents: Array.from({ length: 1024 }, (_, i) => i / 4) } }],
  });
  const y = new Float32Array(new Uint8Array(res.raw_output_contents[0]).buffer);
  t.is(y.length, 1024);
  t.is(y[1023], 1023 / 4);
});

test('a partial batch is padded to the smallest compiled batch size and the padding is cut off', async (t) => {
  const x = Float32Array.from([1, 2, 3, 4, 5, 6]);
  const { outputs } = await server.client.infer('fixed', [{ name: 'x', datatype: 'FP32', shape: [2, 3], data: x }]);
  t.deepEqual(outputs[0].shape, [2, 3]);
  t.deepEqual([...outputs[0].data], [2, 4, 6, 8, 10, 12]);
  const one = await server.client.infer('fixed', [{ name: 'x', datatype: 'FP32', shape: [1, 3], data: Float32Array.from([1, 1, 1]) }]);
  t.deepEqual([...one.outputs[0].data], [2, 2, 2]);
  await rejects(t, server.client.infer('fixed', [{ name: 'x', datatype: 'FP32', shape: [5, 3], data: new Float32Array(15) }]),
    status.INVALID_ARGUMENT, '5 rows', 'max_batch_size 4');
});

test('a model without a batch axis takes exactly its fixed shape', async (t) => {
  const { config } = await server.client.call('ModelConfig', { name: 'negate' });
  t.is(config.max_batch_size, 0);
  t.deepEqual(config.input[0].dims.map(Number), [3]);
  t.falsy(config.dynamic_batching, 'nothing to coalesce along');
  const { outputs } = await server.client.infer('negate', [{ name: 'x', datatype: 'FP32', shape: [3], data: Float32Array.from([1, -2, 3]) }]);
  t.deepEqual(outputs[0].shape, [3]);
  t.deepEqual([...outputs[0].data], [-1, 2, -3]);
  await rejects(t, server.client.infer('negate', [{ name: 'x', datatype: 'FP32', shape: [1, 3], data: new Float32Array(3) }]),
    status.INVALID_ARGUMENT, 'expected shape [3] (axes "k")', 'got [1, 3]');
});

test('tensors far above 4 MiB pass in both directions', async (t) => {
  const rows = 2048; // 8 MiB each way
  const x = Float32Array.from({ length: rows * 1024 }, (_, i) => i % 9973);
  const { outputs } = await server.client.infer('echo', [{ name: 'x', datatype: 'FP32', shape: [rows, 1024], data: x }]);
  t.deepEqual(outputs[0].shape, [rows, 1024]);
  t.deepEqual(outputs[0].data, x);
});

test('large raw tensors go to the device uncopied at any byte offset in their message, alone and coalesced', async (t) => {
  // The id's length moves the tensor bytes through all four offsets modulo 4 within the message:
  // a misaligned FP32 view must be aligned on the device side, never misread.
  const x = (/** @type {number} */ k) => Float32Array.from({ length: 150 * 1024 }, (_, i) => (i * 7 + k) % 10007);
  for (let k = 0; k < 4; k++) {
    const { outputs, id } = await server.client.infer('echo', [{ name: 'x', datatype: 'FP32', shape: [150, 1024], data: x(k) }], { id: 'i'.repeat(k) });
    t.is(id, 'i'.repeat(k));
    t.deepEqual(outputs[0].data, x(k), `offset shifted by ${k}`);
  }
  const together = await Promise.all([0, 1, 2, 3, 4, 5].map((k) => server.client.infer('echo', [{ name: 'x', datatype: 'FP32', shape: [150, 1024], data: x(k) }], { id: 'i'.repeat(k) })));
  together.forEach(({ outputs }, k) => t.deepEqual(outputs[0].data, x(k), `request ${k} of 6 sent together`));
});

test('malformed requests get INVALID_ARGUMENT naming the tensor, what was expected and what came', async (t) => {
  const good = heldout.images[0];
  const c = server.client;
  await rejects(t, c.infer('digits', [{ name: 'image', datatype: 'FP32', shape: [1, 8, 7], data: new Float32Array(56) }]),
    status.INVALID_ARGUMENT, '"image"', 'expected shape [-1, 8, 8]', 'got [1, 8, 7]');
  await rejects(t, c.infer('digits', [{ name: 'image', datatype: 'FP64', shape: [1, 8, 8], data: new Float64Array(64) }]),
    status.INVALID_ARGUMENT, '"image"', 'expected datatype FP32, got FP64');
  await rejects(t, c.infer('digits', [{ name: 'image', datatype: 'FP32', shape: [1, 8, 8], data: new Float32Array(63) }]),
    status.INVALID_ARGUMENT, '"image"', 'expected 256 bytes', 'got 252');
  await rejects(t, c.infer('digits', [{ name: 'img', datatype: 'FP32', shape: [1, 8, 8], data: new Float32Array(64) }]),
    status.INVALID_ARGUMENT, 'unknown input "img"', 'expected inputs: image');
  await rejects(t, c.infer('digits', [digitsInput([good])], { outputs: ['labels'] }),
    status.INVALID_ARGUMENT, 'unknown output "labels"', 'logits, probabilities, label');
  await rejects(t, c.infer('digits', [{ name: 'image', datatype: 'FP32', shape: [0, 8, 8], data: new Float32Array(0) }]),
    status.INVALID_ARGUMENT, 'got [0, 8, 8]');
  // A datatype KServe does not have, which only a client that does not check would send.
  await rejects(t, c.call('ModelInfer', { model_name: 'digits', inputs: [{ name: 'image', datatype: 'FLOAT', shape: [1, 8, 8] }], raw_input_contents: [Buffer.alloc(256)] }),
    status.INVALID_ARGUMENT, 'unknown datatype "FLOAT"');
  await rejects(t, c.infer('dtypes', dtypesInputs().map((i) => (i.name === 'in_bytes' ? { ...i, data: [utf8('a')] } : i))),
    status.INVALID_ARGUMENT, '"in_bytes"', '6 BYTES elements', 'hold 1');
  await rejects(t, c.infer('digits', [digitsInput([good])], { outputs: ['label'], parameters: { sequence_id: { int64_param: '3' } } }),
    status.INVALID_ARGUMENT, 'sequence');
  // The server keeps serving after every one of them.
  const { outputs } = await c.infer('digits', [digitsInput([good])], { outputs: ['label'] });
  t.is(Number(dataAs(outputs[0], BigInt64Array)[0]), heldout.labels[0]);
});

test('an unknown model is NOT_FOUND and a refused one UNAVAILABLE with its reason', async (t) => {
  await rejects(t, server.client.infer('nope', [digitsInput([heldout.images[0]])]), status.NOT_FOUND, 'unknown model "nope"', 'digits');
  await rejects(t, server.client.infer('bad_dtype', [digitsInput([heldout.images[0]])]), status.UNAVAILABLE, '"bad_dtype"', 'manifest dtype f64');
  const request = (/** @type {string} */ version) => ({ model_name: 'digits', model_version: version, inputs: [{ name: 'image', datatype: 'FP32', shape: [1, 8, 8] }],
    raw_input_contents: [Buffer.from(Float32Array.from(heldout.images[0]).buffer)] });
  await rejects(t, server.client.call('ModelInfer', request('2')), status.NOT_FOUND, 'no version "2"', 'available versions: 1');
  const ok = await server.client.call('ModelInfer', request('1'));
  t.is(ok.model_version, '1');
});

test('a request whose timeout parameter has passed is DEADLINE_EXCEEDED', async (t) => {
  const rows = Array.from({ length: 32 }, () => heldout.images[0]);
  await rejects(t, server.client.infer('digits', [digitsInput(rows)], { parameters: { timeout: { int64_param: '1' } } }),
    status.DEADLINE_EXCEEDED, 'deadline');
});

test('RPCs outside this release answer UNIMPLEMENTED naming the RPC', async (t) => {
  for (const rpc of ['TraceSetting']) {
    await rejects(t, server.client.call(rpc, {}), status.UNIMPLEMENTED, rpc);
  }
});

test('CUDA shared memory on the CPU backend: nothing registered, unregister succeeds, register says why not', async (t) => {
  t.deepEqual(await server.client.call('CudaSharedMemoryStatus', { name: '' }), { regions: {} });
  await rejects(t, server.client.call('CudaSharedMemoryStatus', { name: 'gpu0' }), status.NOT_FOUND, 'no shared-memory region "gpu0" is registered');
  t.deepEqual(await server.client.call('CudaSharedMemoryUnregister', { name: '' }), {}, 'unregister all, as perf_analyzer does first and last');
  t.deepEqual(await server.client.call('CudaSharedMemoryUnregister', { name: 'gpu0' }), {});
  await rejects(t, server.client.call('CudaSharedMemoryRegister', { name: 'gpu0', raw_handle: Buffer.alloc(8), device_id: 0, byte_size: '64' }),
    status.INVALID_ARGUMENT, 'CudaSharedMemoryRegister', 'needs backend cuda', 'runs backend cpu', 'system shared memory');
  // REST alike: Triton's body, refused with the same words; the status is an empty list.
  const rest = await fetch(`${server.rest}/v2/cudasharedmemory/region/gpu0/register`, { method: 'POST', body: JSON.stringify({ raw_handle: { b64: Buffer.alloc(64).toString('base64') }, device_id: 0, byte_size: 64 }) });
  t.is(rest.status, 400);
  t.regex((await rest.json()).error, /needs backend cuda/);
  t.deepEqual(await (await fetch(`${server.rest}/v2/cudasharedmemory/status`)).json(), []);
  const meta = await server.client.call('ServerMetadata', {});
  t.false(meta.extensions.includes('cuda_shared_memory'), 'not advertised on backend cpu');
});

test.serial('LogSettings reads and sets the log level with Triton\'s switches', async (t) => {
  const current = (await server.client.call('LogSettings', { settings: {} })).settings;
  t.is(current.log_info.bool_param, true);
  t.is(current.log_verbose_level.uint32_param, 0);
  t.is(current.log_file.string_param, '');
  const verbose = (await server.client.call('LogSettings', { settings: { log_verbose_level: { uint32_param: 1 } } })).settings;
  t.is(verbose.log_verbose_level.uint32_param, 1);
  // Debug lines now appear: a failed request is logged at debug level.
  await t.throwsAsync(server.client.infer('nope', [digitsInput([heldout.images[0]])]));
  await rejects(t, server.client.call('LogSettings', { settings: { log_file: { string_param: '/tmp/x.log' } } }), status.INVALID_ARGUMENT, 'log_file', 'stdout');
  await rejects(t, server.client.call('LogSettings', { settings: { log_colour: { bool_param: true } } }), status.INVALID_ARGUMENT, 'unknown log setting "log_colour"');
  await rejects(t, server.client.call('LogSettings', { settings: { log_info: { uint32_param: 1 } } }), status.INVALID_ARGUMENT, 'log_info takes a bool value');
  const restored = (await server.client.call('LogSettings', { settings: { log_verbose_level: { uint32_param: 0 } } })).settings;
  t.is(restored.log_verbose_level.uint32_param, 0);
  // Log lines reach us through a pipe: wait for them rather than look once.
  t.is((await server.waitForLog((l) => l.msg === 'log level changed by LogSettings' && l.to === 'debug')).from, 'info');
  t.is((await server.waitForLog((l) => l.level === 20 && l.rpc === 'ModelInfer')).code, 'NOT_FOUND', 'a debug line was written while verbose');
});

test('ModelStreamInfer answers each request on the stream with its id, errors included, and the stream lives on', async (t) => {
  const stream = server.client.stream();
  /** @type {{ error_message: string, infer_response: import('../../dist/client/client.js').InferenceReplies['ModelInfer'] }[]} */
  const responses = [];
  const done = new Promise((resolve, reject) => {
    stream.on('data', (/** @type {typeof responses[number]} */ r) => responses.push(r));
    stream.on('end', resolve);
    stream.on('error', reject);
  });
  /**
   * @param {string} id
   * @param {number[][]} images
   * @param {Record<string, unknown>} [extra]
   */
  const request = (id, images, extra = {}) => ({
    model_name: 'digits', id,
    inputs: [{ name: 'image', datatype: 'FP32', shape: [images.length, 8, 8] }],
    outputs: [{ name: 'label' }],
    raw_input_contents: [Buffer.from(Float32Array.from(images.flat()).buffer)],
    ...extra,
  });
  stream.write(request('a', heldout.images.slice(0, 3)));
  stream.write(request('bad', heldout.images.slice(0, 1), { model_name: 'nope' }));
  stream.write(request('b', heldout.images.slice(3, 4)));
  stream.end();
  await done;
  const byId = Object.fromEntries(responses.map((r) => [r.infer_response.id, r]));
  t.deepEqual(Object.keys(byId).sort(), ['a', 'b', 'bad']);
  t.is(byId.bad.error_message, 'unknown model "nope"; the repository serves: bad_dims, bad_dtype, bad_yaml, digits, dtypes, echo, fixed, negate, no_onnx');
  for (const [id, rows] of /** @type {[string, [number, number]][]} */ ([['a', [0, 3]], ['b', [3, 4]]])) {
    t.is(byId[id].error_message, '');
    const labels = new BigInt64Array(new Uint8Array(byId[id].infer_response.raw_output_contents[0]).buffer);
    t.deepEqual([...labels].map(Number), heldout.labels.slice(...rows));
  }
});

test('the admin port answers /healthz and /readyz with every model\'s state', async (t) => {
  const health = await fetch(`http://127.0.0.1:${server.adminPort}/healthz`);
  t.is(health.status, 200);
  const ready = await fetch(`http://127.0.0.1:${server.adminPort}/readyz`);
  t.is(ready.status, 200);
  /** @type {{ ready: boolean, loading: string[], models: { name: string, state: string, reason: string }[] }} */
  const body = await ready.json();
  t.true(body.ready);
  t.deepEqual(body.loading, []);
  t.is(body.models.find((m) => m.name === 'bad_dims')?.state, 'UNAVAILABLE');
  t.is((await fetch(`http://127.0.0.1:${server.adminPort}/nope`)).status, 404);
});

test('start-up logs each refused bundle and each load with its time', (t) => {
  const loaded = server.logs.filter((l) => l.msg === 'model loaded').map((l) => l.model).sort();
  t.deepEqual(loaded, ['digits', 'dtypes', 'echo', 'fixed', 'negate']);
  t.true(server.logs.filter((l) => l.msg === 'model loaded').every((l) => typeof l.load_ms === 'number'));
  const refused = server.logs.filter((l) => String(l.msg).startsWith('bundle refused')).map((l) => l.model).sort();
  t.deepEqual(refused, ['bad_dims', 'bad_dtype', 'bad_yaml', 'no_onnx']);
});
