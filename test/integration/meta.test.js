// Meta models through the real server: a run hook calling sub-models in parallel and in
// data-dependent loops, each sub-call scheduled and coalesced like any request, errors that run
// may handle or that fail the meta request with the sub-model's status.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import test from 'ava';
import { status } from '@grpc/grpc-js';
import { dataAs, FIXTURES, makeRepository, ROOT, startServer, tempDir, tensor } from '../helpers/server.js';
import { grpcError } from '../helpers/errors.js';

const heldout = JSON.parse(readFileSync(path.join(FIXTURES, 'digits_heldout.json'), 'utf8'));
const grader = JSON.parse(readFileSync(path.join(FIXTURES, 'grader_heldout.json'), 'utf8'));
const meta = (/** @type {string} */ name, /** @type {string[]} */ models) => `format_version: "2.0"
kind: meta
models: [${models.join(', ')}]
client_inputs:
  - { name: image, dtype: f32, shape: nhw, dims: { h: 8, w: 8 } }
client_outputs:
${name === 'report' ? '  - { name: label, dtype: i64, shape: n }\n  - { name: grade, dtype: i64, shape: ny, dims: { y: 1 } }' : '  - { name: label, dtype: i64, shape: n }'}
`;
/** @type {import('../helpers/server.js').Server} */
let server;
/** @type {import('../helpers/server.js').TempDir} */
let temp;

test.before(async () => {
  temp = tempDir();
  const repo = makeRepository(temp.dir, {
    digits: path.join(ROOT, 'bundles', 'digits'),
    severity_grader: path.join(ROOT, 'bundles', 'severity_grader'),
  }, {
    'report/manifest.yaml': meta('report', ['digits', 'severity_grader']),
    'report/model.js': readFileSync(path.join(FIXTURES, 'meta', 'report.js'), 'utf8'),
    'per_row/manifest.yaml': meta('per_row', ['digits']),
    'per_row/model.js': readFileSync(path.join(FIXTURES, 'meta', 'per-row.js'), 'utf8'),
    'calls_itself/manifest.yaml': meta('calls_itself', ['calls_itself']),
    'calls_itself/model.js': 'export async function run() { return {}; }\n',
    'calls_ghost/manifest.yaml': meta('calls_ghost', ['ghost']),
    'calls_ghost/model.js': 'export async function run() { return {}; }\n',
  });
  server = await startServer({ model_repo: repo }, { root: temp.dir });
});

test.after.always(async () => {
  await server?.stop();
  temp?.cleanup();
});

const images = (/** @type {number} */ from, /** @type {number} */ n) => tensor('image', 'FP32', [n, 8, 8], Float32Array.from(heldout.images.slice(from, from + n).flat()));

test('a meta model calls two sub-models in parallel and combines their answers', async (t) => {
  const { outputs } = await server.client.infer('report', [images(0, 16)]);
  const by = Object.fromEntries(outputs.map((o) => [o.name, o]));
  const labels = (await server.client.infer('digits', [images(0, 16)], { outputs: ['label'] })).outputs[0].data;
  t.deepEqual([...by.label.data], [...labels]);
  t.deepEqual([...by.grade.data].map(Number), grader.grades.slice(0, 16));
  const unsure = await server.client.infer('report', [images(0, 16)], { outputs: ['label'], parameters: { min_confidence: { double_param: 1.01 } } });
  t.true([...unsure.outputs[0].data].every((l) => l === -1n), 'the data-dependent step saw the parameter');
});

test('metadata describes the meta model\'s client tensors as an ensemble', async (t) => {
  const md = await server.client.call('ModelMetadata', { name: 'report' });
  t.is(md.platform, 'ensemble');
  t.deepEqual(md.inputs.map((i) => [i.name, i.datatype]), [['image', 'FP32']]);
  t.deepEqual(md.outputs.map((o) => o.name), ['label', 'grade']);
});

test.serial('16 concurrent meta requests coalesce their sub-calls, and each model counts its own', async (t) => {
  const stats = async (/** @type {string} */ name) => (await server.client.call('ModelStatistics', { name })).model_stats[0];
  const [digitsBefore, metaBefore] = [await stats('digits'), await stats('per_row')];
  const results = await Promise.all(Array.from({ length: 16 }, (_, i) => server.client.infer('per_row', [images(i * 4, 4)])));
  for (const [i, r] of results.entries()) {
    const expected = (await server.client.infer('digits', [images(i * 4, 4)], { outputs: ['label'] })).outputs[0].data;
    t.deepEqual([...r.outputs[0].data], [...expected]);
  }
  const [digitsAfter, metaAfter] = [await stats('digits'), await stats('per_row')];
  const calls = Number(digitsAfter.inference_stats.success.count) - Number(digitsBefore.inference_stats.success.count) - 16; // minus the reference calls
  const executions = Number(digitsAfter.execution_count) - Number(digitsBefore.execution_count) - 16;
  t.is(calls, 64, 'one sub-call per row');
  t.true(executions < calls, `${executions} executions for ${calls} sub-calls`);
  t.is(Number(metaAfter.inference_stats.success.count) - Number(metaBefore.inference_stats.success.count), 16);
  t.log(`${calls} sub-calls ran in ${executions} executions`);
});

