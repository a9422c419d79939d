// What an operator sees and relies on: Prometheus metrics that count exactly what was sent,
// readiness while models load, load shedding past the concurrency cap, graceful shutdown.
import { cpSync, rmSync, writeFileSync } from 'node:fs';
import { once } from 'node:events';
import path from 'node:path';
import test from 'ava';
import { status } from '@grpc/grpc-js';
import { InferenceClient } from '../../dist/client/client.js';
import { FIXTURES, ROOT, makeRepository, scrapeMetrics, startServer, tempDir, tensor } from '../helpers/server.js';
import { mlpLayers, writeBundle } from '../helpers/mlp-catalog.js';

const CONVNET = path.join(FIXTURES, 'models', 'convnet');
const image = (/** @type {number} */ rows) => tensor('image', 'FP32', [rows, 3, 32, 32], new Float32Array(rows * 3 * 32 * 32).fill(0.2));
const digit = (/** @type {number} */ rows) => tensor('image', 'FP32', [rows, 8, 8], new Float32Array(rows * 64));


test('/metrics counts exactly the requests, rows and executions sent, with Triton\'s names', async (t) => {
  const server = await startServer({ model_repo: path.join(ROOT, 'bundles') });
  t.teardown(() => server.stop());
  const sizes = [1, 3, 1, 8, 2];
  for (const rows of sizes) await server.client.infer('digits', [digit(rows)]);
  await t.throwsAsync(server.client.infer('digits', [{ ...digit(1), shape: [1, 64] }]));
  const m = await scrapeMetrics(server.adminPort);
  const labels = '{model="digits",version="1"}';
  t.is(m[`nv_inference_request_success${labels}`], sizes.length);
  t.is(m[`nv_inference_count${labels}`], sizes.reduce((a, b) => a + b, 0));
  t.is(m[`nv_inference_exec_count${labels}`], sizes.length, 'sequential requests run alone');
  t.is(m['nv_inference_request_failure{model="digits",version="1",reason="OTHER"}'], 1);
  t.true(m[`nv_inference_compute_infer_duration_us${labels}`] > 0);
  t.true(m[`nv_inference_queue_duration_us${labels}`] >= 0);
  t.true(m[`nv_inference_request_duration_us${labels}`] > m[`nv_inference_compute_infer_duration_us${labels}`]);
  t.true(m[`nv_model_load_duration_secs${labels}`] > 0);
  t.is(m['stowage_device_executions_total{device="0"}'], sizes.length);
  t.is(m['stowage_device_batch_rows_sum{device="0"}'], sizes.reduce((a, b) => a + b, 0));
  t.is(m['stowage_device_batch_rows_count{device="0"}'], sizes.length);
  // The request-duration histogram: every successful request in the +Inf bucket and the count, cumulative buckets,
  // the sum the successes' time (the failed one is not in it).
  const h = (/** @type {string} */ le) => m[`stowage_request_duration_seconds_bucket{model="digits",le="${le}"}`];
  t.is(h('+Inf'), sizes.length);
  t.is(m['stowage_request_duration_seconds_count{model="digits"}'], sizes.length);
  const les = ['0.001', '0.0025', '0.005', '0.01', '0.025', '0.05', '0.1', '0.25', '0.5', '1', '2.5', '5', '10', '+Inf'];
  for (let i = 1; i < les.length; i++) t.true(h(les[i]) >= h(les[i - 1]), `cumulative at le=${les[i]}`);
  t.true(h('10') === sizes.length, 'five small requests, each well under 10 s');
  const sum = m['stowage_request_duration_seconds_sum{model="digits"}'];
  t.true(sum > 0 && sum * 1e6 <= m[`nv_inference_request_duration_us${labels}`], `${sum} s of successes within all requests' time`);
  t.true(m['stowage_device_busy_seconds_total{device="0"}'] > 0);
  t.is(m['stowage_device_queue_depth{device="0"}'], 0);
  t.is(m['stowage_requests_routed_total{model="digits",device="0"}'], sizes.length, 'the bad request failed in decode, before routing');
  t.is(m['stowage_gateway_routed_total{model="digits",device="0"}'], sizes.length, 'the old name, a deprecated alias for one release, says the same');
  t.is(m['stowage_grpc_inflight_requests'], 0);
  t.is(m[`nv_inference_pending_request_count${labels}`] ?? 0, 0);
  t.true('nodejs_eventloop_lag_seconds' in m, 'main-thread event-loop lag');
  // Every thread's V8 heap, workers included (the repository has hooked models, so hook threads run).
  for (const thread of ['main', 'device-0', 'hook-0']) {
    const used = m[`stowage_thread_heap_bytes{thread="${thread}",kind="used"}`];
    t.true(used > 1e5, `${thread} heap used ${used}`);
    t.true(m[`stowage_thread_heap_bytes{thread="${thread}",kind="total"}`] >= used, `${thread} heap total`);
  }
});

