// RepositoryModelLoad / RepositoryModelUnload through the real server in explicit mode (nothing
// loads until asked): load bundles, one added after start-up, refuse a broken one with its reason,
// unload after in-flight requests finish, reload.
import { cpSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import test from 'ava';
import { status } from '@grpc/grpc-js';
import { FIXTURES, makeRepository, ROOT, scrapeMetrics, startServer, tempDir, tensor } from '../helpers/server.js';
import { grpcError } from '../helpers/errors.js';

const MODELS = path.join(FIXTURES, 'models');
/** @type {import('../helpers/server.js').Server} */
let server;
/** @type {import('../helpers/server.js').TempDir} */
let temp;
/** @type {string} */
let repo;

test.before(async () => {
  temp = tempDir();
  repo = makeRepository(temp.dir, { digits: path.join(ROOT, 'bundles', 'digits'), convnet: path.join(MODELS, 'convnet'), gated: path.join(MODELS, 'negate') },
    { 'gated/model.js': readFileSync(path.join(FIXTURES, 'hooks', 'gated.js')) });
  server = await startServer({ model_repo: repo, global: { model_control_mode: 'explicit' } }, { root: temp.dir });
  for (const name of ['digits', 'convnet', 'gated']) await server.client.call('RepositoryModelLoad', { model_name: name });
});

test.after.always(async () => {
  await server?.stop();
  temp?.cleanup();
});

const index = async () => Object.fromEntries((await server.client.call('RepositoryIndex', {})).models.map((m) => [m.name, m]));

test.serial('explicit mode lists the repository without loading it; a bundle added later loads on request', async (t) => {
  cpSync(path.join(MODELS, 'negate'), path.join(repo, 'negate'), { recursive: true });
  t.falsy((await index()).negate, 'not known until asked: explicit mode does not watch the repository');
  t.true(server.logs.some((l) => l.msg === 'loading the model repository' && l.model_control_mode === 'explicit'));
  await server.client.call('RepositoryModelLoad', { model_name: 'negate' });
  t.is((await index()).negate.state, 'READY');
  const { outputs } = await server.client.infer('negate', [tensor('x', 'FP32', [3], Float32Array.from([1, 2, 3]))]);
  t.deepEqual([...outputs[0].data], [-1, -2, -3]);
});

test.serial('loading an unknown bundle is NOT_FOUND; a broken one is refused with its reason', async (t) => {
  const err = await grpcError(t, server.client.call('RepositoryModelLoad', { model_name: 'ghost' }));
  t.is(err.code, status.NOT_FOUND);
  t.regex(err.details, /unknown model "ghost"/);
  cpSync(path.join(MODELS, 'negate'), path.join(repo, 'broken'), { recursive: true });
  writeFileSync(path.join(repo, 'broken', 'manifest.yaml'), 'format_version: "2.0"\nexecutable_inputs: []\nexecutable_outputs: []\n');
  const broken = await grpcError(t, server.client.call('RepositoryModelLoad', { model_name: 'broken' }));
  t.is(broken.code, status.FAILED_PRECONDITION);
  t.regex(broken.details, /bundle "broken", manifest\.yaml: executable_inputs: \[\] must NOT have fewer than 1 items/);
  t.is((await index()).broken.state, 'UNAVAILABLE');
  const params = await grpcError(t, server.client.call('RepositoryModelLoad', { model_name: 'digits', parameters: { config: { string_param: '{}' } } }));
  t.is(params.code, status.INVALID_ARGUMENT);
});

test.serial('unload lets in-flight requests finish, then refuses new ones; load brings the model back', async (t) => {
  // Six requests held in flight by the gated model's preprocess hook, so that the unload arrives
  // while they are in flight, whatever the machine's load: each must complete once the gate opens.
  const gate = path.join(temp.dir, 'gate-open');
  const x = tensor('x', 'FP32', [3], Float32Array.from([1, 2, 3]));
  const inflight = Array.from({ length: 6 }, () => server.client.infer('gated', [x], { parameters: { gate: { string_param: gate } } }));
  const pending = async () => (await scrapeMetrics(server.adminPort))['nv_inference_pending_request_count{model="gated",version="1"}'];
  while (await pending() !== 6) await new Promise((resolve) => setImmediate(resolve));
  const unload = server.client.call('RepositoryModelUnload', { model_name: 'gated' });
  const unloading = await server.waitForLog((l) => l.msg?.startsWith('model unloading') && l.model === 'gated' || false);
  t.is(unloading.inflight, 6);
  t.is((await index()).gated.state, 'UNLOADING');
  const refused = await grpcError(t, server.client.infer('gated', [x]));
  t.is(refused.code, status.UNAVAILABLE, 'no new request while unloading');
  writeFileSync(gate, '');
  const results = await Promise.allSettled(inflight);
  t.deepEqual(results.map((r) => r.status), Array(6).fill('fulfilled'));
  await unload;
  const m = (await index()).gated;
  t.is(m.state, 'UNAVAILABLE');
  t.is(m.reason, 'unloaded');
  const err = await grpcError(t, server.client.infer('gated', [x], { parameters: { gate: { string_param: gate } } }));
  t.is(err.code, status.UNAVAILABLE);
  t.regex(err.details, /model "gated" is not ready \(state UNAVAILABLE\): unloaded/);
  t.false(await server.client.modelReady('gated'));

  await server.client.call('RepositoryModelLoad', { model_name: 'gated' });
  t.true(await server.client.modelReady('gated'));
  const { outputs } = await server.client.infer('gated', [x], { parameters: { gate: { string_param: gate } } });
  t.deepEqual([...outputs[0].data], [-1, -2, -3]);
});

test.serial('loading a loaded model reloads it from disk without a gap in service', async (t) => {
  const during = Array.from({ length: 4 }, () => server.client.infer('digits', [tensor('image', 'FP32', [1, 8, 8], new Float32Array(64))]));
  await server.client.call('RepositoryModelLoad', { model_name: 'digits' });
  t.deepEqual((await Promise.allSettled(during)).map((r) => r.status), Array(4).fill('fulfilled'));
  await server.waitForLog((l) => l.msg === 'model reloaded' && l.model === 'digits');
});

test.serial('unloading an unknown model is NOT_FOUND', async (t) => {
  const err = await grpcError(t, server.client.call('RepositoryModelUnload', { model_name: 'ghost' }));
  t.is(err.code, status.NOT_FOUND);
});
