import { writeFileSync } from 'node:fs';
import path from 'node:path';
import test from 'ava';
import { parseManifest } from '../../../dist/bundle/manifest.js';
import { scanRepository } from '../../../dist/bundle/scan.js';
import { makeRepository, ROOT, tempDir } from '../../helpers/server.js';
import { stowageThrows } from '../../helpers/errors.js';

/**
 * A bundle directory holding the given files (empty model files are enough for parsing).
 * @param {import('ava').ExecutionContext} t
 * @param {string} name
 * @param {Record<string, string>} files
 */
function bundle(t, name, files) {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const dir = path.join(makeRepository(temp.dir, {}, Object.fromEntries(Object.entries(files).map(([f, c]) => [`${name}/${f}`, c]))), name);
  return dir;
}

const TENSORS = `
executable_inputs:
  - { name: x, dtype: f32, shape: nhw, dims: { h: 2, w: 3 } }
executable_outputs:
  - { name: y, dtype: i64, shape: n }
`;

test('the example manifest parses into a ModelSpec with the batch axis at -1', (t) => {
  const dir = path.join(ROOT, 'bundles', 'digits');
  const spec = parseManifest(`format_version: "2.0"\n${TENSORS}batching:\n  compiled_batch_sizes: [8, 1]\n`, dir);
  t.is(spec.name, 'digits');
  t.deepEqual(spec.inputs, [{ name: 'x', datatype: 'FP32', axes: 'nhw', shape: [-1, 2, 3], batchDim: 0 }]);
  t.deepEqual(spec.outputs, [{ name: 'y', datatype: 'INT64', axes: 'n', shape: [-1], batchDim: 0 }]);
  t.deepEqual(spec.compiledBatchSizes, [1, 8]);
  t.is(spec.maxBatchSize, 8);
  t.is(spec.batchAxis, 'n');
  t.deepEqual(spec.executables, [{ batchSize: null, path: path.join(dir, 'model.onnx') }]);
});

test('one model.bN.onnx per compiled size; a missing or extra size is named', (t) => {
  const manifest = `format_version: "2.0"\n${TENSORS}batching:\n  compiled_batch_sizes: [1, 4]\n`;
  const ok = bundle(t, 'per_size', { 'manifest.yaml': manifest, 'model.b1.onnx': '', 'model.b4.onnx': '' });
  t.deepEqual(parseManifest(manifest, ok).executables.map((e) => e.batchSize), [1, 4]);
  const missing = bundle(t, 'missing', { 'manifest.yaml': manifest, 'model.b1.onnx': '' });
  t.regex(t.throws(() => parseManifest(manifest, missing)).message, /bundle "missing".*compiled_batch_sizes lists 4, but model\.b4\.onnx is missing/);
  const extra = bundle(t, 'extra', { 'manifest.yaml': manifest, 'model.b1.onnx': '', 'model.b4.onnx': '', 'model.b2.onnx': '' });
  t.regex(t.throws(() => parseManifest(manifest, extra)).message, /model\.b2\.onnx: batch size 2 is not in batching\.compiled_batch_sizes \[1, 4\]/);
  const both = bundle(t, 'both', { 'manifest.yaml': manifest, 'model.onnx': '', 'model.b1.onnx': '' });
  t.regex(t.throws(() => parseManifest(manifest, both)).message, /both model\.onnx and model\.b1\.onnx/);
});

const dir = path.join(ROOT, 'bundles', 'digits'); // holds a model.onnx
/**
 * @param {import('ava').ExecutionContext} t
 * @param {string} text
 * @param {RegExp} pattern
 */
const fails = (t, text, pattern) => {
  const err = stowageThrows(t, () => parseManifest(text, dir));
  t.is(err.code, 'STOWAGE_BUNDLE_INVALID');
  t.regex(err.message, /^bundle "digits", manifest\.yaml: /);
  t.regex(err.message, pattern);
};

test('format_version must be the string "2.0", with a hint when YAML read a number', (t) => {
  fails(t, `format_version: 2.0\n${TENSORS}batching: { compiled_batch_sizes: [1] }\n`, /format_version.*write format_version: "2\.0" with quotes/);
  fails(t, `format_version: "1.0"\n${TENSORS}`, /format_version: "1\.0" must be equal to constant/);
});