test.serial('readiness reports the models still loading, then ready', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const repo = makeRepository(temp.dir, {});
  for (let i = 0; i < 8; i++) cpSync(CONVNET, path.join(repo, `convnet_${String(i).padStart(2, '0')}`), { recursive: true });
  // Loads held until the test lets them go (fault injection): "still loading" whatever the machine's speed.
  const hold = path.join(temp.dir, 'hold-loads');
  writeFileSync(hold, '');
  const server = await startServer({ model_repo: repo }, { root: temp.dir, until: (l) => l.msg === 'loading the model repository', env: { STOWAGE_FAULT_DEVICE_HOLD_LOADS: hold } });
  t.teardown(() => server.stop());
  await server.waitForLog((l) => l.msg === 'fault injection: a load is held');
  const early = await fetch(`http://127.0.0.1:${server.adminPort}/readyz`);
  t.is(early.status, 503);
  const body = await early.json();
  t.false(body.ready);
  t.true(body.loading.length > 0, `${body.loading.length} models still loading`);
  rmSync(hold);
  await server.waitForLog((l) => l.msg === 'serving');
  const ready = await fetch(`http://127.0.0.1:${server.adminPort}/readyz`);
  t.is(ready.status, 200);
  t.deepEqual((await ready.json()).loading, []);
  const progress = server.logs.filter((l) => l.msg === 'model loaded').map((l) => l.progress);
  t.is(progress.at(-1), '8/8');
});

test('every per-model series exists from the load on, at 0 before the first request, as Triton\'s do (each failure reason too)', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const repo = makeRepository(temp.dir, { digits: path.join(ROOT, 'bundles', 'digits') });
  const server = await startServer({ model_repo: repo, global: { model_control_mode: 'explicit' } }, { root: temp.dir });
  t.teardown(() => server.stop());
  const before = await scrapeMetrics(server.adminPort);
  t.false('nv_inference_pending_request_count{model="digits",version="1"}' in before, 'not loaded: no series');
  await server.client.call('RepositoryModelLoad', { model_name: 'digits' });
  const idle = await scrapeMetrics(server.adminPort);
  for (const name of ['nv_inference_request_success', 'nv_inference_count', 'nv_inference_exec_count', 'nv_inference_pending_request_count', 'nv_inference_request_duration_us',
    'nv_inference_queue_duration_us', 'nv_inference_compute_input_duration_us', 'nv_inference_compute_infer_duration_us', 'nv_inference_compute_output_duration_us']) {
    t.is(idle[`${name}{model="digits",version="1"}`], 0, name);
  }
  for (const reason of ['REJECTED', 'CANCELED', 'BACKEND', 'OTHER']) t.is(idle[`nv_inference_request_failure{model="digits",version="1",reason="${reason}"}`], 0, reason);
  await server.client.infer('digits', [digit(2)]);
  const after = await scrapeMetrics(server.adminPort);
  t.is(after['nv_inference_request_success{model="digits",version="1"}'], 1);
  t.is(after['nv_inference_count{model="digits",version="1"}'], 2);
  t.is(after['nv_inference_pending_request_count{model="digits",version="1"}'], 0, 'idle again: still there, at 0');
});

