// Stowage's control service (proto/control.proto) through the real server: status per model,
// scheduling policy and residency changed at run time, compaction on demand.
import path from 'node:path';
import test from 'ava';
import * as grpc from '@grpc/grpc-js';
import { ControlClient } from '../../dist/client/control.js';
import { FIXTURES, ROOT, makeRepository, startServer, tempDir, tensor } from '../helpers/server.js';
import { grpcError } from '../helpers/errors.js';
import { fullBatchRate } from '../../dist/actors/device/execution-costs.js';

/** @type {import('../helpers/server.js').Server} */
let server;
/** @type {import('../helpers/server.js').TempDir} */
let temp;
/** @type {ControlClient} */
let control;

test.before(async () => {
  temp = tempDir();
  const repo = makeRepository(temp.dir, { digits: path.join(ROOT, 'bundles', 'digits'), convnet: path.join(FIXTURES, 'models', 'convnet') });
  server = await startServer({ model_repo: repo }, { root: temp.dir });
  control = new ControlClient(server.address);
});

test.after.always(async () => {
  control?.close();
  await server?.stop();
  temp?.cleanup();
});

/** @type {ControlClient['call']} */
const call = (rpc, req) => control.call(rpc, req);
const image = (/** @type {number} */ rows) => tensor('image', 'FP32', [rows, 3, 32, 32], new Float32Array(rows * 3 * 32 * 32).fill(0.3));

