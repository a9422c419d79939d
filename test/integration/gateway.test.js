// Several devices behind one endpoint: N virtual CPU devices, each a device actor with every
// model, and the gateway spreading requests over them.
import path from 'node:path';
import test from 'ava';
import { FIXTURES, ROOT, makeRepository, scrapeMetrics, startServer, tempDir, tensor } from '../helpers/server.js';
import { present } from '../helpers/checks.js';

const image = (/** @type {number} */ rows) => tensor('image', 'FP32', [rows, 3, 32, 32], Float32Array.from({ length: rows * 3 * 32 * 32 }, (_, i) => Math.sin(i)));


/**
 * A node serving convnet and digits with `config` over the defaults, stopped with the test.
 * @param {import('ava').ExecutionContext} t
 * @param {import('../helpers/server.js').NodeFile} config
 * @param {Record<string, string>} [env]
 */
async function serve(t, config, env = {}) {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const repo = makeRepository(temp.dir, { convnet: path.join(FIXTURES, 'models', 'convnet'), digits: path.join(ROOT, 'bundles', 'digits') });
  const server = await startServer({ model_repo: repo, ...config }, { root: temp.dir, env });
  t.teardown(() => server.stop());
  return server;
}

test('round_robin spreads requests over every device, each answering the same', async (t) => {
  const server = await serve(t, { gpus: 3 });
  t.deepEqual(server.logs.find((l) => l.msg === 'device actors started')?.devices, [0, 1, 2]);
  const reference = (await server.client.infer('convnet', [image(2)])).outputs[0].data;
  for (let i = 0; i < 9; i++) {
    const { outputs } = await server.client.infer('convnet', [image(2)]);
    t.deepEqual(outputs[0].data, reference);
  }
  const m = await scrapeMetrics(server.adminPort);
  for (const d of [0, 1, 2]) t.true(m[`stowage_device_executions_total{device="${d}"}`] >= 3, `device ${d}`);
});

test('a device listed twice gets two device actors, numbered by position, both serving behind the pool', async (t) => {
  const server = await serve(t, { gpus: [0, 0], gateway: { scheduling: { mode: 'least_outstanding' } } });
  const started = present(server.logs.find((l) => l.msg === 'device actors started'), 'the start-up log line');
  t.deepEqual(started.workers.map((/** @type {{ name: string, device: number, gpu: number }} */ w) => [w.name, w.device, w.gpu]), [['worker0', 0, 0], ['worker1', 1, 0]]);
  const reference = (await server.client.infer('convnet', [image(2)])).outputs[0].data;
  const answers = await Promise.all(Array.from({ length: 16 }, () => server.client.infer('convnet', [image(2)])));
  for (const a of answers) t.deepEqual(a.outputs[0].data, reference);
  const m = await scrapeMetrics(server.adminPort);
  t.true(m['stowage_device_executions_total{device="0"}'] > 0 && m['stowage_device_executions_total{device="1"}'] > 0, 'both actors ran');
});

test('least_outstanding sends requests where the fewest are in flight', async (t) => {
  const server = await serve(t, { gpus: 2, gateway: { scheduling: { mode: 'least_outstanding' } } });
  await Promise.all(Array.from({ length: 16 }, () => server.client.infer('convnet', [image(8)])));
  const m = await scrapeMetrics(server.adminPort);
  t.true(m['stowage_device_executions_total{device="0"}'] > 0 && m['stowage_device_executions_total{device="1"}'] > 0);
});

test('the device count comes from the environment too, and models load on every device', async (t) => {
  const server = await serve(t, {}, { INFERENCE_SERVER_GPUS: '2' });
  t.deepEqual(server.logs.find((l) => l.msg === 'device actors started')?.devices, [0, 1]);
  const control = await server.client.call('ModelStatistics', { name: 'digits' });
  t.is(control.model_stats[0].name, 'digits');
  const { outputs } = await server.client.infer('digits', [{ name: 'image', datatype: 'FP32', shape: [1, 8, 8], data: new Float32Array(64) }], { outputs: ['label'] });
  t.is(outputs[0].shape[0], 1);
});

test('workers: each device its own budget, discipline and batch cap; the models: map pins a model on one device only', async (t) => {
  const server = await serve(t, {
    workers: [
      { name: 'small', runtime: { cpu_device_memory_bytes: 8 * 2 ** 20 }, scheduler: { models: { convnet: { weight: 1, max_batch_size: 8 } } } },
      { name: 'pinned', scheduler: { discipline: 'fifo' } },
    ],
    models: { convnet: ['pinned'] },
  });
  const started = present(server.logs.find((l) => l.msg === 'device actors started'), 'the start-up log line');
  t.deepEqual(started.workers.map((/** @type {{ name: string, device: number, pinned: string[] }} */ w) => [w.name, w.device, w.pinned]), [['small', 0, []], ['pinned', 1, ['convnet']]]);
  const m = await scrapeMetrics(server.adminPort);
  t.is(m['stowage_weight_cache_budget_bytes{device="0"}'], Math.floor((8 * 2 ** 20 * 0.9 * 0.9) / 64) * 64);
  t.true(m['stowage_weight_cache_budget_bytes{device="1"}'] > m['stowage_weight_cache_budget_bytes{device="0"}']);
  t.true(m['stowage_weight_cache_resident_bytes{device="1"}'] > 400_000, 'convnet is on the device it is pinned to before any request');
  t.is(m['stowage_weight_cache_resident_bytes{device="0"}'], 0, 'and nowhere else');
  // A request may run on either device, so ModelConfig reports the batch every device coalesces: small's cap.
  const { config } = await server.client.call('ModelConfig', { name: 'convnet' });
  t.deepEqual(config.dynamic_batching?.preferred_batch_size, [1, 8]);
  const digits = (await server.client.call('ModelConfig', { name: 'digits' })).config;
  t.deepEqual(digits.dynamic_batching?.preferred_batch_size, [1, 8, 32], 'other models keep their compiled sizes');
});
