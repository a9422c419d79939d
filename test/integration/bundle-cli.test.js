// `node main.js bundle create|check`, run as a user runs them: real ONNX files, real bundles on
// disk, the server's own load in the command, and the bundles it writes served by the real server.
import { execFile } from 'node:child_process';
import { cpSync, existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import test from 'ava';
import { dataAs, FIXTURES, MAIN, ROOT, startServer, tempDir } from '../helpers/server.js';
import { present } from '../helpers/checks.js';

const GRAPHS = path.join(FIXTURES, 'graphs');
const DIGITS = path.join(ROOT, 'bundles', 'digits');

/**
 * Run `node main.js bundle ...`; resolves to { code, stdout, stderr } whatever the exit status.
 * @param {string[]} args
 * @returns {Promise<{ code: number, stdout: string, stderr: string }>}
 */
async function bundle(...args) {
  try {
    const { stdout, stderr } = await promisify(execFile)(process.execPath, [MAIN, 'bundle', ...args], { timeout: 90_000 });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const failed = /** @type {{ code: number, stdout: string, stderr: string }} */ (err);
    return { code: failed.code, stdout: failed.stdout, stderr: failed.stderr };
  }
}

/** A temporary directory removed after the test. @param {import('ava').ExecutionContext} t */
function temp(t) {
  const dir = tempDir();
  t.teardown(dir.cleanup);
  return dir.dir;
}

test('bundle create makes a bundle of a plain ONNX file with named dims that the server serves with no hand edits', async (t) => {
  const repo = path.join(temp(t), 'repo');
  const made = await bundle('create', path.join(GRAPHS, 'named.onnx'), '--out', path.join(repo, 'pooled'));
  t.is(made.code, 0, made.stdout + made.stderr);
  const manifest = readFileSync(path.join(repo, 'pooled', 'manifest.yaml'), 'utf8');
  // The batch axis from the dim named "batch" (and DATA_BATCH), c from DATA_CHANNEL, h, w and k from letter denotations.
  t.regex(manifest, /name: "image", dtype: f32, shape: "nchw", dims: \{ c: 3, h: 5, w: 5 \}/);
  t.regex(manifest, /name: "scores", dtype: f32, shape: "nk", dims: \{ k: 4 \}/);
  t.regex(manifest, /name: "label", dtype: i64, shape: "n" \}/);
  t.regex(manifest, /compiled_batch_sizes: \[1, 8, 32\]/);
  t.regex(made.stdout, /pooled: loaded; one request of zeros answered/);
  t.deepEqual(readdirSync(repo), ['pooled'], 'no staging directory is left behind');

  const server = await startServer({ model_repo: repo });
  t.teardown(server.stop);
  // scores = mean over h, w of each channel, times W[c][k] = (4c + k) / 10; label = argmax.
  const image = new Float32Array(2 * 3 * 25);
  for (let i = 0; i < image.length; i++) image[i] = (i % 7) - (i % 3);
  const { outputs } = await server.client.infer('pooled', [{ name: 'image', datatype: 'FP32', shape: [2, 3, 5, 5], data: image }]);
  const scores = present(outputs.find((o) => o.name === 'scores'), 'a scores output');
  t.deepEqual(scores.shape, [2, 4]);
  const got = dataAs(scores, Float32Array);
  for (let n = 0; n < 2; n++) {
    const means = [0, 1, 2].map((c) => image.subarray((n * 3 + c) * 25, (n * 3 + c + 1) * 25).reduce((a, b) => a + b, 0) / 25);
    for (let k = 0; k < 4; k++) {
      const want = means.reduce((s, m, c) => s + m * (4 * c + k) / 10, 0);
      t.true(Math.abs(got[n * 4 + k] - want) < 1e-4, `scores[${n}][${k}] = ${got[n * 4 + k]}, expected ${want}`);
    }
  }
  t.deepEqual(outputs.find((o) => o.name === 'label')?.shape, [2]);
});