test('past max_concurrent_requests a burst is shed with RESOURCE_EXHAUSTED and admitted requests succeed', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const repo = makeRepository(temp.dir, { convnet: CONVNET });
  const server = await startServer({ model_repo: repo, global: { endpoints: { max_concurrent_requests: 4 } } }, { root: temp.dir });
  t.teardown(() => server.stop());
  const results = await Promise.allSettled(Array.from({ length: 40 }, () => server.client.infer('convnet', [image(16)])));
  const shed = results.filter((r) => r.status === 'rejected');
  t.true(shed.length > 0, 'some of the burst was shed');
  for (const r of shed) {
    t.is(r.reason.code, status.RESOURCE_EXHAUSTED);
    t.regex(r.reason.details, /4 inference requests in flight \(endpoints\.max_concurrent_requests = 4\)/);
  }
  t.true(results.filter((r) => r.status === 'fulfilled').every((r) => r.value.outputs[0].shape[0] === 16));
  const m = await scrapeMetrics(server.adminPort);
  t.is(m.stowage_grpc_shed_total, shed.length);
  t.true(await server.client.serverReady(), 'health RPCs are never shed');
});

test('at the defaults, 1,000 concurrent requests from one client all queue and are answered, none refused', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const repo = makeRepository(temp.dir, { digits: path.join(ROOT, 'bundles', 'digits') });
  const server = await startServer({ model_repo: repo }, { root: temp.dir });
  t.teardown(() => server.stop());
  // One client, one connection, a thousand calls at once (tritonclient's async burst).
  const results = await Promise.allSettled(Array.from({ length: 1000 }, (_, i) => server.client.infer('digits', [digit(1 + (i % 4))])));
  const refused = results.filter((r) => r.status === 'rejected');
  t.deepEqual(refused.map((r) => /** @type {PromiseRejectedResult} */ (r).reason.details), [], 'none refused');
  t.true(results.every((r, i) => r.status === 'fulfilled' && r.value.outputs[0].shape[0] === 1 + (i % 4)), 'each answered with its own rows');
  const m = await scrapeMetrics(server.adminPort);
  t.is(m.stowage_grpc_shed_total, 0);
});

test('past max_inflight_bytes a burst of large requests is shed naming the bytes; a lone request larger than the cap still passes', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const repo = makeRepository(temp.dir, { convnet: CONVNET });
  // 16 images are 196,608 bytes: the cap holds one such request at a time.
  const cap = 300_000;
  const server = await startServer({ model_repo: repo, global: { endpoints: { max_inflight_bytes: cap } } }, { root: temp.dir });
  t.teardown(() => server.stop());
  const results = await Promise.allSettled(Array.from({ length: 40 }, () => server.client.infer('convnet', [image(16)])));
  const shed = results.filter((r) => r.status === 'rejected');
  t.true(shed.length > 0, 'some of the burst was shed');
  for (const r of shed) {
    t.is(r.reason.code, status.RESOURCE_EXHAUSTED);
    t.regex(r.reason.details, /in flight hold \d+ bytes of tensors and this one brings 196608 more, past endpoints\.max_inflight_bytes = 300000/);
  }
  t.true(results.filter((r) => r.status === 'fulfilled').every((r) => r.value.outputs[0].shape[0] === 16));
  const alone = await server.client.infer('convnet', [image(32)]); // 393,216 bytes, alone
  t.is(alone.outputs[0].shape[0], 32);
  const m = await scrapeMetrics(server.adminPort);
  t.is(m.stowage_grpc_shed_total, shed.length);
  t.is(m.stowage_grpc_inflight_bytes, 0, 'every admitted request gave its bytes back');
});

