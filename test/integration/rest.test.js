// The KServe V2 REST API (Triton's extensions) through the real server with fetch: health,
// metadata, readiness, inference in JSON and with binary tensors giving exactly what gRPC gives,
// the repository extension, statistics, shared memory's status, logging, and bad requests
// answered 400-class naming what was wrong.
import path from 'node:path';
import test from 'ava';
import { FIXTURES, ROOT, makeRepository, startServer, tempDir, tensor } from '../helpers/server.js';

/** @type {import('../helpers/server.js').Server} */
let server;
/** @type {import('../helpers/server.js').TempDir} */
let temp;
/** @type {string} */
let base;

test.before(async () => {
  temp = tempDir();
  const repo = makeRepository(temp.dir, { digits: path.join(ROOT, 'bundles', 'digits'), dtypes: path.join(FIXTURES, 'models', 'dtypes'), convnet: path.join(FIXTURES, 'models', 'convnet') });
  server = await startServer({ model_repo: repo, global: { model_control_mode: 'explicit' } }, { root: temp.dir });
  base = /** @type {string} */ (server.rest);
  for (const name of ['digits', 'dtypes']) await server.client.call('RepositoryModelLoad', { model_name: name });
});

test.after.always(async () => {
  await server?.stop();
  temp?.cleanup();
});

/**
 * @param {string} route
 * @param {RequestInit} [init]
 */
async function call(route, init) {
  const res = await fetch(`${base}${route}`, init);
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null, headers: res.headers };
}

const post = (/** @type {string} */ route, /** @type {unknown} */ body) => call(route, { method: 'POST', body: JSON.stringify(body), headers: { 'content-type': 'application/json' } });

test.serial('health, server and model metadata, readiness, config', async (t) => {
  t.is((await call('/v2/health/live')).status, 200);
  t.deepEqual((await call('/v2/health/ready')).body, { ready: true });
  const md = (await call('/v2')).body;
  t.is(md.name, 'stowage');
  t.true(md.extensions.includes('model_repository') || md.extensions.includes('statistics'));
  const model = (await call('/v2/models/digits')).body;
  t.deepEqual(model.inputs, [{ name: 'image', datatype: 'FP32', shape: [-1, 8, 8] }]);
  t.deepEqual((await call('/v2/models/digits/versions/1/ready')).body, { ready: true });
  t.is((await call('/v2/models/convnet/ready')).status, 400, 'in the repository, not loaded: 400, as Triton answers');
  t.is((await call('/v2/models/nope/ready')).status, 400, 'unknown: not ready, as Triton answers');
  t.is((await call('/v2/models/digits/config')).body.max_batch_size, 32);
  const missing = await call('/v2/models/nope');
  t.is(missing.status, 404);
  t.regex(missing.body.error, /nope/);
});

test('inference in JSON and with binary tensors answers exactly what gRPC answers', async (t) => {
  const x = Float32Array.from({ length: 3 * 64 }, (_, i) => (i * 7) % 17);
  const grpc = await server.client.infer('digits', [tensor('image', 'FP32', [3, 8, 8], x)]);
  const byName = Object.fromEntries(grpc.outputs.map((o) => [o.name, o]));
  // JSON in, JSON out.
  const json = await post('/v2/models/digits/infer', { id: 'r1', inputs: [{ name: 'image', datatype: 'FP32', shape: [3, 8, 8], data: [...x] }] });
  t.is(json.status, 200);
  t.is(json.body.id, 'r1');
  for (const o of json.body.outputs) {
    const want = byName[o.name];
    t.deepEqual(o.shape, want.shape);
    t.deepEqual(o.data, Array.from(/** @type {ArrayLike<number | bigint>} */ (/** @type {unknown} */ (want.data)), (v) => Number(v)), o.name);
  }
  // Binary in (Inference-Header-Content-Length), binary out for one output, JSON for another.
  const header = Buffer.from(JSON.stringify({ inputs: [{ name: 'image', datatype: 'FP32', shape: [3, 8, 8], parameters: { binary_data_size: x.byteLength } }],
    outputs: [{ name: 'probabilities', parameters: { binary_data: true } }, { name: 'label' }] }));
  const res = await fetch(`${base}/v2/models/digits/infer`, { method: 'POST', body: Buffer.concat([header, Buffer.from(x.buffer)]), headers: { 'inference-header-content-length': String(header.length) } });
  t.is(res.status, 200);
  const jsonBytes = Number(res.headers.get('inference-header-content-length'));
  const body = Buffer.from(await res.arrayBuffer());
  const head = JSON.parse(body.subarray(0, jsonBytes).toString());
  const [probs, label] = head.outputs;
  t.is(probs.parameters.binary_data_size, 3 * 10 * 4);
  const bytes = body.subarray(jsonBytes);
  t.deepEqual([...new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length))], [.../** @type {Float32Array} */ (byName.probabilities.data)]);
  t.deepEqual(label.data, Array.from(/** @type {BigInt64Array} */ (byName.label.data), Number));
});