test('a failed sub-call rejects inside run: handled, or failing the meta request with its status', async (t) => {
  const handled = await server.client.infer('per_row', [images(0, 2)], { parameters: { bad_shape: { bool_param: true }, handle: { bool_param: true } } });
  t.deepEqual([...handled.outputs[0].data], [-3n, -3n], 'INVALID_ARGUMENT (3), handled by run');
  const unhandled = await grpcError(t, server.client.infer('per_row', [images(0, 1)], { parameters: { bad_shape: { bool_param: true } } }));
  t.is(unhandled.code, status.INVALID_ARGUMENT);
  t.regex(unhandled.details, /model "per_row": the run hook in model\.js failed: .*"image"/);
  const unlisted = await grpcError(t, server.client.infer('per_row', [images(0, 1)], { parameters: { call_unknown: { bool_param: true } } }));
  t.regex(unlisted.details, /may call only digits \(its manifest's models\), not "not_listed"/);
});

test('a meta model that calls itself or an unknown model is refused at load', async (t) => {
  const { models } = await server.client.call('RepositoryIndex', {});
  const by = Object.fromEntries(models.map((m) => [m.name, m]));
  t.regex(by.calls_itself.reason, /models lists "calls_itself" itself; a meta model may not call itself/);
  t.regex(by.calls_ghost.reason, /models lists "ghost", which is not a bundle of this repository/);
  t.is(by.report.state, 'READY');
});

test('sub-calls inherit the meta request\'s deadline: past it they fail, and so does the meta request, DEADLINE_EXCEEDED', async (t) => {
  // The run hook begins well within the deadline (1 s; a call still waiting for a hook thread past
  // it would never run), then waits past it before its sub-calls.
  const err = await grpcError(t, server.client.infer('per_row', [images(0, 32)], { parameters: { timeout: { int64_param: '1000000' }, wait_ms: { int64_param: '1500' } } }));
  t.is(err.code, status.DEADLINE_EXCEEDED);
  t.regex(err.details, /model "per_row": the run hook in model\.js failed: request for model "digits" did not run/);
});

test('the worked example finds and reads the digits on canvases with 0 to 5 digits', async (t) => {
  /** @type {{ canvas: number[][], digits: { box: number[], digit: number }[] }[]} */
  const canvases = JSON.parse(readFileSync(path.join(FIXTURES, 'digit_canvases.json'), 'utf8'));
  const temp2 = tempDir();
  t.teardown(temp2.cleanup);
  const repo = makeRepository(temp2.dir, Object.fromEntries(['digits', 'digit_cells', 'digit_finder'].map((b) => [b, path.join(ROOT, 'bundles', b)])));
  const finder = await startServer({ model_repo: repo }, { root: temp2.dir });
  t.teardown(() => finder.stop());
  let right = 0;
  let total = 0;
  for (const { canvas, digits } of canvases) {
    const { outputs } = await finder.client.infer('digit_finder', [{ name: 'canvas', datatype: 'FP32', shape: [32, 32], data: Float32Array.from(canvas.flat()) }]);
    const by = Object.fromEntries(outputs.map((o) => [o.name, [...dataAs(o, BigInt64Array)].map(Number)]));
    t.is(by.count[0], digits.length);
    const boxes = Array.from({ length: digits.length }, (_, k) => by.boxes.slice(k * 4, k * 4 + 4));
    t.deepEqual(boxes, digits.map((d) => d.box), 'boxes in reading order');
    t.true(by.boxes.slice(digits.length * 4).every((v) => v === -1) && by.digits.slice(digits.length).every((v) => v === -1));
    digits.forEach((d, k) => {
      total++;
      if (by.digits[k] === d.digit) right++;
    });
  }
  t.true(canvases.some((c) => c.digits.length === 0), 'a blank canvas is among them');
  t.true(right / total >= 0.9, `${right}/${total} digits read right`);
  t.log(`${right}/${total} digits read right over ${canvases.length} canvases`);
});
