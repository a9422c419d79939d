// Bundles that try to stall or kill the server: model files that never end, point out of the
// bundle or are not ONNX, manifests that are pipes or lie, and model.js files that throw, exit,
// loop or allocate without bound at import or per call. Each refuses (or fails a request of) its
// own bundle, with the reason; the server starts, binds gRPC and serves every good model.
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import test from 'ava';
import { status } from '@grpc/grpc-js';
import { FIXTURES, ROOT, dataAs, makeRepository, startServer, tempDir, tensor } from '../helpers/server.js';
import { grpcError } from '../helpers/errors.js';

const heldout = JSON.parse(readFileSync(path.join(FIXTURES, 'digits_heldout.json'), 'utf8'));
const echoDir = path.join(FIXTURES, 'models', 'echo');
const echoManifest = readFileSync(path.join(echoDir, 'manifest.yaml'), 'utf8');
const x = tensor('x', 'FP32', [1, 1024], new Float32Array(1024).fill(2));
const digit = tensor('image', 'FP32', [1, 8, 8], Float32Array.from(heldout.images[0]));

/** @type {Record<string, string>} model.js sources, by bundle name */
const hooks = {
  import_throws: 'throw new Error("the calibration table is missing");\nexport function preprocess(i) { return i; }',
  import_exits: 'process.exit(3);\nexport function preprocess(i) { return i; }',
  import_loops: 'while (true) {}\nexport function preprocess(i) { return i; }',
  import_never_settles: 'await new Promise(() => {});\nexport function preprocess(i) { return i; }',
  import_allocates: 'const hoard = []; while (true) hoard.push(new Array(1e6).fill(1.5));\nexport function preprocess(i) { return i; }',
  call_exits: 'export function preprocess(i, ctx) { if (ctx.parameters.exit) process.exit(4); return i; }',
  call_allocates: 'export function preprocess(i, ctx) { if (ctx.parameters.grow) { const h = []; while (true) h.push(new Array(1e6).fill(1.5)); } return i; }',
};

/**
 * Each bad bundle and the reason it must be refused with. Model files are made in before().
 * @type {Record<string, RegExp>}
 */
const refused = {
  onnx_dev_zero: /model\.onnx: is a symbolic link to \/dev\/zero, outside the bundle/,
  onnx_fifo: /model\.onnx: is a named pipe; a bundle's files must be regular files/,
  onnx_outside: /model\.onnx: is a symbolic link to .*digits\/model\.onnx, outside the bundle/,
  onnx_directory: /model\.onnx: is a directory/,
  onnx_dangling: /model\.onnx: cannot be opened: ENOENT/,
  onnx_corrupt: /model\.onnx: ONNX Runtime cannot load it/,
  manifest_fifo: /manifest\.yaml: is a named pipe/,
  manifest_dev_zero: /manifest\.yaml: is a symbolic link to \/dev\/zero/,
  manifest_lies: /model\.onnx: .*"z"/,
  hook_dev_zero: /model\.js: is a symbolic link to \/dev\/zero/,
  import_throws: /model\.js: cannot be imported: the calibration table is missing/,
  import_exits: /model\.js: cannot be imported: .*exit/i,
  import_loops: /model\.js: importing it took longer than hooks\.import_timeout_seconds \(2\); its thread was replaced/,
  import_never_settles: /model\.js: importing it took longer than hooks\.import_timeout_seconds \(2\)/,
  import_allocates: /model\.js: cannot be imported: .*memory/i,
};

/** @type {import('../helpers/server.js').Server} */
let server;
/** @type {import('../helpers/server.js').TempDir} */
let temp;
/** @type {string} */
let repo;

test.before(async () => {
  temp = tempDir();
  /** @type {Record<string, string | Buffer>} */
  const files = {};
  for (const [name, source] of Object.entries(hooks)) {
    files[`${name}/manifest.yaml`] = echoManifest;
    files[`${name}/model.js`] = source;
  }
  for (const name of ['onnx_dev_zero', 'onnx_fifo', 'onnx_outside', 'onnx_directory', 'onnx_dangling', 'onnx_corrupt', 'hook_dev_zero']) files[`${name}/manifest.yaml`] = echoManifest;
  files['onnx_corrupt/model.onnx'] = Buffer.from('this is not a protobuf, let alone an ONNX graph');
  files['manifest_lies/manifest.yaml'] = echoManifest.replaceAll('name: y', 'name: z');
  repo = makeRepository(temp.dir, { digits: path.join(ROOT, 'bundles', 'digits') }, files);
  for (const name of [...Object.keys(hooks), 'manifest_lies', 'hook_dev_zero']) copyFileSync(path.join(echoDir, 'model.onnx'), path.join(repo, name, 'model.onnx'));
  symlinkSync('/dev/zero', path.join(repo, 'onnx_dev_zero', 'model.onnx'));
  execFileSync('mkfifo', [path.join(repo, 'onnx_fifo', 'model.onnx')]);
  symlinkSync('../digits/model.onnx', path.join(repo, 'onnx_outside', 'model.onnx'));
  mkdirSync(path.join(repo, 'onnx_directory', 'model.onnx'));
  symlinkSync('gone.onnx', path.join(repo, 'onnx_dangling', 'model.onnx'));
  symlinkSync('/dev/zero', path.join(repo, 'hook_dev_zero', 'model.js'));
  mkdirSync(path.join(repo, 'manifest_fifo'));
  execFileSync('mkfifo', [path.join(repo, 'manifest_fifo', 'manifest.yaml')]);
  mkdirSync(path.join(repo, 'manifest_dev_zero'));
  symlinkSync('/dev/zero', path.join(repo, 'manifest_dev_zero', 'manifest.yaml'));
  server = await startServer({
    model_repo: repo,
    global: { model_poll_seconds: 0.5, hooks: { threads: 2, timeout_seconds: 5, import_timeout_seconds: 2, max_heap_mib: 96 } },
  }, { root: temp.dir });
});

