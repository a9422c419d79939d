// Device supervision on the real server: what a device serves after its worker died and its
// replacement could not load everything again, an unload while a device restarts, a device that
// dies with an unload pending on it, a second crash behind the first, and a replacement that never
// starts. Faults are injected by files the device threads look for (STOWAGE_FAULT_DEVICE_EXIT: the
// thread exits before a batch or while it holds a load; STOWAGE_FAULT_DEVICE_HOLD_LOADS: loads wait
// while the file exists; STOWAGE_FAULT_DEVICE_NO_START: the next worker never says it started).
import { existsSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import test from 'ava';
import { status } from '@grpc/grpc-js';
import { InferenceClient } from '../../dist/client/client.js';
import { FIXTURES, makeRepository, metric, scrapeMetrics, startServer, tempDir } from '../helpers/server.js';
import { classify, DIGITS, referenceLabels } from '../helpers/digits.js';
import { grpcError } from '../helpers/errors.js';

const ECHO = path.join(FIXTURES, 'models', 'echo');
const NEGATE = path.join(FIXTURES, 'models', 'negate');

/**
 * A server on `devices` CPU devices over `bundles`, its faults armed by files in its temp dir.
 * @param {import('ava').ExecutionContext} t
 * @param {Record<string, string>} bundles
 * @param {{ devices?: number, edges?: number }} [options]
 */
async function faultyServer(t, bundles, { devices = 1, edges = 0 } = {}) {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const exit = path.join(temp.dir, 'device-exit');
  const hold = path.join(temp.dir, 'hold-loads');
  const noStart = path.join(temp.dir, 'no-start');
  const repo = makeRepository(temp.dir, bundles);
  const server = await startServer({ model_repo: repo, gpus: devices, global: { endpoints: { edge_threads: edges } } }, {
    root: temp.dir,
    env: { STOWAGE_FAULT_DEVICE_EXIT: exit, STOWAGE_FAULT_DEVICE_HOLD_LOADS: hold, STOWAGE_FAULT_DEVICE_NO_START: noStart, STOWAGE_FAULT_DEVICE_START_TIMEOUT_MS: String(START_TIMEOUT_MS) },
  });
  t.teardown(() => server.stop());
  return { server, exit, hold, noStart, cache: path.join(temp.dir, 'compile-cache') };
}

/** The device start timeout the faulty servers run with (STOWAGE_FAULT_DEVICE_START_TIMEOUT_MS): ample for a worker that starts. */
const START_TIMEOUT_MS = 5000;

/**
 * Arm the device exit and ask for digits until a device takes it (requests that fail meanwhile are
 * the crash's); resolves to the crash's log line.
 * @param {Awaited<ReturnType<typeof faultyServer>>} f
 */
async function crashADevice(f) {
  const crashes = f.server.logs.filter((l) => String(l.msg).startsWith('device actor crashed')).length;
  writeFileSync(f.exit, '');
  const crashed = f.server.waitForLogs((l) => String(l.msg).startsWith('device actor crashed'), crashes + 1);
  let done = false;
  void crashed.then(() => { done = true; });
  for (let i = 0; !done && existsSync(f.exit); i++) await f.server.client.infer('digits', [digitsTensor()], { outputs: ['label'] }).catch(() => undefined);
  await crashed;
  return f.server.logs.filter((l) => String(l.msg).startsWith('device actor crashed')).at(-1);
}

/** One held-out image, as `digits` takes it. */
function digitsTensor() {
  return { name: 'image', datatype: /** @type {const} */ ('FP32'), shape: [1, 8, 8], data: new Float32Array(64).fill(3) };
}

/**
 * The index entry of `model`.
 * @param {InferenceClient} client
 * @param {string} model
 */
async function indexEntry(client, model) {
  return (await client.call('RepositoryIndex', {})).models.find((m) => m.name === model);
}

/**
 * Ask for `count` digits from `clients` at once; resolves to the failures.
 * @param {InferenceClient[]} clients
 * @param {number[]} reference
 * @param {number} count
 */
async function ask(clients, reference, count) {
  /** @type {Error[]} */
  const failures = [];
  await Promise.all(clients.map(async (c, k) => {
    for (let i = k; i < count; i += clients.length) await classify(c, reference, i, 1 + (i % 3)).catch((err) => failures.push(err));
  }));
  return failures;
}

const routedTo = async (/** @type {number | undefined} */ adminPort, /** @type {number} */ device) =>
  metric(await scrapeMetrics(adminPort), 'stowage_requests_routed_total', `model="digits",device="${device}"`);

for (const edges of [0, 2]) {
  test(`two devices (edge_threads ${edges}): a device whose replacement worker could not load a model again gets none of its requests, and a reload brings it back`, async (t) => {
    const f = await faultyServer(t, { digits: DIGITS }, { devices: 2, edges });
    const clients = Array.from({ length: 4 }, () => new InferenceClient(f.server.address, { 'grpc.use_local_subchannel_pool': 1 }));
    t.teardown(() => clients.forEach((c) => c.close()));
    const reference = await referenceLabels(f.server.client);
    // Its compiled form gone from under the running server: a replacement worker cannot open it again.
    rmSync(f.cache, { recursive: true, force: true });
    const crash = await crashADevice(f);
    const restarted = await f.server.waitForLog((l) => typeof l.msg === 'string' && String(l.msg).startsWith('device actor restarted'));
    t.is(restarted.device, crash?.device);
    t.is(restarted.reloaded, 0);
    t.is(restarted.failed, 1);
    const lost = /** @type {number} */ (crash?.device);
    const other = 1 - lost;
    t.truthy(f.server.logs.find((l) => String(l.msg).startsWith(`model lost on device ${lost}`) && l.model === 'digits'));

    const before = [await routedTo(f.server.adminPort, lost), await routedTo(f.server.adminPort, other)];
    const failures = await ask(clients, reference, 200);
    t.deepEqual(failures.map((e) => e.message), [], 'no request fails on the device that lacks the model');
    const after = [await routedTo(f.server.adminPort, lost), await routedTo(f.server.adminPort, other)];
    t.is(after[0] - before[0], 0, 'none went to the device that lost it');
    t.is(after[1] - before[1], 200, 'the other device served them all');
    t.is((await indexEntry(f.server.client, 'digits'))?.state, 'READY');

    // A reload loads it on every device again (compiling it anew), and both serve it.
    await f.server.client.call('RepositoryModelLoad', { model_name: 'digits' });
    const again = await ask(clients, reference, 200);
    t.deepEqual(again.map((e) => e.message), []);
    t.true(await routedTo(f.server.adminPort, lost) > after[0], 'the device that lost it serves it again after the reload');
  });
}

test('one device: a model its replacement worker could not load again is not ready, saying why; a reload brings it back', async (t) => {
  const f = await faultyServer(t, { digits: DIGITS, echo: ECHO });
  const reference = await referenceLabels(f.server.client);
  rmSync(f.cache, { recursive: true, force: true });
  // echo's sessions open again from its compiled form too: both are lost.
  await crashADevice(f);
  const restarted = await f.server.waitForLog((l) => typeof l.msg === 'string' && String(l.msg).startsWith('device actor restarted'));
  t.is(restarted.failed, 2);
  await f.server.waitForLog((l) => String(l.msg).startsWith('model not ready: no device holds it any more') && l.model === 'digits');

  const entry = await indexEntry(f.server.client, 'digits');
  t.is(entry?.state, 'UNAVAILABLE');
  t.regex(entry?.reason ?? '', /no device holds it any more: its worker was replaced and could not load it again: .*; load it again with RepositoryModelLoad/);
  const err = await grpcError(t, classify(f.server.client, reference, 0));
  t.is(err.code, status.UNAVAILABLE);
  t.regex(err.details, /model "digits" is not ready \(state UNAVAILABLE\)/);
  t.notRegex(err.details, /digits#/, 'no instance key in what the client reads');

  await f.server.client.call('RepositoryModelLoad', { model_name: 'digits' });
  t.is((await indexEntry(f.server.client, 'digits'))?.state, 'READY');
  t.deepEqual(await classify(f.server.client, reference, 5), reference.slice(5, 7));
});

for (const devices of [1, 2]) {
  test(`${devices} device(s): a model unloaded while its device restarts is never loaded into a later worker`, async (t) => {
    const f = await faultyServer(t, { digits: DIGITS, echo: ECHO }, { devices });
    const reference = await referenceLabels(f.server.client);
    // The replacement's reloads wait until the file goes: the unload comes while they do.
    writeFileSync(f.hold, '');
    await crashADevice(f);
    const unloaded = f.server.client.call('RepositoryModelUnload', { model_name: 'echo' });
    await f.server.waitForLog((l) => String(l.msg).startsWith('model unloading') && l.model === 'echo');
    rmSync(f.hold);
    await unloaded;
    const first = await f.server.waitForLog((l) => l.msg === 'device actor restarted: its models are loaded again');
    t.is(first.reloaded, 2, 'the reloads posted before the unload ran');
    t.is((await indexEntry(f.server.client, 'echo'))?.state, 'UNAVAILABLE');

    // A second crash: the replacement loads only what is still served.
    await crashADevice(f);
    await f.server.waitForLogs((l) => l.msg === 'device actor restarted: its models are loaded again', 2);
    const second = f.server.logs.filter((l) => l.msg === 'device actor restarted: its models are loaded again').at(-1);
    t.is(second?.reloaded, 1, 'only digits was loaded into the next worker');
    // Every instance a device holds has a series here (its resident bytes, 0 when evicted).
    const held = Object.keys(await scrapeMetrics(f.server.adminPort)).filter((k) => k.startsWith('stowage_weight_cache_model_resident_bytes{'));
    t.is(held.filter((k) => k.includes('model="digits"')).length, devices, 'digits on every device');
    t.false(held.some((k) => k.includes('model="echo"')), 'echo is nowhere');
    t.deepEqual(await classify(f.server.client, reference, 1), reference.slice(1, 3));
  });
}

test('a device that dies with an unload pending on it: the unload succeeds (the instance is gone with the worker), and the model is unloaded', async (t) => {
  const f = await faultyServer(t, { digits: DIGITS, echo: ECHO, negate: NEGATE });
  const reference = await referenceLabels(f.server.client);
  // A reload of negate held in the worker; echo's unload waits behind it; then the worker dies.
  writeFileSync(f.hold, '');
  const reload = f.server.client.call('RepositoryModelLoad', { model_name: 'negate' }).then(() => null, (/** @type {Error} */ err) => err);
  await f.server.waitForLog((l) => l.msg === 'fault injection: a load is held');
  const unloaded = f.server.client.call('RepositoryModelUnload', { model_name: 'echo' }).then(() => null, (/** @type {Error} */ err) => err);
  await f.server.waitForLog((l) => String(l.msg).startsWith('model unloading') && l.model === 'echo');
  await new Promise((resolve) => setTimeout(resolve, 200)); // the unload reaches the worker, behind the held load
  writeFileSync(f.exit, '');
  await f.server.waitForLog((l) => String(l.msg).startsWith('device actor crashed'));
  rmSync(f.hold);
  t.is(await unloaded, null, 'RepositoryModelUnload answered OK');
  t.is((await indexEntry(f.server.client, 'echo'))?.state, 'UNAVAILABLE');
  t.is((await indexEntry(f.server.client, 'echo'))?.reason, 'unloaded');
  // The reload died with the worker; the version loaded before keeps serving.
  t.truthy(await reload, 'the reload that was running failed');
  const restarted = await f.server.waitForLog((l) => typeof l.msg === 'string' && String(l.msg).startsWith('device actor restarted'));
  t.is(restarted.reloaded, 2, 'digits and negate, not echo');
  t.is((await indexEntry(f.server.client, 'negate'))?.state, 'READY');
  t.deepEqual(await classify(f.server.client, reference, 2), reference.slice(2, 4));
});

test('a replacement worker that never starts: what was sent to it fails UNAVAILABLE at its start timeout, not at its own deadline; the next replacement serves', async (t) => {
  const f = await faultyServer(t, { digits: DIGITS });
  const reference = await referenceLabels(f.server.client);
  writeFileSync(f.noStart, ''); // the next worker to start (the crash's replacement) takes it
  await crashADevice(f);
  const started = Date.now();
  const err = await grpcError(t, f.server.client.infer('digits', [digitsTensor()], { outputs: ['label'], timeoutMs: 120_000 }));
  const tookMs = Date.now() - started;
  t.is(err.code, status.UNAVAILABLE);
  t.regex(err.details, new RegExp(`device 0 is unavailable: its worker did not start within ${START_TIMEOUT_MS} ms`));
  t.true(tookMs < 60_000, `failed after ${tookMs} ms: at the start timeout, not the request's deadline of 120 s`);
  t.false(existsSync(f.noStart), 'the replacement took the fault');
  await f.server.waitForLog((l) => l.msg === 'device actor restarted: its models are loaded again');
  t.deepEqual(await classify(f.server.client, reference, 4), reference.slice(4, 6), 'the next replacement serves');
});