test('a server watching the repository picks up what bundle create writes, and never sees it half-written', async (t) => {
  const repo = path.join(temp(t), 'repo');
  cpSync(DIGITS, path.join(repo, 'digits'), { recursive: true });
  const server = await startServer({ model_repo: repo, global: { model_control_mode: 'dynamic', model_poll_seconds: 0.2 } });
  t.teardown(server.stop);
  const made = await bundle('create', path.join(GRAPHS, 'named.onnx'), '--out', path.join(repo, 'pooled'));
  t.is(made.code, 0, made.stdout + made.stderr);
  await server.waitForLog((e) => e.msg === 'model loaded' && e.model === 'pooled');
  const { outputs } = await server.client.infer('pooled', [{ name: 'image', datatype: 'FP32', shape: [1, 3, 5, 5], data: new Float32Array(75).fill(1) }]);
  // All-ones image: every channel's mean is 1, so scores[k] = sum over c of (4c + k) / 10.
  t.deepEqual([...dataAs(present(outputs.find((o) => o.name === 'scores')), Float32Array)].map((v) => Math.round(v * 10) / 10), [1.2, 1.5, 1.8, 2.1]);
  t.deepEqual(server.logs.filter((e) => /refused/.test(e.msg ?? '')), [], 'the staging directory was never taken for a bundle');
});