test('every datatype through JSON: numbers, booleans, int64 and strings round-trip', async (t) => {
  const md = (await call('/v2/models/dtypes')).body;
  /** @type {(datatype: string) => unknown[]} */
  const values = (datatype) => {
    if (datatype === 'BOOL') return [true, false, true, false, false, true];
    if (datatype === 'BYTES') return ['', 'a', 'ünï', 'x y', '7', 'zz'];
    if (datatype.startsWith('FP')) return [0.5, -1.25, 3, 0, 2.5, -0.75];
    if (datatype.startsWith('UINT')) return [0, 1, 2, 3, 200, 7];
    return [0, -1, 2, -3, 100, 7];
  };
  const inputs = md.inputs.filter((/** @type {{ datatype: string }} */ i) => i.datatype !== 'FP16').map((/** @type {{ name: string, datatype: string }} */ i) => ({ name: i.name, datatype: i.datatype, shape: [2, 3], data: values(i.datatype) }));
  // FP16 has no JSON form: it goes binary.
  const fp16 = md.inputs.find((/** @type {{ datatype: string }} */ i) => i.datatype === 'FP16');
  const half = Buffer.from(Uint16Array.from([0x3c00, 0x4000, 0, 0xbc00, 0x3800, 0x4200]).buffer);
  const header = Buffer.from(JSON.stringify({ inputs: [...inputs, { name: fp16.name, datatype: 'FP16', shape: [2, 3], parameters: { binary_data_size: half.length } }] }));
  const res = await fetch(`${base}/v2/models/dtypes/infer`, { method: 'POST', body: Buffer.concat([header, half]), headers: { 'inference-header-content-length': String(header.length) } });
  t.is(res.status, 200);
  const body = Buffer.from(await res.arrayBuffer());
  const jsonBytes = Number(res.headers.get('inference-header-content-length'));
  const out = JSON.parse(body.subarray(0, jsonBytes).toString());
  for (const input of inputs) {
    const o = out.outputs.find((/** @type {{ name: string }} */ x) => x.name === input.name.replace('in_', 'out_'));
    t.deepEqual(o.data, input.data, input.name);
  }
  const f16 = out.outputs.find((/** @type {{ datatype: string }} */ o) => o.datatype === 'FP16');
  t.is(f16.parameters.binary_data_size, 12, 'FP16 comes back binary');
  t.deepEqual([...body.subarray(jsonBytes)], [...half]);
});

