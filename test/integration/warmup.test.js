// Warm-up before ready through the real server: with runtime.warmup on, every model runs once per
// compiled batch size before it is READY (logged, not counted in its statistics), on zeros or on
// the bundle's warm-up data (manifest warmup.data), and a model can opt out.
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import test from 'ava';
import { present } from '../helpers/checks.js';
import { inferAndCheck, mlpLayers, random, writeBundle } from '../helpers/mlp-catalog.js';
import { makeRepository, startServer, tempDir, FIXTURES } from '../helpers/server.js';
import path from 'node:path';

test('runtime.warmup: on runs each model once per compiled batch size before READY, outside its statistics', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const repo = path.join(temp.dir, 'repo');
  const warm = writeBundle(repo, 'warm', mlpLayers(3, [16, 32, 4]));
  const cold = writeBundle(repo, 'cold', mlpLayers(4, [16, 32, 4]));
  const server = await startServer({
    model_repo: repo,
    global: { runtime: { warmup: 'on' }, scheduler: { models: { cold: { warmup: false } } } },
  }, { root: temp.dir });
  t.teardown(() => server.stop());
  const warmed = server.logs.filter((e) => e.msg === 'model warmed up');
  t.deepEqual(warmed.map((e) => e.model), ['warm'], 'one model warmed, the one that opted out not');
  t.is(warmed[0].runs, 2, 'compiled_batch_sizes [1, 8]: two runs');
  t.true(typeof warmed[0].warmup_ms === 'number');
  const loaded = server.logs.findIndex((e) => e.msg === 'model loaded' && e.model === 'warm');
  t.true(server.logs.findIndex((e) => e.msg === 'model warmed up') < loaded, 'warmed before it was loaded (READY)');
  const stats = (await server.client.call('ModelStatistics', { name: 'warm' })).model_stats[0];
  t.is(Number(stats.execution_count), 0, 'the warm-up is not an execution clients made');
  const next = random(8);
  t.is(await inferAndCheck(server.client, warm, 3, next), null);
  t.is(await inferAndCheck(server.client, cold, 3, next), null);
});

test('every input type warms up, BYTES as empty strings; a fixed-batch bundle once per file', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const repo = makeRepository(temp.dir, { dtypes: path.join(FIXTURES, 'models', 'dtypes'), fixed: path.join(FIXTURES, 'models', 'fixed') });
  const server = await startServer({ model_repo: repo, global: { runtime: { warmup: 'on' } } }, { root: temp.dir });
  t.teardown(() => server.stop());
  const entries = new Map(server.logs.filter((e) => e.msg === 'model warmed up').map((e) => [e.model, e]));
  t.is(entries.get('dtypes')?.runs, 1);
  t.is(entries.get('dtypes')?.skipped, undefined);
  t.is(entries.get('fixed')?.runs, 2, 'model.b1.onnx and model.b4.onnx');
});

test('warm-up on the bundle\'s data (warmup.data): a model that cannot run on zeros warms up on it, repeated to each batch size', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const stepped = path.join(FIXTURES, 'models', 'stepped');
  const repo = makeRepository(temp.dir, { stepped });
  // The same bundle without its warm-up data: zeros make Range's step zero, and the load says so.
  const zeros = path.join(temp.dir, 'zeros');
  mkdirSync(path.join(zeros, 'stepped'), { recursive: true });
  copyFileSync(path.join(stepped, 'model.onnx'), path.join(zeros, 'stepped', 'model.onnx'));
  writeFileSync(path.join(zeros, 'stepped', 'manifest.yaml'), readFileSync(path.join(stepped, 'manifest.yaml'), 'utf8').replace(/^warmup:[\s\S]*$/m, ''));
  const server = await startServer({ model_repo: repo, global: { runtime: { warmup: 'on' } } }, { root: temp.dir });
  t.teardown(() => server.stop());
  const warmed = present(server.logs.find((e) => e.msg === 'model warmed up' && e.model === 'stepped'), 'the warm-up log line');
  t.deepEqual(warmed.data, ['x'], 'x came from the bundle');
  t.is(warmed.runs, 2, 'batch 1 and batch 4');
  const x = Float32Array.from([1, 2, 3, 4, 5, 6]);
  const { outputs } = await server.client.infer('stepped', [{ name: 'x', datatype: 'FP32', shape: [3, 2], data: x }]);
  t.deepEqual(Array.from(/** @type {Float32Array} */ (outputs[0].data)), Array.from(x));

  const refused = await startServer({ model_repo: zeros, global: { runtime: { warmup: 'on' } } });
  t.teardown(() => refused.stop());
  const status = await refused.client.call('RepositoryIndex', {});
  const entry = status.models.find((/** @type {{ name: string }} */ m) => m.name === 'stepped');
  t.is(entry?.state, 'UNAVAILABLE');
  t.regex(entry?.reason ?? '', /warm-up run on zeros failed \(set scheduler\.models\.stepped\.warmup: false to skip it\).*Range/i);
});

test('BYTES and other inputs warm up on the bundle\'s rows; inputs it does not name warm up on zeros', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const repo = makeRepository(temp.dir, { dtypes: path.join(FIXTURES, 'models', 'dtypes') });
  const dir = path.join(repo, 'dtypes');
  mkdirSync(path.join(dir, 'warmup'));
  // One row of in_bytes (shape n3): three length-prefixed strings; of in_i64: three int64s.
  const strings = ['a', '', 'longer string'].map((s) => Buffer.from(s));
  writeFileSync(path.join(dir, 'warmup', 'bytes.bin'), Buffer.concat(strings.flatMap((s) => [Buffer.from(Uint32Array.of(s.length).buffer), s])));
  writeFileSync(path.join(dir, 'warmup', 'i64.bin'), Buffer.from(BigInt64Array.of(1n, -2n, 3n).buffer));
  writeFileSync(path.join(dir, 'manifest.yaml'), `${readFileSync(path.join(dir, 'manifest.yaml'), 'utf8')}\nwarmup:\n  data: { in_bytes: warmup/bytes.bin, in_i64: warmup/i64.bin }\n`);
  const server = await startServer({ model_repo: repo, global: { runtime: { warmup: 'on' } } }, { root: temp.dir });
  t.teardown(() => server.stop());
  const warmed = present(server.logs.find((e) => e.msg === 'model warmed up' && e.model === 'dtypes'), 'the warm-up log line');
  t.deepEqual([...warmed.data].sort(), ['in_bytes', 'in_i64'], 'the named inputs came from the bundle');
  t.is(warmed.skipped, undefined);
});