test('bundle create takes axis letters from --axes and names each tensor still missing one, with the flag to give', async (t) => {
  const repo = path.join(temp(t), 'repo');
  const source = path.join(FIXTURES, 'models', 'convnet', 'model.onnx');
  const missing = await bundle('create', source, '--out', path.join(repo, 'convnet'));
  t.is(missing.code, 1);
  t.regex(missing.stdout, /input "image" \[n, 3, 32, 32\]: the graph does not name axis 1, 2, 3; give the tensor's axis letters with --axes image=nchw/);
  t.regex(missing.stdout, /output "scores" \[n, 10\]: the graph does not name axis 1; .*--axes scores=nc/);
  t.false(existsSync(path.join(repo, 'convnet')));

  const made = await bundle('create', source, '--out', repo, '--name', 'convnet', '--axes', 'image=nchw', '--axes', 'scores=nk', '--batch-sizes', '1,4');
  t.is(made.code, 0, made.stdout + made.stderr);
  const manifest = readFileSync(path.join(repo, 'convnet', 'manifest.yaml'), 'utf8');
  t.regex(manifest, /shape: "nk", dims: \{ k: 10 \}/);
  t.regex(manifest, /compiled_batch_sizes: \[1, 4\]/);
  t.regex(made.stdout, /scores {2}FP32 {2}\[1, 10\]/);

  // An existing bundle is never replaced without --force, and the refusal writes nothing.
  const again = await bundle('create', source, '--out', path.join(repo, 'convnet'), '--axes', 'image=nchw', '--axes', 'scores=nk');
  t.is(again.code, 1);
  t.regex(again.stdout, /already exists and is not empty; choose another --out, or pass --force/);
  t.regex(readFileSync(path.join(repo, 'convnet', 'manifest.yaml'), 'utf8'), /\[1, 4\]/);
  const forced = await bundle('create', source, '--out', path.join(repo, 'convnet'), '--axes', 'image=nchw', '--axes', 'scores=nk', '--force');
  t.is(forced.code, 0, forced.stdout);
  t.regex(readFileSync(path.join(repo, 'convnet', 'manifest.yaml'), 'utf8'), /\[1, 8, 32\]/);
  t.deepEqual(readdirSync(repo), ['convnet']);
});

test('bundle create refuses graphs the server could not serve, naming the tensor or node and the fix', async (t) => {
  const repo = path.join(temp(t), 'repo');
  /** @type {[string, string[], RegExp[]][]} */
  const cases = [
    ['unsupported', [], [/mystery_node/, /No Op registered for MysteryOp/, /replace that node/]],
    ['bf16', [], [/output "y" is BF16: KServe carries it, but ONNX Runtime's Node binding cannot hold it; cast it to FP32 or FP16/]],
    ['float8', [], [/output "y" is FLOAT8E4M3FN, which the KServe protocol cannot carry; cast it/]],
    ['clash', [], [/input and output are both named "x"/]],
    ['unbatched', [], [/the graph has no batch axis/, /dynamic_axes/, /--unbatched/]],
    ['ragged', [], [/"y" has no batch axis 'n' while the other tensors do/]],
    ['named', ['--axes', 'image=nchw', '--axes', 'ghost=n'], [/--axes ghost=\.\.\.: the graph has no tensor "ghost"/]],
    ['named', ['--batch-sizes', '1,x'], [/--batch-sizes 1,x: write positive integers/]],
  ];
  for (const [graph, flags, patterns] of cases) {
    const out = path.join(repo, `${graph}_model`);
    const result = await bundle('create', path.join(GRAPHS, `${graph}.onnx`), '--out', out, ...flags);
    t.not(result.code, 0, `${graph} ${flags.join(' ')}`);
    for (const p of patterns) t.regex(result.stdout + result.stderr, p, graph);
    t.false(existsSync(out), `${graph}: nothing written`);
  }
  t.deepEqual(existsSync(repo) ? readdirSync(repo) : [], [], 'no staging directory is left behind');

  // --unbatched serves a fixed-shape graph as it is.
  const fixed = await bundle('create', path.join(GRAPHS, 'unbatched.onnx'), '--out', path.join(repo, 'fixed_shape'), '--unbatched', '--axes', 'x=hk', '--axes', 'y=hk');
  t.is(fixed.code, 0, fixed.stdout);
  t.notRegex(readFileSync(path.join(repo, 'fixed_shape', 'manifest.yaml'), 'utf8'), /batching/);
});

/**
 * A bundle named `name` in a new repository: the digits model with `files` (manifest.yaml, model.js, ...).
 * @param {string} root
 * @param {string} name
 * @param {Record<string, string>} files
 */
function seeded(root, name, files, { model = true } = {}) {
  const dir = path.join(root, name);
  cpSync(DIGITS, dir, { recursive: true });
  if (!model) cpSync(path.join(dir, 'model.onnx'), path.join(dir, 'model.b1.onnx'));
  for (const [file, text] of Object.entries(files)) writeFileSync(path.join(dir, file), text);
  return dir;
}

const OUTPUTS = `executable_outputs:
  - { name: logits, dtype: f32, shape: nk, dims: { k: 10 } }
  - { name: probabilities, dtype: f32, shape: nk, dims: { k: 10 } }
  - { name: label, dtype: i64, shape: n }
`;
const GOOD = `format_version: "2.0"\nexecutable_inputs:\n  - { name: image, dtype: f32, shape: nhw, dims: { h: 8, w: 8 } }\n${OUTPUTS}batching: { compiled_batch_sizes: [1, 8] }\n`;

test('bundle check reports every seeded mistake, all of a bundle\'s at once, each with its file and the fix', async (t) => {
  const root = temp(t);
  /** @type {[string, Record<string, string>, RegExp[]][]} */
  const cases = [
    // Three manifest mistakes in one bundle: all three reported in one run.
    ['three_at_once', { 'manifest.yaml': GOOD.replace('dims: { h: 8, w: 8 }', 'dims: { h: 8, n: 2, q: 1 }') },
      [/3 problems/, /manifest\.yaml: executable_inputs "image": dims sets the batch axis 'n'.*drop n from dims/,
        /manifest\.yaml: executable_inputs "image": dims names axis 'q', which is not in shape "nhw"/,
        /manifest\.yaml: executable_inputs "image": axis 'w' of shape "nhw" has no size in dims: add w: SIZE to dims/]],
    // The manifest contradicts the graph three ways: every mismatch, with the graph's value to write.
    ['contradicts_graph', { 'manifest.yaml': GOOD.replace('dtype: f32, shape: nhw, dims: { h: 8, w: 8 }', 'dtype: f64, shape: nhw, dims: { h: 9, w: 8 }').replace('name: label', 'name: labels') },
      [/the server refuses it/, /model\.onnx: does not match manifest\.yaml/, /input "image": manifest dtype f64, graph dtype f32: set dtype: f32/,
        /executable_outputs names "labels", but the graph's outputs are "logits", "probabilities", "label"/]],
    ['wrong_dim', { 'manifest.yaml': GOOD.replace('h: 8', 'h: 9') }, [/input "image": axis 'h' is 9 in the manifest, 8 in the graph: set h: 8 in its dims/]],
    ['no_sizes', { 'manifest.yaml': GOOD.replace('batching: { compiled_batch_sizes: [1, 8] }\n', '') }, [/batching\.compiled_batch_sizes is required/]],
    ['foreign_name', { 'manifest.yaml': `name: digits\n${GOOD}` }, [/name "digits" differs from the bundle's directory name "foreign_name"/]],
    ['unquoted_version', { 'manifest.yaml': GOOD.replace('"2.0"', '2.0') }, [/write format_version: "2\.0" with quotes/]],
    ['hooks_missing', { 'manifest.yaml': `${GOOD}client_inputs:\n  - { name: image, dtype: u8, shape: nhw, dims: { h: 8, w: 8 } }\n` },
      [/client_inputs needs a preprocess hook in model\.js, and the bundle has no model\.js/]],
    ['hook_throws', { 'manifest.yaml': GOOD, 'model.js': 'export function preprocess() { throw new Error("calibration table missing"); }\n' },
      [/it loads, but a request of zeros fails/, /calibration table missing/]],
    ['both_layouts', { 'manifest.yaml': GOOD }, [/model\.onnx: the bundle holds both model\.onnx and model\.b1\.onnx; keep either/]],
    ['not_onnx', { 'manifest.yaml': GOOD, 'model.onnx': 'this is not a protobuf' }, [/the server refuses it/, /model\.onnx/]],
  ];
  for (const [name, files, patterns] of cases) {
    const dir = seeded(root, name, files, { model: name !== 'both_layouts' });
    const result = await bundle('check', dir);
    t.is(result.code, 1, `${name}: ${result.stdout}${result.stderr}`);
    for (const p of patterns) t.regex(result.stdout, p, name);
  }
});

test('bundle check passes the example bundles, hooks and meta models with their sub-models included', async (t) => {
  for (const name of ['digits', 'digits_u8', 'digit_finder']) {
    const result = await bundle('check', path.join(ROOT, 'bundles', name));
    t.is(result.code, 0, `${name}: ${result.stdout}${result.stderr}`);
    t.regex(result.stdout, new RegExp(`^${name}: ok$`, 'm'));
  }
  const finder = await bundle('check', path.join(ROOT, 'bundles', 'digit_finder'));
  t.regex(finder.stdout, /digit_cells: loaded/, 'a meta model\'s sub-models load with it');
});

test('bundle check runs a bundle on its warm-up data where the manifest names some, and on zeros otherwise', async (t) => {
  const stepped = path.join(FIXTURES, 'models', 'stepped');
  const good = await bundle('check', stepped);
  t.is(good.code, 0, good.stdout + good.stderr);
  t.regex(good.stdout, /^stepped: loaded; one request of the bundle's warm-up data for x answered/m);
  // Without warmup.data the request is zeros, on which this model cannot run (Range's step is zero).
  const dir = path.join(temp(t), 'stepped');
  cpSync(stepped, dir, { recursive: true });
  writeFileSync(path.join(dir, 'manifest.yaml'), readFileSync(path.join(stepped, 'manifest.yaml'), 'utf8').replace(/^warmup:[\s\S]*$/m, ''));
  const bad = await bundle('check', dir);
  t.is(bad.code, 1, bad.stdout + bad.stderr);
  t.regex(bad.stdout, /stepped: it loads, but a request of zeros fails:/);
});

test('the bundle commands explain a wrong command line and exit 2', async (t) => {
  const root = temp(t);
  t.is((await bundle()).code, 2);
  const unknown = await bundle('frobnicate');
  t.is(unknown.code, 2);
  t.regex(unknown.stderr, /unknown bundle command "frobnicate"/);
  t.regex(unknown.stderr, /bundle create MODEL\.onnx --out DIR/);
  const noOut = await bundle('create', path.join(GRAPHS, 'named.onnx'));
  t.is(noOut.code, 2);
  t.regex(noOut.stderr, /needs --out DIR/);
  const badName = await bundle('create', path.join(GRAPHS, 'named.onnx'), '--out', root, '--name', '.hidden');
  t.is(badName.code, 2);
  t.regex(badName.stderr, /model name "\.hidden"/);
  const notBundle = await bundle('check', root);
  t.is(notBundle.code, 1);
  t.regex(notBundle.stdout, /no manifest\.yaml/);
});