test.after.always(async () => {
  await server?.stop();
  temp?.cleanup();
});

test('the server starts and serves its good models beside every bad bundle, each refused with its reason', async (t) => {
  const { models } = await server.client.call('RepositoryIndex', {});
  const by = Object.fromEntries(models.map((m) => [m.name, m]));
  for (const [name, reason] of Object.entries(refused)) {
    t.is(by[name]?.state, 'UNAVAILABLE', name);
    t.regex(by[name]?.reason ?? '', reason, name);
  }
  for (const m of models) t.log(m.name, m.state, m.reason);
  for (const name of ['digits', 'call_exits', 'call_allocates']) t.is(by[name]?.state, 'READY', name);
  const { outputs } = await server.client.infer('digits', [digit], { outputs: ['label'] });
  t.is(Number(dataAs(outputs[0], BigInt64Array)[0]), heldout.labels[0]);
});

test('a hook that exits its thread or allocates without bound fails its own request; the model and the server go on', async (t) => {
  const exits = await grpcError(t, server.client.infer('call_exits', [x], { parameters: { exit: { bool_param: true } } }));
  t.is(exits?.code, status.INTERNAL);
  t.regex(exits?.details ?? '', /model "call_exits": the preprocess hook in model\.js failed: .*exit/i);
  const grows = await grpcError(t, server.client.infer('call_allocates', [x], { parameters: { grow: { bool_param: true } } }));
  t.is(grows?.code, status.INTERNAL);
  t.regex(grows?.details ?? '', /model "call_allocates": the preprocess hook in model\.js failed: .*memory/i);
  for (const name of ['call_exits', 'call_allocates']) {
    const { outputs } = await server.client.infer(name, [x]);
    t.is(dataAs(outputs[0], Float32Array)[0], 2, `${name} answers its next request`);
  }
  const { outputs } = await server.client.infer('digits', [digit], { outputs: ['label'] });
  t.is(Number(dataAs(outputs[0], BigInt64Array)[0]), heldout.labels[0]);
});

test('in dynamic mode a bundle that hangs at import is refused and a bundle dropped after it still loads', async (t) => {
  const hung = path.join(repo, 'late_loops');
  mkdirSync(hung);
  copyFileSync(path.join(echoDir, 'model.onnx'), path.join(hung, 'model.onnx'));
  writeFileSync(path.join(hung, 'model.js'), hooks.import_loops);
  writeFileSync(path.join(hung, 'manifest.yaml'), echoManifest);
  const pipe = path.join(repo, 'late_fifo');
  mkdirSync(pipe);
  execFileSync('mkfifo', [path.join(pipe, 'model.onnx')]);
  writeFileSync(path.join(pipe, 'manifest.yaml'), echoManifest);
  const good = path.join(repo, 'late_good');
  mkdirSync(good);
  copyFileSync(path.join(echoDir, 'model.onnx'), path.join(good, 'model.onnx'));
  writeFileSync(path.join(good, 'manifest.yaml'), echoManifest);
  // The watcher's verdicts come as log lines; meanwhile every loaded model keeps answering.
  let settled = false;
  const verdicts = Promise.all([
    server.waitForLog((l) => l.msg === 'model loaded' && l.model === 'late_good'),
    server.waitForLog((l) => l.model === 'late_loops' && /^bundle refused/.test(l.msg ?? '')),
    server.waitForLog((l) => l.model === 'late_fifo' && /^bundle refused/.test(l.msg ?? '')),
  ]).finally(() => { settled = true; });
  let answered = 0;
  while (!settled) {
    const { outputs } = await server.client.infer('digits', [digit], { outputs: ['label'] });
    t.is(Number(dataAs(outputs[0], BigInt64Array)[0]), heldout.labels[0]);
    answered++;
  }
  await verdicts;
  t.true(answered > 0, 'digits answered while the late bundles were looked at');
  const { models } = await server.client.call('RepositoryIndex', {});
  const by = Object.fromEntries(models.map((m) => [m.name, m]));
  t.is(by.late_good?.state, 'READY');
  t.regex(by.late_loops?.reason ?? '', /took longer than hooks\.import_timeout_seconds/);
  t.regex(by.late_fifo?.reason ?? '', /model\.onnx: is a named pipe/);
  const { outputs } = await server.client.infer('late_good', [x]);
  t.is(dataAs(outputs[0], Float32Array)[0], 2);
});