test('an axis without a size, a size for an unknown axis, and a sized batch axis are refused', (t) => {
  const with_ = (/** @type {string} */ input) => `format_version: "2.0"\nexecutable_inputs:\n  - ${input}\nexecutable_outputs:\n  - { name: y, dtype: f32, shape: n }\nbatching: { compiled_batch_sizes: [1] }\n`;
  fails(t, with_('{ name: x, dtype: f32, shape: nhw, dims: { h: 2 } }'), /executable_inputs "x": axis 'w' of shape "nhw" has no size in dims/);
  fails(t, with_('{ name: x, dtype: f32, shape: nh, dims: { h: 2, c: 3 } }'), /dims names axis 'c', which is not in shape "nh"/);
  fails(t, with_('{ name: x, dtype: f32, shape: nh, dims: { h: 2, n: 3 } }'), /dims sets the batch axis 'n'/);
  fails(t, with_('{ name: x, dtype: f32, shape: nhh, dims: { h: 2 } }'), /names axis 'h' twice/);
  fails(t, with_('{ name: x, dtype: float, shape: n }'), /dtype: "float" is not allowed; expected one of "bool", "u8"/);
});

test('either every tensor has the batch axis or none does', (t) => {
  fails(t, `format_version: "2.0"\nexecutable_inputs:\n  - { name: x, dtype: f32, shape: nk, dims: { k: 2 } }\nexecutable_outputs:\n  - { name: y, dtype: f32, shape: k, dims: { k: 2 } }\nbatching: { compiled_batch_sizes: [1] }\n`,
    /batch axis 'n' is missing from y/);
  fails(t, `format_version: "2.0"\n${TENSORS}`, /batching\.compiled_batch_sizes is required/);
  const unbatched = parseManifest(`format_version: "2.0"\nexecutable_inputs:\n  - { name: x, dtype: f32, shape: k, dims: { k: 2 } }\nexecutable_outputs:\n  - { name: y, dtype: f32, shape: k, dims: { k: 2 } }\n`, dir);
  t.is(unbatched.maxBatchSize, 0);
  t.is(unbatched.batchAxis, null);
  t.deepEqual(unbatched.inputs[0].shape, [2]);
});

test('the batch axis may be named and placed anywhere', (t) => {
  const spec = parseManifest(`format_version: "2.0"\nexecutable_inputs:\n  - { name: x, dtype: f32, shape: kb, dims: { k: 2 } }\nexecutable_outputs:\n  - { name: y, dtype: f32, shape: kb, dims: { k: 2 } }\nbatching: { compiled_batch_sizes: [4], batch_axis: b }\n`, dir);
  t.deepEqual(spec.inputs[0].shape, [2, -1]);
  t.is(spec.inputs[0].batchDim, 1);
});

test('client tensors default to the executable\'s, and are parsed like them when declared', (t) => {
  const plain = parseManifest(`format_version: "2.0"\n${TENSORS}batching: { compiled_batch_sizes: [1] }\n`, dir);
  t.is(plain.clientInputs, plain.inputs);
  t.is(plain.clientOutputs, plain.outputs);
  t.is(plain.hooks, null);
  const graded = parseManifest(`format_version: "2.0"\n${TENSORS}client_outputs:\n  - { name: grade, dtype: i64, shape: n }\nbatching: { compiled_batch_sizes: [1] }\n`, dir);
  t.deepEqual(graded.clientOutputs, [{ name: 'grade', datatype: 'INT64', axes: 'n', shape: [-1], batchDim: 0 }]);
});

test('a meta bundle: client tensors, its sub-models, its model.js; never itself', (t) => {
  const metaDir = bundle(t, 'pipeline', { 'manifest.yaml': '', 'model.js': 'export async function run() {}' });
  const text = (/** @type {string} */ models) => `format_version: "2.0"\nkind: meta\nmodels: [${models}]\nclient_inputs:\n  - { name: x, dtype: f32, shape: nk, dims: { k: 2 } }\nclient_outputs:\n  - { name: y, dtype: i64, shape: n }\n`;
  const spec = parseManifest(text('digits, severity_grader'), metaDir);
  t.is(spec.kind, 'meta');
  t.deepEqual(spec.subModels, ['digits', 'severity_grader']);
  t.deepEqual(spec.executables, []);
  t.is(spec.batchAxis, 'n');
  t.regex(t.throws(() => parseManifest(text('pipeline'), metaDir)).message, /models lists "pipeline" itself/);
  t.regex(t.throws(() => parseManifest(text('severity_grader'), dir)).message, /needs model\.js with a run hook/);
});

