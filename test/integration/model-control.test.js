// Model control through the real server: in dynamic mode bundles added, changed and removed on
// disk load, reload and unload while clients keep sending, with zero failed requests; a broken
// change keeps the old version serving; static mode refuses load and unload.
import { copyFileSync, cpSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import test from 'ava';
import { status } from '@grpc/grpc-js';
import { dataAs, FIXTURES, makeRepository, ROOT, startServer, tempDir } from '../helpers/server.js';
import { grpcError } from '../helpers/errors.js';

const MODELS = path.join(FIXTURES, 'models');
const x = Float32Array.from({ length: 1024 }, (_, i) => (i % 17) - 8);
/** @returns {[string, import('../../dist/client/client.js').Tensor[]]} */
const request = (/** @type {string} */ model) => [model, [{ name: 'x', datatype: 'FP32', shape: [1, 1024], data: x }]];

/**
 * Which version answered: 1 for identity (echo), 2 for doubling; 0 for anything else.
 * @param {import('../../dist/client/client.js').Tensor} tensor
 */
function version(tensor) {
  const out = dataAs(tensor, Float32Array);
  if (out.every((v, i) => v === x[i])) return 1;
  if (out.every((v, i) => v === 2 * x[i])) return 2;
  return 0;
}

/** @param {import('ava').ExecutionContext} t */
async function dynamicServer(t) {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const repo = makeRepository(temp.dir, { m: path.join(MODELS, 'echo'), digits: path.join(ROOT, 'bundles', 'digits') });
  const server = await startServer({ model_repo: repo, global: { model_control_mode: 'dynamic', model_poll_seconds: 1 } }, { root: temp.dir });
  t.teardown(() => server.stop());
  return { server, repo };
}

test('a model swapped on disk under continuous load switches versions with zero failed requests', async (t) => {
  const { server, repo } = await dynamicServer(t);
  let sent = 0;
  /** @type {string[]} */
  const failed = [];
  const seen = new Set();
  let stop = false;
  /** @type {() => void} */
  let sawNew = () => {};
  const switched = new Promise((resolve) => { sawNew = () => resolve(undefined); });
  const clients = Array.from({ length: 4 }, async () => {
    while (!stop) {
      sent++;
      try {
        const { outputs } = await server.client.infer(...request('m'));
        const v = version(outputs[0]);
        seen.add(v);
        if (v === 2) sawNew();
      } catch (err) {
        failed.push(/** @type {import('@grpc/grpc-js').ServiceError} */ (err).details);
      }
    }
  });
  await server.client.infer(...request('m'));
  // Deploy the new version the way a careful operator does: write beside, then rename over.
  copyFileSync(path.join(MODELS, 'double', 'model.onnx'), path.join(repo, 'm', 'model.onnx.new'));
  renameSync(path.join(repo, 'm', 'model.onnx.new'), path.join(repo, 'm', 'model.onnx'));
  await switched;
  // Keep the load on a little longer, on the new version only.
  const after = sent;
  while (sent < after + 50) await new Promise((resolve) => setImmediate(resolve));
  stop = true;
  await Promise.all(clients);
  t.log(`${sent} requests sent, ${failed.length} failed`);
  t.deepEqual(failed, []);
  t.false(seen.has(0), 'every answer came from one version or the other');
  t.true(seen.has(1) && seen.has(2));
  const { outputs } = await server.client.infer(...request('m'));
  t.is(version(outputs[0]), 2, 'later requests use the new version');
  t.truthy(server.logs.find((l) => l.msg === 'bundle changed on disk: reloading' && l.model === 'm'));
});

test('a bundle added on disk loads, and one removed answers NOT_FOUND', async (t) => {
  const { server, repo } = await dynamicServer(t);
  cpSync(path.join(MODELS, 'negate'), path.join(repo, 'negate'), { recursive: true });
  await server.waitForLog((l) => l.msg === 'model loaded' && l.model === 'negate');
  const { outputs } = await server.client.infer('negate', [{ name: 'x', datatype: 'FP32', shape: [3], data: Float32Array.from([1, 2, 3]) }]);
  t.deepEqual([...outputs[0].data], [-1, -2, -3]);

  rmSync(path.join(repo, 'digits'), { recursive: true });
  await server.waitForLog((l) => l.msg === 'model removed' && l.model === 'digits');
  const err = await grpcError(t, server.client.infer('digits', [{ name: 'image', datatype: 'FP32', shape: [1, 8, 8], data: new Float32Array(64) }]));
  t.is(err.code, status.NOT_FOUND);
  const names = (await server.client.call('RepositoryIndex', {})).models.map((m) => m.name);
  t.false(names.includes('digits'));
});

test('a broken change keeps the loaded version serving, with the reason in the index', async (t) => {
  const { server, repo } = await dynamicServer(t);
  writeFileSync(path.join(repo, 'm', 'manifest.yaml'), 'format_version: "2.0"\nexecutable_inputs: [ { name: x, dtype: f32, shape: nk, dims: { k: 7 } } ]\nexecutable_outputs: [ { name: y, dtype: f32, shape: nk, dims: { k: 1024 } } ]\nbatching: { compiled_batch_sizes: [1] }\n');
  await server.waitForLog((l) => String(l.msg).startsWith('reload refused') && l.model === 'm');
  const { outputs } = await server.client.infer(...request('m'));
  t.is(version(outputs[0]), 1, 'the old version still answers');
  const m = (await server.client.call('RepositoryIndex', {})).models.find((r) => r.name === 'm');
  t.is(m?.state, 'READY');
  t.regex(m?.reason ?? '', /reload failed, still serving the loaded version: .*axis 'k' is 7 in the manifest, 1024 in the graph/);
});

test('static mode keeps the start-up set: load and unload are refused', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const repo = makeRepository(temp.dir, { digits: path.join(ROOT, 'bundles', 'digits') });
  const server = await startServer({ model_repo: repo, global: { model_control_mode: 'static' } }, { root: temp.dir });
  t.teardown(() => server.stop());
  for (const rpc of ['RepositoryModelLoad', 'RepositoryModelUnload']) {
    const err = await grpcError(t, server.client.call(rpc, { model_name: 'digits' }));
    t.is(err.code, status.FAILED_PRECONDITION, rpc);
    t.regex(err.details, /model_control_mode is static/);
  }
  t.true(await server.client.modelReady('digits'));
});

test('models_include serves only the listed models', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const repo = makeRepository(temp.dir, { digits: path.join(ROOT, 'bundles', 'digits'), negate: path.join(MODELS, 'negate') });
  const server = await startServer({ model_repo: repo, models_include: ['negate'] }, { root: temp.dir, env: { INFERENCE_SERVER_MODEL_CONTROL_MODE: 'static' } });
  t.teardown(() => server.stop());
  t.deepEqual((await server.client.call('RepositoryIndex', {})).models.map((m) => m.name), ['negate']);
  t.true(server.logs.some((l) => l.msg === 'effective configuration' && l.config.global.model_control_mode === 'static'), 'the environment override took effect');
});
