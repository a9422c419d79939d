// model.js hooks through the real server: the two example bundles, client tensors in metadata,
// and hooks that throw, reject, hang or return the wrong tensors failing only their own requests.
import { copyFileSync, existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import test from 'ava';
import { status } from '@grpc/grpc-js';
import { FIXTURES, makeRepository, ROOT, startServer, tempDir, tensor } from '../helpers/server.js';
import { grpcError } from '../helpers/errors.js';

const heldout = JSON.parse(readFileSync(path.join(FIXTURES, 'digits_heldout.json'), 'utf8'));
const grader = JSON.parse(readFileSync(path.join(FIXTURES, 'grader_heldout.json'), 'utf8'));
const echoManifest = readFileSync(path.join(FIXTURES, 'models', 'echo', 'manifest.yaml'), 'utf8');
/** @type {import('../helpers/server.js').Server} */
let server;
/** @type {import('../helpers/server.js').TempDir} */
let temp;

test.before(async () => {
  temp = tempDir();
  /** @type {Record<string, string>} */
  const hooked = {};
  for (const name of ['throws', 'rejects', 'hangs', 'sleeps', 'wrong', 'negates', 'exports-extra']) {
    hooked[`${name}/manifest.yaml`] = echoManifest;
    hooked[`${name}/model.js`] = readFileSync(path.join(FIXTURES, 'hooks', `${name}.js`), 'utf8');
  }
  hooked['needs_hook/manifest.yaml'] = `${echoManifest}client_outputs:\n  - { name: z, dtype: f32, shape: nk, dims: { k: 1024 } }\n`;
  const repo = makeRepository(temp.dir, {
    digits: path.join(ROOT, 'bundles', 'digits'),
    digits_u8: path.join(ROOT, 'bundles', 'digits_u8'),
    severity_grader: path.join(ROOT, 'bundles', 'severity_grader'),
  }, hooked);
  for (const name of ['throws', 'rejects', 'hangs', 'sleeps', 'wrong', 'negates', 'exports-extra', 'needs_hook']) {
    copyFileSync(path.join(FIXTURES, 'models', 'echo', 'model.onnx'), path.join(repo, name, 'model.onnx'));
  }
  server = await startServer({ model_repo: repo, global: { hooks: { threads: 2, timeout_seconds: 1 } } }, { root: temp.dir });
});

test.after.always(async () => {
  await server?.stop();
  temp?.cleanup();
});

const x = (/** @type {number} */ rows, fill = (/** @type {number} */ i) => i % 7) => tensor('x', 'FP32', [rows, 1024], Float32Array.from({ length: rows * 1024 }, (_, i) => fill(i)));

test('raw 8-bit images are scaled by preprocess and classified as the float model classifies them', async (t) => {
  const rows = heldout.images.slice(0, 32);
  const u8 = Uint8Array.from(rows.flat(), (v) => Math.round((v * 255) / 16));
  const { outputs } = await server.client.infer('digits_u8', [{ name: 'image', datatype: 'UINT8', shape: [32, 8, 8], data: u8 }], { outputs: ['label'] });
  const f32 = Float32Array.from(u8, (v) => v * (16 / 255));
  const reference = await server.client.infer('digits', [{ name: 'image', datatype: 'FP32', shape: [32, 8, 8], data: f32 }], { outputs: ['label'] });
  t.deepEqual([...outputs[0].data], [...reference.outputs[0].data]);
  const right = [...outputs[0].data].filter((l, i) => Number(l) === heldout.labels[i]).length;
  t.true(right >= 30, `${right}/32 right`);
});

test('the severity grader\'s postprocess counts the leading positive logits', async (t) => {
  const grades = [];
  for (let i = 0; i < heldout.images.length; i += 32) {
    const rows = heldout.images.slice(i, i + 32);
    const { outputs } = await server.client.infer('severity_grader', [{ name: 'image', datatype: 'FP32', shape: [rows.length, 8, 8], data: Float32Array.from(rows.flat()) }]);
    t.deepEqual(outputs[0].shape, [rows.length, 1]);
    t.is(outputs[0].datatype, 'INT64');
    grades.push(...[...outputs[0].data].map(Number));
  }
  t.deepEqual(grades, grader.grades, 'the grades the training script computed with the same rule');
  const exact = grades.filter((g, i) => g === heldout.labels[i]).length / grades.length;
  t.is(Math.round(exact * 10000) / 10000, grader.exact);
});

test('metadata and config show the client tensors, and requests are checked against them', async (t) => {
  const md = await server.client.call('ModelMetadata', { name: 'digits_u8' });
  t.deepEqual(md.inputs.map((i) => [i.name, i.datatype, i.shape.map(Number)]), [['image', 'UINT8', [-1, 8, 8]]]);
  const grades = await server.client.call('ModelMetadata', { name: 'severity_grader' });
  t.deepEqual(grades.outputs.map((o) => [o.name, o.datatype, o.shape.map(Number)]), [['grade', 'INT64', [-1, 1]]]);
  const { config } = await server.client.call('ModelConfig', { name: 'severity_grader' });
  t.deepEqual(config.output.map((o) => [o.name, o.data_type]), [['grade', 'TYPE_INT64']]);
  const err = await grpcError(t, server.client.infer('digits_u8', [{ name: 'image', datatype: 'FP32', shape: [1, 8, 8], data: new Float32Array(64) }]));
  t.is(err.code, status.INVALID_ARGUMENT);
  t.regex(err.details, /expected datatype UINT8, got FP32/);
  const out = await grpcError(t, server.client.infer('severity_grader', [{ name: 'image', datatype: 'FP32', shape: [1, 8, 8], data: new Float32Array(64) }], { outputs: ['logits'] }));
  t.regex(out.details, /unknown output "logits" for model "severity_grader"; expected one of: grade/);
});

test('hooks see the request\'s parameters; pre and post both run', async (t) => {
  const { outputs } = await server.client.infer('negates', [x(2)], { parameters: { offset: { int64_param: '10' } } });
  t.deepEqual([...outputs[0].data].slice(0, 8), [0, -1, -2, -3, -4, -5, -6, 0].map((v) => v + 10));
});

test('a hook that throws, rejects or returns the wrong tensors fails only its request, saying why', async (t) => {
  const throws = await grpcError(t, server.client.infer('throws', [x(1)], { parameters: { fail: { bool_param: true } } }));
  t.is(throws.code, status.INTERNAL);
  t.is(throws.details, 'model "throws": the preprocess hook in model.js failed: the scanner calibration is missing');
  const rejects = await grpcError(t, server.client.infer('rejects', [x(1)]));
  t.regex(rejects.details, /model "rejects": the postprocess hook in model\.js failed: it rejected without a reason/);
  const wrong = await grpcError(t, server.client.infer('wrong', [x(3)]));
  t.regex(wrong.details, /model "wrong": the preprocess hook in model\.js failed: tensor "x": expected shape \[3, 1024\] \(axes "nk"\), got \[3, 512\]/);
  // The same model's next request, other models, and the server keep serving.
  const again = await server.client.infer('throws', [x(1)]);
  t.is(again.outputs[0].data[1], 1);
  const { outputs } = await server.client.infer('negates', [x(1)]);
  t.is(outputs[0].data[1], 0); // -(1) + 1
  t.true(await server.client.serverLive());
});

test.serial('hooks.timeout_seconds is a hook\'s own running time: calls that wait for a busy thread are not cut off', async (t) => {
  // Six calls of 0.6 s on 2 threads with a 1 s limit: the last two wait 1.2 s for a thread. Timed from
  // when they were handed to the pool, they were refused as hooks that ran too long.
  const started = Date.now();
  const answers = await Promise.all(Array.from({ length: 6 }, () => server.client.infer('sleeps', [x(1)], { parameters: { sleep_ms: { int64_param: '600' } } })));
  t.true(answers.every((a) => a.outputs[0].data[2] === 2), 'every call answered');
  t.true(Date.now() - started >= 1_700, `they took turns on the 2 threads (${Date.now() - started} ms)`);
});

test.serial('a hook call still waiting for a thread when its request passes its deadline or is cancelled never runs', async (t) => {
  // Both threads held by 0.8 s calls (under the 1 s limit); two more calls wait for one: one whose
  // deadline (Triton's timeout parameter) is 0.15 s away, one whose client gives up after 0.15 s.
  // Each hook writes its mark as it begins: the waiting calls' marks must never appear, even once
  // the threads are free.
  const mark = (/** @type {string} */ name) => path.join(temp.dir, `${name}.began`);
  const sleeps = (/** @type {string} */ name, /** @type {Record<string, unknown>} */ more = {}, timeoutMs = 0) => server.client.infer('sleeps', [x(1)], {
    ...(timeoutMs ? { timeoutMs } : {}),
    parameters: { mark: { string_param: mark(name) }, ...more },
  });
  const busy = ['busy-1', 'busy-2'].map((name) => sleeps(name, { sleep_ms: { int64_param: '800' } }));
  const deadline = Date.now() + 20_000;
  while (!(existsSync(mark('busy-1')) && existsSync(mark('busy-2'))) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
  t.true(existsSync(mark('busy-1')) && existsSync(mark('busy-2')), 'both hook threads are busy');
  const [late, gone] = await Promise.all([
    grpcError(t, sleeps('late', { timeout: { int64_param: '150000' } })),
    grpcError(t, sleeps('gone', {}, 150)),
  ]);
  t.is(late.code, status.DEADLINE_EXCEEDED);
  t.regex(late.details, /passed its deadline/);
  t.is(gone.code, status.DEADLINE_EXCEEDED, 'the client gave up');
  await Promise.all(busy);
  // A call after them: whatever was queued before it has had its turn by its answer.
  await sleeps('after');
  t.true(existsSync(mark('after')));
  t.false(existsSync(mark('late')), 'the call past its deadline was dropped from the queue');
  t.false(existsSync(mark('gone')), 'the cancelled call was dropped from the queue');
});

test('a hook that hangs is cut off at hooks.timeout_seconds and its thread replaced; the next requests succeed', async (t) => {
  const err = await grpcError(t, server.client.infer('hangs', [x(1)], { parameters: { hang: { bool_param: true } } }));
  t.is(err.code, status.DEADLINE_EXCEEDED);
  t.regex(err.details, /preprocess hook ran longer than hooks\.timeout_seconds \(1\); its thread was replaced/);
  const same = await server.client.infer('hangs', [x(1)]);
  t.is(same.outputs[0].data[2], 2, 'the same model answers its next request');
  const results = await Promise.all(Array.from({ length: 4 }, () => server.client.infer('negates', [x(1)])));
  t.true(results.every((r) => r.outputs[0].data[0] === 1));
  const digits = await server.client.infer('digits', [{ name: 'image', datatype: 'FP32', shape: [1, 8, 8], data: Float32Array.from(heldout.images[0]) }], { outputs: ['label'] });
  t.is(Number(digits.outputs[0].data[0]), heldout.labels[0]);
});

test('bundles whose hooks do not fit are refused at load with the reason', async (t) => {
  const { models } = await server.client.call('RepositoryIndex', {});
  const by = Object.fromEntries(models.map((m) => [m.name, m]));
  t.is(by['exports-extra'].state, 'UNAVAILABLE');
  t.regex(by['exports-extra'].reason, /model\.js: exports "threshold", which is not a hook; a model\.js exports only preprocess and postprocess/);
  t.regex(by.needs_hook.reason, /client_outputs needs a postprocess hook in model\.js, and the bundle has no model\.js/);
  for (const name of ['digits_u8', 'severity_grader', 'negates', 'throws', 'hangs']) t.is(by[name].state, 'READY', name);
});