test.serial('ModelControlStatus reports each model\'s state, instance, queue and learned cost', async (t) => {
  await server.client.infer('convnet', [image(4)]);
  const { models } = await call('ModelControlStatus', { name: '', fresh: true });
  const by = Object.fromEntries(models.map((m) => [m.name, m]));
  t.deepEqual(Object.keys(by).sort(), ['convnet', 'digits']);
  const c = by.convnet;
  t.is(c.state, 'READY');
  t.regex(c.instance, /^convnet#\d+$/);
  t.is(c.residency, 'system', 'on demand from host RAM, the default');
  t.true(Number(c.resident_bytes) > 400_000, `its weights are on the device after a call: ${c.resident_bytes}`);
  t.is(c.device, 0);
  t.is(c.queue_depth, 0);
  t.is(c.max_batch_size, 32);
  t.is(c.weight, 1);
  t.true(c.learned_cost.some((l) => l.batch_size === 4 && l.ms > 0), JSON.stringify(c.learned_cost));
  const err = await grpcError(t, call('ModelControlStatus', { name: 'ghost', fresh: true }));
  t.is(err.code, grpc.status.NOT_FOUND);
});

test.serial('SetModelPolicy changes the batch cap and weight at run time', async (t) => {
  await call('SetModelPolicy', { name: 'convnet', max_batch_size: 1, weight: 3 });
  const { models } = await call('ModelControlStatus', { name: 'convnet', fresh: true });
  t.is(models[0].max_batch_size, 1);
  t.is(models[0].weight, 3);
  const { config } = await server.client.call('ModelConfig', { name: 'convnet' });
  t.falsy(config.dynamic_batching, 'requests are no longer coalesced, and the config says so');
  const stats = async () => Number((await server.client.call('ModelStatistics', { name: 'convnet' })).model_stats[0].execution_count);
  const before = await stats();
  await Promise.all(Array.from({ length: 16 }, () => server.client.infer('convnet', [image(1)])));
  t.is(await stats() - before, 16, 'one execution per request');
  await call('SetModelPolicy', { name: 'convnet', max_batch_size: 32, weight: 0 });
  const after = (await call('ModelControlStatus', { name: 'convnet', fresh: true })).models[0];
  t.is(after.max_batch_size, 32);
  t.is(after.weight, 3, 'weight 0 leaves the weight as it was');
});

test.serial('SetModelResidency moves a model between device, system and unpinned; CompactMemory compacts', async (t) => {
  const status = async () => (await call('ModelControlStatus', { name: 'digits', fresh: true })).models[0];
  await call('SetModelResidency', { name: 'digits', residency: 'device' });
  t.is((await status()).residency, 'device');
  t.true(Number((await status()).resident_bytes) > 0, 'device: on the device at once, before any call');
  await call('SetModelResidency', { name: 'digits', residency: 'unpinned' });
  t.is((await status()).residency, 'unpinned');
  const { outputs } = await server.client.infer('digits', [{ name: 'image', datatype: 'FP32', shape: [1, 8, 8], data: new Float32Array(64) }], { outputs: ['label'] });
  t.is(outputs[0].shape[0], 1);
  await call('SetModelResidency', { name: 'digits', residency: 'system' });
  t.is((await status()).residency, 'system');
  const compacted = await call('CompactMemory', { device: -1 });
  t.true(Number(compacted.moved_bytes) >= 0);
  for (const [rpc, req, pattern] of /** @type {[import('../../dist/client/control.js').ControlRpc, any, RegExp][]} */ ([
    ['SetModelResidency', { name: 'digits', residency: 'gpu' }, /residency must be one of device, system, unpinned, got "gpu"/],
    ['CompactMemory', { device: 7 }, /no device 7; devices: 0/],
  ])) {
    const err = await grpcError(t, call(rpc, req));
    t.is(err.code, grpc.status.INVALID_ARGUMENT);
    t.regex(err.details, pattern);
  }
  const missing = await grpcError(t, call('SetModelResidency', { name: 'ghost', residency: 'device' }));
  t.is(missing.code, grpc.status.NOT_FOUND);
});

test.serial('ModelControlStatus reports what a pooling gateway places by: budget, devices, queue, weight bytes, compute seconds, hits and misses', async (t) => {
  const before = await call('ModelControlStatus', { name: '', fresh: true });
  t.true(Number(before.weight_budget_bytes) > 100e6, `the node's budget: ${before.weight_budget_bytes}`);
  t.is(before.devices, 1);
  t.is(before.queue_depth, 0);
  const of = (/** @type {typeof before} */ reply, /** @type {string} */ name) => reply.models.find((m) => m.name === name);
  const convnet = /** @type {import('../../dist/client/control.js').ModelControlStatus} */ (of(before, 'convnet'));
  t.true(Number(convnet.weight_bytes) > 400_000, `its weights' size: ${convnet.weight_bytes}`);
  t.true(convnet.compute_seconds > 0, 'convnet ran in the earlier tests');
  t.true(Number(convnet.weight_hits) + Number(convnet.weight_misses) > 0);
  const misses = Number(convnet.weight_misses);
  await server.client.infer('convnet', [image(2)]);
  const after = /** @type {import('../../dist/client/control.js').ModelControlStatus} */ (of(await call('ModelControlStatus', { name: '', fresh: true }), 'convnet'));
  t.true(after.compute_seconds > convnet.compute_seconds, 'its compute seconds grow with each execution');
  t.is(Number(after.weight_misses) + Number(after.weight_hits), Number(convnet.weight_misses) + Number(convnet.weight_hits) + 1);
  t.true(Number(after.weight_misses) >= misses);

  // Over wall-clock windows: a window that has run reports convnet's load over it and its bytes resident as it ended.
  const windowed = async () => /** @type {import('../../dist/client/control.js').ModelControlStatus} */ ((await call('ModelControlStatus', { name: 'convnet', window_seconds: 0.3, fresh: true })).models[0]);
  const opening = [performance.now()];
  await windowed(); // opens the first window
  opening.push(performance.now());
  await new Promise((resolve) => setTimeout(resolve, 350 - (Date.now() % 300))); // into the next
  const busy = Date.now();
  let sent = 0;
  for (; Date.now() - busy < 100; sent++) await server.client.infer('convnet', [image(2)]);
  await new Promise((resolve) => setTimeout(resolve, 350 - (Date.now() % 300)));
  const closing = [performance.now()];
  const w = await windowed();
  closing.push(performance.now());
  t.true(w.window_load > 0, `convnet's load over the window: ${w.window_load}`);
  // Its rows a second over the window: 2 rows a request, over the time between the node's two reads,
  // which lies between the calls' nearest and farthest ends as this test timed them; and its capacity
  // at full batches from the costs it learned, as the answer lists them.
  const [shortest, longest] = [(closing[0] - opening[1]) / 1000, (closing[1] - opening[0]) / 1000];
  t.true(w.window_rate >= (2 * sent) / longest - 1e-9 && w.window_rate <= (2 * sent) / shortest + 1e-9, `${w.window_rate} rows a second for ${sent} requests of 2 rows over ${shortest}-${longest} s`);
  const line = fullBatchRate(w.learned_cost.map((c) => ({ batchSize: c.batch_size, ms: c.ms })), w.max_batch_size);
  t.true(w.window_capacity > 0 && Math.abs(w.window_capacity - line) <= 1e-6 * line, `capacity ${w.window_capacity}, its learned costs say ${line}`);
  t.is(w.window_resident_bytes, after.resident_bytes);
  const bad = await grpcError(t, call('ModelControlStatus', { name: '', window_seconds: -1, fresh: true }));
  t.is(bad.code, grpc.status.INVALID_ARGUMENT);
  t.regex(bad.details, /window_seconds must be between 0 \(none\) and 3600, got -1/);

});

test.serial('ModelControlStatus answers from a snapshot of the devices, says how old, and names the node', async (t) => {
  const first = await call('ModelControlStatus', { name: 'convnet' });
  t.true(first.snapshot_age_seconds >= 0 && first.snapshot_age_seconds < 5, `age ${first.snapshot_age_seconds}`);
  // The default name, outside Kubernetes: the host name and the gRPC port (several nodes on one machine stay apart).
  t.true(first.node_name.endsWith(`:${server.address.split(':').pop()}`), first.node_name);
  const started = Number(first.started_unix_ms);
  t.true(started > Date.now() - 10 * 60_000 && started <= Date.now(), `started ${started}`);
  // Runs change the devices' state: a fresh read sees them at once, the snapshot within its period.
  const runsOf = (/** @type {typeof first} */ reply) => Number(reply.models[0].weight_hits) + Number(reply.models[0].weight_misses);
  const cost = (/** @type {typeof first} */ reply) => reply.models[0].learned_cost.find((l) => l.batch_size === 3)?.ms;
  const runs = runsOf(first);
  t.is(cost(first), undefined, 'no batch of 3 ran yet');
  await server.client.infer('convnet', [image(3)]);
  const fresh = await call('ModelControlStatus', { name: 'convnet', fresh: true });
  t.is(runsOf(fresh), runs + 1);
  t.true(/** @type {number} */ (cost(fresh)) > 0, 'the device\'s learned cost of the new batch size, read after the call');
  let seen = false;
  for (let i = 0; i < 50 && !seen; i++) {
    seen = cost(await call('ModelControlStatus', { name: 'convnet' })) !== undefined;
    if (!seen) await new Promise((resolve) => setTimeout(resolve, 100));
  }
  t.true(seen, 'the snapshot shows it within 5 s');
});

test('a configured node_name is what the node reports; active_only answers the active models; the repository digest follows the index', async (t) => {
  const own = tempDir();
  t.teardown(own.cleanup);
  const repo = makeRepository(own.dir, { digits: path.join(ROOT, 'bundles', 'digits'), convnet: path.join(FIXTURES, 'models', 'convnet') });
  const node = await startServer({ model_repo: repo, node_name: 'rack2-node7' }, { root: own.dir });
  t.teardown(() => node.stop());
  const client = new ControlClient(node.address);
  t.teardown(() => client.close());
  const all = await client.call('ModelControlStatus', { name: '', fresh: true });
  t.is(all.node_name, 'rack2-node7');
  t.is(node.logs.find((l) => l.msg === 'serving')?.node, 'rack2-node7');
  t.deepEqual(all.models.map((m) => m.name), ['convnet', 'digits']);

  // active_only: the models with load or weights on a device; convnet ran, digits did not (nothing resident at start).
  await node.client.infer('convnet', [image(1)]);
  const active = await client.call('ModelControlStatus', { name: '', fresh: true, active_only: true });
  t.deepEqual(active.models.map((m) => m.name), ['convnet']);
  t.regex(active.repository_digest, /^[0-9a-f]{16}$/);
  t.is(active.repository_digest, all.repository_digest, 'the same models in the same states: the same digest');

  // The index changes (digits unloaded): so does the digest; back as it was, it is the same again.
  await node.client.call('RepositoryModelUnload', { model_name: 'digits' });
  const unloaded = await client.call('ModelControlStatus', { name: '', active_only: true });
  t.not(unloaded.repository_digest, all.repository_digest);
  await node.client.call('RepositoryModelLoad', { model_name: 'digits' });
  t.is((await client.call('ModelControlStatus', { name: '', active_only: true })).repository_digest, all.repository_digest);
});

test('a versioned report: the whole at first, then only the rows that changed and the models that left, published once per window', async (t) => {
  const own = tempDir();
  t.teardown(own.cleanup);
  const repo = makeRepository(own.dir, { digits: path.join(ROOT, 'bundles', 'digits'), convnet: path.join(FIXTURES, 'models', 'convnet') });
  const node = await startServer({ model_repo: repo }, { root: own.dir });
  t.teardown(() => node.stop());
  const client = new ControlClient(node.address);
  t.teardown(() => client.close());
  const WINDOW_S = 1;
  const read = (/** @type {string} */ since) => client.call('ModelControlStatus', { name: '', window_seconds: WINDOW_S, active_only: true, versioned: true, since_version: since });
  // Just after the next window boundary: a read there sees the window that just closed.
  const nextWindow = async () => {
    const ms = WINDOW_S * 1000;
    await new Promise((resolve) => setTimeout(resolve, ms - (Date.now() % ms) + 150));
  };

  await read('0'); // the node's first window: its counters taken, nothing to measure against yet
  await node.client.infer('convnet', [image(2)]);
  await nextWindow();
  const whole = await read('0');
  const started = Number(whole.started_unix_ms);
  t.false(whole.changes_only, 'no version named: the whole report');
  t.true(Number(whole.report_version) >= started, `versions start at the process's start (${whole.report_version} against ${started})`);
  t.deepEqual(whole.models.map((m) => m.name), ['convnet'], 'the active models only');
  t.true(whole.models[0].window_load > 0, 'it ran over the window');

  // Within the same window: nothing new since the version just given.
  const same = await read(whole.report_version);
  t.true(same.changes_only);
  if (same.report_version === whole.report_version) t.deepEqual(same.models, [], 'the same window: no row changed');

  // Idle for two windows: its load falls to 0 (a change), then stays (no change), its weights resident throughout.
  await nextWindow();
  await nextWindow();
  const idle = await read(whole.report_version);
  t.true(idle.changes_only);
  t.deepEqual(idle.models.map((m) => [m.name, m.window_load]), [['convnet', 0]], 'its row changed: no load now');
  t.deepEqual(idle.gone, []);
  await nextWindow();
  const calm = await read(idle.report_version);
  t.deepEqual([calm.changes_only, calm.models, calm.gone], [true, [], []], 'nothing changed: nothing sent');
  t.is(calm.report_version, idle.report_version, 'and the version stays');

  // Its weights leave the device: it leaves the report, named in gone.
  await node.client.call('RepositoryModelUnload', { model_name: 'convnet' });
  await nextWindow();
  await nextWindow();
  const left = await read(calm.report_version);
  t.true(left.changes_only);
  t.deepEqual(left.gone, ['convnet'], `gone once unloaded: ${JSON.stringify(left.models.map((m) => [m.name, m.state]))}`);

  // Another process's version (below this one's first), or one never given: the whole report.
  t.false((await read('1')).changes_only);
  t.false((await read(String(Number(left.report_version) + 1000))).changes_only);
  // Without versioned, no version: the answer as it always was.
  const plain = await client.call('ModelControlStatus', { name: '', window_seconds: WINDOW_S, active_only: true });
  t.is(plain.report_version, '0');
});

/**
 * A status stream's replies as they come, and how it ended.
 * @param {ControlClient} client
 * @param {number} windowSeconds
 */
function watch(client, windowSeconds, since = '0') {
  const stream = client.watchStatus({ name: '', window_seconds: windowSeconds, active_only: true, versioned: true, since_version: since });
  /** @type {(import('../../dist/client/control.js').ModelControlStatusReply & { atMs: number })[]} */
  const replies = [];
  stream.on('data', (reply) => replies.push({ ...reply, atMs: Date.now() }));
  /** @type {Promise<string>} how it ended: 'end', or the error's status name */
  const ended = new Promise((resolve) => {
    stream.on('error', (/** @type {grpc.ServiceError} */ err) => resolve(grpc.status[err.code]));
    stream.on('end', () => resolve('end'));
  });
  /** Resolves once a reply satisfies `test` (checking those already in), or fails after `ms`. */
  const reply = async (/** @type {(r: (typeof replies)[number]) => boolean} */ test, ms = 8_000) => {
    const deadline = Date.now() + ms;
    for (;;) {
      const found = replies.find(test);
      if (found) return found;
      if (Date.now() > deadline) throw new Error(`no such reply in ${ms} ms: ${JSON.stringify(replies.map((r) => [r.changes_only, r.report_version, r.models.map((m) => [m.name, m.window_load])]))}`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  };
  return { stream, replies, ended, reply };
}

test('the status stream (WatchModelControlStatus): the whole report at once, then what changed at each window, from the main thread or an edge thread; it ends with the node', async (t) => {
  const own = tempDir();
  t.teardown(own.cleanup);
  const repo = makeRepository(own.dir, { convnet: path.join(FIXTURES, 'models', 'convnet') });
  for (const edges of [0, 2]) {
    const node = await startServer({ model_repo: repo, global: { endpoints: { edge_threads: edges } } }, { root: own.dir });
    t.teardown(() => node.stop());
    const client = new ControlClient(node.address);
    t.teardown(() => client.close());
    const WINDOW_S = 0.5;

    // Only the versioned report of every model streams.
    const plain = client.watchStatus({ name: '', window_seconds: WINDOW_S, active_only: true });
    const refused = await new Promise((resolve) => plain.on('error', resolve));
    t.is(/** @type {grpc.ServiceError} */ (refused).code, grpc.status.INVALID_ARGUMENT, `edges ${edges}`);
    t.regex(/** @type {grpc.ServiceError} */ (refused).details, /versioned and active_only/);
    // Bytes that are no ModelControlStatusRequest: refused as undecodable, and the node goes on serving.
    const raw = new grpc.Client(node.address, grpc.credentials.createInsecure());
    t.teardown(() => raw.close());
    const garbage = raw.makeServerStreamRequest('/stowage.control.ModelControl/WatchModelControlStatus', (/** @type {Buffer} */ b) => b, (/** @type {Buffer} */ b) => b, Buffer.from([0x0a, 0xff, 0xff]), new grpc.Metadata(), {});
    const undecodable = /** @type {grpc.ServiceError} */ (await new Promise((resolve) => garbage.on('error', resolve)));
    t.is(undecodable.code, grpc.status.INVALID_ARGUMENT, `edges ${edges}: ${undecodable.details}`);

    const s = watch(client, WINDOW_S);
    const first = await s.reply(() => true, 3_000);
    t.false(first.changes_only, 'the first answer is the whole report');
    const end = Number(first.window_end_unix_ms);
    t.true(end % (WINDOW_S * 1000) === 0 && end <= first.atMs && end > first.atMs - 2 * WINDOW_S * 1000, `the window it is over ended at a boundary just before (${end}, answered at ${first.atMs})`);
    t.true(Number(first.report_version) >= Number(first.started_unix_ms));
    await node.client.infer('convnet', [image(2)]);
    const busy = await s.reply((r) => r.models.some((m) => m.name === 'convnet' && m.window_load > 0));
    t.true(busy.changes_only, 'later answers are what changed');
    // Idle: its load falls to 0 (a change), then answers say nothing changed, at the same version, one per window.
    const idle = await s.reply((r) => r.atMs > busy.atMs && r.models.some((m) => m.name === 'convnet' && m.window_load === 0));
    const calm = await s.reply((r) => r.atMs > idle.atMs + 1_000);
    const calmOnes = s.replies.filter((r) => r.atMs > idle.atMs);
    t.true(calmOnes.every((r) => r.changes_only && r.models.length === 0 && r.report_version === idle.report_version), 'nothing changed: empty answers, the version kept');
    t.true(calmOnes.length >= 2 && calmOnes.length <= 6, `one answer per window (${calmOnes.length} in ${calm.atMs - idle.atMs} ms)`);

    // A stream opened since a version gets only what changed since.
    const since = watch(client, WINDOW_S, String(idle.report_version));
    const resumed = await since.reply(() => true, 3_000);
    t.true(resumed.changes_only);
    t.deepEqual(resumed.models, []);
    since.stream.cancel();

    // Stopping the node ends the stream (it does not hold the shutdown).
    const stopping = Date.now();
    await node.stop();
    t.is(await s.ended, 'end', `edges ${edges}`);
    t.true(Date.now() - stopping < 5_000, `stopped in ${Date.now() - stopping} ms`);
  }
});

test('status streams past endpoints.max_status_streams are refused RESOURCE_EXHAUSTED, naming the cap; one closed frees its place', async (t) => {
  const own = tempDir();
  t.teardown(own.cleanup);
  const repo = makeRepository(own.dir, { digits: path.join(ROOT, 'bundles', 'digits') });
  const node = await startServer({ model_repo: repo, global: { endpoints: { edge_threads: 0, max_status_streams: 2 } } }, { root: own.dir });
  t.teardown(() => node.stop());
  const client = new ControlClient(node.address);
  t.teardown(() => client.close());
  const held = [watch(client, 0.5), watch(client, 0.5)];
  for (const s of held) await s.reply(() => true, 3_000);
  const third = client.watchStatus({ name: '', window_seconds: 0.5, active_only: true, versioned: true, since_version: '0' });
  const refused = /** @type {grpc.ServiceError} */ (await new Promise((resolve) => third.on('error', resolve)));
  t.is(refused.code, grpc.status.RESOURCE_EXHAUSTED);
  t.regex(refused.details, /2 status streams open \(endpoints\.max_status_streams = 2\)/);
  // The streams held go on answering; one cancelled gives its place to the next.
  const before = held[0].replies.length;
  await held[0].reply((r) => held[0].replies.indexOf(r) >= before, 3_000);
  held[1].stream.cancel();
  await held[1].ended;
  let next;
  for (const deadline = Date.now() + 5_000; ;) {
    // The server sees the cancel a moment after the client does.
    const s = watch(client, 0.5);
    if ((await Promise.race([s.reply(() => true, 3_000).then(() => 'answered', () => 'silent'), s.ended])) === 'answered') {
      next = s;
      break;
    }
    if (Date.now() > deadline) break;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  t.truthy(next, 'a stream opened after one was cancelled is answered');
  next?.stream.cancel();
  held[0].stream.cancel();
});

test('PrefetchModel brings a model\'s weights onto the device before any call', async (t) => {
  const own = tempDir();
  t.teardown(own.cleanup);
  const repo = makeRepository(own.dir, { digits: path.join(ROOT, 'bundles', 'digits') });
  const fresh = await startServer({ model_repo: repo }, { root: own.dir });
  t.teardown(() => fresh.stop());
  const client = new ControlClient(fresh.address);
  t.teardown(() => client.close());
  const status = async () => (await client.call('ModelControlStatus', { name: 'digits', fresh: true })).models[0];
  t.is((await status()).resident_bytes, '0', 'loaded, never called: in host RAM only');
  const prefetched = await client.call('PrefetchModel', { name: 'digits' });
  t.true(Number(prefetched.resident_bytes) > 0, `resident after PrefetchModel: ${prefetched.resident_bytes}`);
  t.is((await status()).resident_bytes, prefetched.resident_bytes);
  t.is((await status()).weight_misses, '1', 'one load, counted as the cold load it is');
  await fresh.client.infer('digits', [tensor('image', 'FP32', [1, 8, 8], new Float32Array(64))], { outputs: ['label'] });
  t.is((await status()).weight_hits, '1', 'the first call finds the weights there');
  const missing = await grpcError(t, client.call('PrefetchModel', { name: 'ghost' }));
  t.is(missing.code, grpc.status.NOT_FOUND);
});

test('with the weight cache off, every model is resident and residency cannot change', async (t) => {
  const own = tempDir();
  t.teardown(own.cleanup);
  const repo = makeRepository(own.dir, { digits: path.join(ROOT, 'bundles', 'digits') });
  const off = await startServer({ model_repo: repo, global: { runtime: { weight_cache_fraction: 0 } } }, { root: own.dir });
  t.teardown(() => off.stop());
  const client = new ControlClient(off.address);
  t.teardown(() => client.close());
  t.is((await client.call('ModelControlStatus', { name: 'digits', fresh: true })).models[0].residency, 'device');
  for (const refused of [client.call('SetModelResidency', { name: 'digits', residency: 'device' }), client.call('CompactMemory', { device: 0 })]) {
    const err = await grpcError(t, refused);
    t.is(err.code, grpc.status.INVALID_ARGUMENT);
    t.regex(err.details, /needs the on-demand weight cache, which is off \(runtime.weight_cache_fraction is 0\)/);
  }
});