test('bad requests are 400-class and say what was wrong; the server keeps serving', async (t) => {
  const bad = async (/** @type {string} */ route, /** @type {BodyInit} */ body, /** @type {number} */ status, /** @type {RegExp} */ message, /** @type {Record<string, string>} */ headers = {}) => {
    const res = await call(route, { method: 'POST', body, headers });
    t.is(res.status, status, String(message));
    t.regex(res.body.error, message);
  };
  await bad('/v2/models/digits/infer', '{"inputs": [', 400, /JSON is not valid/);
  await bad('/v2/models/digits/infer', JSON.stringify({ inputs: [{ name: 'image', datatype: 'FP32', shape: [1, 8, 8], data: [1, 2, 3] }] }), 400, /shape \[1, 8, 8\] needs 64 elements, its data holds 3/);
  await bad('/v2/models/digits/infer', JSON.stringify({ inputs: [{ name: 'image', datatype: 'FP32', shape: [1, 8, 8], data: Array(64).fill('a') }] }), 400, /element 0 is "a", not a number/);
  await bad('/v2/models/digits/infer', JSON.stringify({ inputs: [{ name: 'image', datatype: 'FP99', shape: [1], data: [1] }] }), 400, /datatype "FP99" is not a KServe datatype/);
  await bad('/v2/models/digits/infer', JSON.stringify({ inputs: [{ name: 'image', datatype: 'FP32', shape: [1, 8, 8], parameters: { binary_data_size: 256 } }] }), 400, /binary_data_size 256 runs past the body/);
  await bad('/v2/models/digits/infer', JSON.stringify({ inputs: [{ name: 'image', datatype: 'FP32', shape: [1, 8, 8], data: Array(64).fill(1) }] }), 400, /Inference-Header-Content-Length/, { 'inference-header-content-length': 'many' });
  await bad('/v2/models/digits/infer', JSON.stringify({ inputs: [{ name: 'pixels', datatype: 'FP32', shape: [1, 8, 8], data: Array(64).fill(1) }] }), 400, /pixels/);
  await bad('/v2/models/nope/infer', JSON.stringify({ inputs: [] }), 404, /nope/);
  const wrongMethod = await call('/v2/models/digits/infer');
  t.is(wrongMethod.status, 405);
  t.is((await call('/v3/anything')).status, 404);
  t.is((await call('/v2/health/ready')).status, 200, 'still serving');
});

test.serial('the repository extension loads and unloads; statistics count REST requests; shared-memory status and logging answer', async (t) => {
  const index = await post('/v2/repository/index', {});
  t.deepEqual(index.body.map((/** @type {{ name: string, state: string }} */ m) => [m.name, m.state]).sort(), [['convnet', 'UNAVAILABLE'], ['digits', 'READY'], ['dtypes', 'READY']].sort());
  t.is((await post('/v2/repository/models/convnet/load', {})).status, 200);
  t.deepEqual((await call('/v2/models/convnet/ready')).body, { ready: true });
  t.is((await post('/v2/repository/models/convnet/unload', {})).status, 200);
  t.is((await call('/v2/models/convnet/ready')).status, 400);
  const before = (await call('/v2/models/digits/stats')).body.model_stats[0].inference_stats.success.count;
  await post('/v2/models/digits/infer', { inputs: [{ name: 'image', datatype: 'FP32', shape: [2, 8, 8], data: Array(128).fill(1) }] });
  const after = (await call('/v2/models/digits/stats')).body.model_stats[0];
  t.is(after.inference_stats.success.count, before + 1, 'counted, as a number');
  t.is((await call('/v2/models/stats')).body.model_stats.length, 3);
  t.deepEqual((await call('/v2/systemsharedmemory/status')).body, []);
  const unknownRegion = await post('/v2/systemsharedmemory/region/r/register', { key: '/stowage-no-such-object', offset: 0, byte_size: 64 });
  // As through gRPC (STOWAGE_SHM_KEY_NOT_FOUND): 404, naming the key (Triton: 500).
  t.is(unknownRegion.status, 404);
  t.regex(unknownRegion.body.error, /stowage-no-such-object/);
  const logging = (await call('/v2/logging')).body;
  t.is(typeof logging.log_info, 'boolean');
  t.is((await post('/v2/logging', { log_verbose_level: 1 })).body.log_verbose_level, 1);
  t.is((await post('/v2/logging', { log_verbose_level: 0 })).body.log_verbose_level, 0);
});

test('a body past max_receive_message_bytes is refused 413 before it is read', async (t) => {
  const small = tempDir();
  t.teardown(small.cleanup);
  const repo = makeRepository(small.dir, { digits: path.join(ROOT, 'bundles', 'digits') });
  const s = await startServer({ model_repo: repo, global: { endpoints: { max_receive_message_bytes: 4096 } } }, { root: small.dir });
  t.teardown(() => s.stop());
  const res = await fetch(`${s.rest}/v2/models/digits/infer`, { method: 'POST', body: JSON.stringify({ inputs: [{ name: 'image', datatype: 'FP32', shape: [64, 8, 8], data: Array(4096).fill(1) }] }) });
  t.is(res.status, 413);
  t.regex((await res.json()).error, /past endpoints\.max_receive_message_bytes = 4096/);
});