test('signals for autoscalers: each model\'s queue depth under a burst, and its resident weight bytes per device', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const repo = makeRepository(temp.dir, { digits: path.join(ROOT, 'bundles', 'digits') });
  // A model slow enough (about 10 ms a row here) that the device, not the gRPC front, is what a burst waits for.
  const slow = writeBundle(repo, 'convnet', mlpLayers(5, [1024, 2048, 2048, 2048, 16]));
  const server = await startServer({ model_repo: repo, global: { scheduler: { models: { convnet: { max_batch_size: 1 } } } } }, { root: temp.dir });
  t.teardown(() => server.stop());
  await server.client.infer('digits', [digit(1)]);
  // One row per execution: a burst of 200 waits in the model's queue.
  const x = tensor('x', 'FP32', [1, 1024], new Float32Array(1024).fill(0.01));
  t.is(slow.name, 'convnet');
  const burst = Promise.all(Array.from({ length: 200 }, () => server.client.infer('convnet', [x])));
  let deepest = 0;
  let done = false;
  burst.then(() => { done = true; }, () => { done = true; });
  while (!done) {
    deepest = Math.max(deepest, (await scrapeMetrics(server.adminPort))['stowage_model_queue_depth{model="convnet"}'] ?? 0);
  }
  await burst;
  t.log(`the model's queue reached ${deepest}`);
  t.true(deepest > 10, `the model's queue reached ${deepest}`);
  const m = await scrapeMetrics(server.adminPort);
  t.is(m['stowage_model_queue_depth{model="convnet"}'], 0, 'drained');
  const resident = m['stowage_weight_cache_model_resident_bytes{model="digits",device="0"}'];
  t.true(resident > 0 && resident === m['stowage_weight_cache_resident_bytes{device="0"}'] - m['stowage_weight_cache_model_resident_bytes{model="convnet",device="0"}'], `digits holds ${resident} bytes on device 0`);
});

test('SIGTERM under load: every admitted request completes, then the process exits 0', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const repo = makeRepository(temp.dir, { convnet: CONVNET });
  const server = await startServer({ model_repo: repo, global: { scheduler: { models: { convnet: { max_batch_size: 1 } } } } }, { root: temp.dir });
  t.teardown(() => server.stop());
  // Twelve clients on connections of their own, each sending requests back to back until one fails.
  const clients = Array.from({ length: 12 }, () => new InferenceClient(server.address));
  t.teardown(() => clients.forEach((c) => c.close()));
  let signalled = false;
  let completedAfterSignal = 0;
  /** @type {import('@grpc/grpc-js').ServiceError[]} */
  const failures = [];
  const load = clients.map(async (c) => {
    for (;;) {
      try {
        const { outputs } = await c.infer('convnet', [image(32)]);
        t.deepEqual(outputs[0].shape, [32, 10]);
        if (signalled) completedAfterSignal++;
      } catch (err) {
        failures.push(/** @type {import('@grpc/grpc-js').ServiceError} */ (err));
        return;
      }
    }
  });
  // Wait until the server holds several (its own gauge says so), then ask it to stop. The scrapes
  // are spaced out: back to back they would keep the server's main thread from the load itself.
  let held = 0;
  for (let polls = 0; held < 4 && polls < 200; polls++) {
    await new Promise((resolve) => setTimeout(resolve, 20));
    held = (await scrapeMetrics(server.adminPort)).stowage_grpc_inflight_requests;
  }
  t.true(held >= 4, `the server held ${held} requests`);
  signalled = true;
  server.child.kill('SIGTERM');
  const stopping = await server.waitForLog((l) => String(l.msg).startsWith('stopping'));
  await Promise.all(load);
  // Every request the server had admitted when the signal came completed; what failed afterwards
  // was refused at the door (the server no longer accepts calls), never cut off by the stop.
  t.true(stopping.inflight >= 1);
  t.true(completedAfterSignal >= stopping.inflight, `${completedAfterSignal} completed after the signal, ${stopping.inflight} were in flight`);
  for (const err of failures) {
    t.is(err.code, status.UNAVAILABLE, err.details);
    t.notRegex(err.details, /device|stopping/);
  }
  const [code] = await once(server.child, 'close');
  t.is(code, 0);
  t.true(server.logs.some((l) => l.msg === 'stopped'));
});