test('scheduling.priority: the level of the model\'s requests that name none, 1 the highest; absent, none', (t) => {
  const dir = path.join(ROOT, 'bundles', 'digits');
  const base = `format_version: "2.0"\n${TENSORS}batching:\n  compiled_batch_sizes: [1]\n`;
  t.is(parseManifest(`${base}scheduling: { priority: 1 }\n`, dir).priority, 1);
  t.false('priority' in parseManifest(base, dir), 'absent: the node file\'s level, else its default');
  fails(t, `${base}scheduling: { priority: 0 }\n`, /scheduling\.priority.*>= 1/);
  fails(t, `${base}scheduling: { priority: 1.5 }\n`, /scheduling\.priority.*integer/);
  fails(t, `${base}scheduling: { level: 1 }\n`, /scheduling\.level: unknown key/);
});

test('unknown keys, a foreign name, duplicate tensors, hooks and meta bundles are refused', (t) => {
  fails(t, `format_version: "2.0"\n${TENSORS}batching: { compiled_batch_sizes: [1] }\nbatchsize: 3\n`, /batchsize: unknown key/);
  fails(t, `format_version: "2.0"\nname: other\n${TENSORS}batching: { compiled_batch_sizes: [1] }\n`, /name "other" differs from the bundle's directory name "digits"/);
  fails(t, `format_version: "2.0"\nexecutable_inputs:\n  - { name: x, dtype: f32, shape: n }\n  - { name: x, dtype: f32, shape: n }\nexecutable_outputs:\n  - { name: y, dtype: f32, shape: n }\nbatching: { compiled_batch_sizes: [1] }\n`, /executable_inputs names tensor "x" twice/);
  fails(t, `format_version: "2.0"\n${TENSORS}client_outputs:\n  - { name: g, dtype: i64, shape: nz }\nbatching: { compiled_batch_sizes: [1] }\n`, /client_outputs "g": axis 'z' of shape "nz" has no size in dims/);
  fails(t, `format_version: "2.0"\nkind: meta\n${TENSORS}batching: { compiled_batch_sizes: [1] }\n`, /a kind: meta bundle has no executable/);
  fails(t, `format_version: "2.0"\nmodels: [a]\n${TENSORS}batching: { compiled_batch_sizes: [1] }\n`, /models lists the sub-models of a kind: meta bundle/);
  fails(t, 'format_version: "2.0"\n', /executable_inputs is required/);
  fails(t, 'format_version: "2.0"\nexecutable_inputs: [\n', /not valid YAML/);
});

test('the scanner takes each subdirectory with a manifest, and one bad bundle does not stop the others', (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const repo = makeRepository(temp.dir, { digits: path.join(ROOT, 'bundles', 'digits') }, {
    'broken/manifest.yaml': 'format_version: 2\n',
    'notes/README.txt': 'not a bundle',
  });
  writeFileSync(path.join(repo, 'loose-file.yaml'), 'x: 1\n');
  const found = scanRepository(repo);
  t.deepEqual(found.map((b) => b.name), ['broken', 'digits']);
  t.truthy(found[1].spec);
  t.regex(found[0].error?.message ?? '', /bundle "broken", manifest\.yaml/);
  t.regex(t.throws(() => scanRepository(path.join(repo, 'nope'))).message, /model_repo .* is not a directory/);
});

test('every problem of a manifest is reported at once, each with its file', (t) => {
  const text = `format_version: "2.0"\nname: other\nexecutable_inputs:\n  - { name: x, dtype: f32, shape: nhh, dims: { h: 2 } }\n  - { name: x, dtype: f32, shape: nw }\nexecutable_outputs:\n  - { name: y, dtype: i64, shape: n }\n`;
  const err = /** @type {import('../../../dist/shared/errors.js').BundleInvalidError} */ (t.throws(() => parseManifest(text, dir)));
  t.is(err.code, 'STOWAGE_BUNDLE_INVALID');
  t.deepEqual(err.problems.map((p) => p.file), ['manifest.yaml', 'manifest.yaml', 'manifest.yaml', 'manifest.yaml', 'manifest.yaml']);
  t.deepEqual(err.problems.map((p) => p.message.replace(/:.*/, '')), [
    'name "other" differs from the bundle\'s directory name "digits"; the directory name is the model name',
    'executable_inputs names tensor "x" twice; tensor names are unique per list',
    'executable_inputs "x"',
    'executable_inputs "x"',
    'tensors have the batch axis \'n\', so batching.compiled_batch_sizes is required (e.g. [1, 8])',
  ]);
  t.regex(err.problems[2].message, /names axis 'h' twice/);
  t.regex(err.problems[3].message, /axis 'w' of shape "nw" has no size in dims/);
  // The message names them all too, for the server's log and the model's reason.
  t.regex(err.message, /^bundle "digits", manifest\.yaml: name "other".*; manifest\.yaml: tensors have the batch axis/);
});

test('warmup.data: one batch row per named input, read from warmup/ and checked against the input\'s row size', (t) => {
  // x: f32 nhw with h 2, w 3: a row is 6 floats, 24 bytes. s: bytes nk with k 2: a row is 2 strings.
  const text = (/** @type {string} */ data) => [
    'format_version: "2.0"',
    'executable_inputs:',
    '  - { name: x, dtype: f32, shape: nhw, dims: { h: 2, w: 3 } }',
    '  - { name: s, dtype: bytes, shape: nk, dims: { k: 2 } }',
    'executable_outputs:',
    '  - { name: y, dtype: i64, shape: n }',
    'batching:',
    '  compiled_batch_sizes: [1]',
    'warmup:',
    `  data: ${data}`,
    '',
  ].join('\n');
  const strings = Buffer.concat([Buffer.from([2, 0, 0, 0]), Buffer.from('hi'), Buffer.from([0, 0, 0, 0])]);
  const files = { 'model.onnx': '', 'warmup/x.bin': 'a'.repeat(24), 'warmup/s.bin': strings.toString('latin1'), 'warmup/short.bin': 'a'.repeat(20), 'warmup/cut.bin': '\u0009\0\0\0abc', 'warmup/three.bin': '\0'.repeat(12) };
  const ok = bundle(t, 'warm', { 'manifest.yaml': '', ...files });
  const spec = parseManifest(text('{ x: warmup/x.bin, s: warmup/s.bin }'), ok);
  t.is(spec.warmupData.x.length, 24);
  t.deepEqual(Buffer.from(spec.warmupData.s), strings);
  t.deepEqual(parseManifest(text('{ x: warmup/x.bin }'), ok).warmupData.s, undefined, 'an input not named warms up on zeros');
  t.deepEqual(parseManifest(`format_version: "2.0"${TENSORS}batching:\n  compiled_batch_sizes: [1]\n`, ok).warmupData, {});
  const refused = (/** @type {string} */ data, /** @type {RegExp} */ pattern) => t.regex(t.throws(() => parseManifest(text(data), ok)).message, pattern);
  refused('{ y: warmup/x.bin }', /warmup\.data\.y: "y" is not an executable input \(executable_inputs: x, s\)/);
  refused('{ x: warmup/short.bin }', /warmup\/short\.bin: holds 20 bytes; one batch row of x \(FP32, 2x3\) is 24 bytes of raw little-endian values/);
  refused('{ s: warmup/three.bin }', /warmup\/three\.bin: holds 3 strings; one batch row of s \(BYTES, 2\) is 2/);
  refused('{ s: warmup/cut.bin }', /warmup\/cut\.bin: holds a length prefix that runs past the end/);
  refused('{ x: warmup/none.bin }', /warmup\/none\.bin: cannot be opened: ENOENT/);
  refused('{ x: x.bin }', /warmup\.data\.x.*must match pattern/);
  refused('{ x: warmup/../../etc/passwd }', /warmup\.data\.x.*must match pattern/);
});
