// Warm-up before ready through the real server: with runtime.warmup on, every model runs once per
// compiled batch size on zeros before it is READY (logged, not counted in its statistics), a model
// whose inputs have a free axis is warmed where it can be and the rest said, and a model can opt out.
import test from 'ava';
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
