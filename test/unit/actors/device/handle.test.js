// The main-thread handle on a device actor, with the real worker (real ONNX Runtime) and with
// scripted stand-ins that crash, hang or fail to start.
import { readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import test from 'ava';
import { pino } from 'pino';
import { DeviceHandle, DeviceState } from '../../../../dist/actors/device/handle.js';
import { nowMs } from '../../../../dist/shared/timers.js';
import { instanceKey } from '../../../../dist/shared/model-spec.js';
import { ModelPolicies } from '../../../../dist/node/model-policies.js';
import { Devices } from '../../../../dist/node/devices.js';
import { readManifest } from '../../../../dist/bundle/manifest.js';
import { FIXTURES, ROOT, makeRepository, tempDir } from '../../../helpers/server.js';
import { modelSpec } from '../../../helpers/specs.js';
import { stowageError } from '../../../helpers/errors.js';

const logger = pino({ level: 'silent' });
const scripted = new URL('../../../fixtures/workers/scripted-device.js', import.meta.url);
const heldout = JSON.parse(readFileSync(path.join(FIXTURES, 'digits_heldout.json'), 'utf8'));
const spec = (/** @type {string} */ name) => modelSpec({ name });
/** @returns {import('../../../../dist/shared/channels/inference.js').WireTensor} */
const tensor = (/** @type {number[]} */ values) => ({ name: 'x', datatype: 'FP32', shape: [values.length], data: new Uint8Array(Float32Array.from(values).buffer) });
const inSeconds = (/** @type {number} */ s) => nowMs() + s * 1000;
/**
 * A request for `instance` (`name#generation`), answered with tensors.
 * @param {string} instance
 * @param {{ inputs?: import('../../../../dist/shared/channels/inference.js').WireTensor[], outputs?: string[], deadlineMs?: number }} [options]
 * @returns {import('../../../../dist/shared/channels/inference.js').InferenceRequest}
 */
function request(instance, { inputs = [], outputs = [], deadlineMs = inSeconds(30) } = {}) {
  const [name, generation] = instance.split('#');
  return { instance: instanceKey(name, Number(generation)), inputs, rows: inputs[0]?.shape[0] ?? 1, outputs, outputRegions: outputs.map(() => null), frame: null, deadlineMs };
}
const key = (/** @type {string} */ instance) => request(instance).instance;
/** @type {import('../../../../dist/shared/channels/device.js').DeviceScheduling} */
const scheduler = { discipline: 'fair', prefer_resident: true, ema_halflife_seconds: 30, max_queue_depth: 64, priority_levels: 3, default_priority: 2, lower_priority_share: 0.1, dispatch_timeout_seconds: 30, compaction_interval: 0 };
const noPolicies = () => new ModelPolicies([{ deviceId: 0, models: {} }]);

/**
 * A device actor for this test, stopped with it.
 * @param {import('ava').ExecutionContext} t
 * @param {URL} [workerUrl] a stand-in worker; the real one by default
 */
async function actor(t, workerUrl, policies = noPolicies()) {
  const a = await DeviceHandle.create({ deviceId: 0, intraOpThreads: 1, scheduler, policies, weights: null, logger, workerUrl });
  t.teardown(() => a.stop());
  return a;
}

test('the real worker loads a bundle and runs it; input buffers are transferred, not copied', async (t) => {
  const device = await actor(t);
  const digits = readManifest(path.join(ROOT, 'bundles', 'digits'));
  const { loadMs } = await device.load(digits, key('digits#1'), null);
  t.true(loadMs > 0);
  /** @type {import('../../../../dist/shared/channels/inference.js').WireTensor} */
  const image = { name: 'image', datatype: 'FP32', shape: [2, 8, 8], data: new Uint8Array(Float32Array.from(heldout.images.slice(0, 2).flat()).buffer) };
  const { outputs, timing } = await device.infer(request('digits#1', { inputs: [image], outputs: ['label'], deadlineMs: Infinity }));
  t.is(image.data.byteLength, 0, 'the caller\'s buffer was detached by the transfer');
  t.deepEqual([...new BigInt64Array(outputs[0].data.buffer, outputs[0].data.byteOffset, 2)].map(Number), heldout.labels.slice(0, 2));
  t.is(timing.executedBatchSize, 2);
  t.is(timing.batchRows, 2);
  t.is(timing.requests, 1);
  t.true(timing.computeInferNs > 0);
  t.is(device.inflight, 0);
});

test('the real worker refuses a bundle whose manifest disagrees with the graph', async (t) => {
  const device = await actor(t);
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const manifest = readFileSync(path.join(ROOT, 'bundles', 'digits', 'manifest.yaml'), 'utf8').replace('name: "digits"', '').replace('k: 10', 'k: 11');
  const repo = makeRepository(temp.dir, {}, { 'wrong/manifest.yaml': manifest, 'wrong/model.onnx': readFileSync(path.join(ROOT, 'bundles', 'digits', 'model.onnx')) });
  const err = await stowageError(t, device.load(readManifest(path.join(repo, 'wrong')), key('wrong#1'), null));
  t.is(err.code, 'STOWAGE_BUNDLE_INVALID');
  t.regex(err.message, /output "logits": axis 'k' is 11 in the manifest, 10 in the graph/);
  const infer = await stowageError(t, device.infer(request('wrong#1', { deadlineMs: inSeconds(5) })));
  t.is(infer.code, 'STOWAGE_MODEL_NOT_READY');
});

test('a crash fails every in-flight request with UNAVAILABLE, and the replacement serves the models again', async (t) => {
  const device = await actor(t, scripted);
  await device.load(spec('echo'), key('echo#1'), null);
  const waiting = device.infer(request('hang#1'));
  const crashing = device.infer(request('crash#1'));
  for (const p of [waiting, crashing]) {
    const err = await stowageError(t, p);
    t.is(err.code, 'STOWAGE_DEVICE_UNAVAILABLE');
    t.is(err.status, 14);
    t.regex(err.message, /device 0 is unavailable: its worker exited \(code 3\)/);
  }
  t.is(device.state, DeviceState.RESTARTING);
  t.is(device.inflight, 1, 'the reload of "echo" is already queued in the new worker');
  // The request waits in the handle's door until the new worker has loaded "echo" again.
  const { outputs } = await device.infer(request('echo#1', { inputs: [tensor([1, 2])], outputs: ['x'] }));
  t.deepEqual([...new Float32Array(outputs[0].data.buffer)], [1, 2]);
  t.is(device.state, DeviceState.READY);
  t.is(device.inflight, 0);
});

test('after a crash the reloads carry each model\'s policy as the owner has it then', async (t) => {
  // The node file gives echo weight 2 on this worker; SetModelPolicy then makes it 3.
  const policies = new ModelPolicies([{ deviceId: 0, models: { echo: { weight: 2 } } }]);
  const device = await actor(t, scripted, policies);
  await device.load(spec('echo'), key('echo#1'), null);
  t.deepEqual((await device.status()).map((i) => [i.instance, i.weight]), [['echo#1', 2]]);
  policies.change('echo', { weight: 3 });
  await device.applyPolicy('echo');
  t.deepEqual((await device.status()).map((i) => [i.instance, i.weight]), [['echo#1', 3]]);
  // A change made while no worker is listening still reaches the replacement, through the reload.
  policies.change('echo', { weight: 5 });
  await t.throwsAsync(device.infer(request('crash#1')));
  t.deepEqual((await device.status()).map((i) => [i.instance, i.weight]), [['echo#1', 5]]);
});

test('a worker that keeps crashing is given up on, and later calls fail at once', async (t) => {
  const device = await actor(t, scripted);
  for (let i = 0; i < 3; i++) {
    const err = await stowageError(t, device.infer(request('crash#1')));
    t.is(err.code, 'STOWAGE_DEVICE_UNAVAILABLE');
  }
  t.is(device.state, DeviceState.DEAD);
  const err = await stowageError(t, device.infer(request('echo#1')));
  t.regex(err.message, /it has stopped/);
});

test('a request settles at its deadline even if the worker never answers', async (t) => {
  const device = await actor(t, scripted);
  const err = await stowageError(t, device.infer(request('hang#1', { deadlineMs: inSeconds(0.05) })));
  t.is(err.code, 'STOWAGE_DEADLINE_EXCEEDED');
  t.is(device.inflight, 0);
});

test('an aborted request is dropped and settles at once', async (t) => {
  const device = await actor(t, scripted);
  const abort = new AbortController();
  const pending = device.infer(request('hang#1'), abort.signal);
  t.is(device.inflight, 1);
  abort.abort();
  const err = await stowageError(t, pending);
  t.regex(err.message, /cancelled/);
  t.is(device.inflight, 0);
});

test('a worker that dies while starting makes create() fail with the reason', async (t) => {
  const err = await stowageError(t, DeviceHandle.create({ deviceId: 4, intraOpThreads: 1, scheduler, policies: noPolicies(), weights: null, logger, workerUrl: new URL('../../../fixtures/workers/broken-device.js', import.meta.url) }));
  t.is(err.code, 'STOWAGE_DEVICE_UNAVAILABLE');
  t.regex(err.message, /device 4 .*cannot open the device/);
});

test('stop() answers pending calls with UNAVAILABLE', async (t) => {
  const device = await DeviceHandle.create({ deviceId: 0, intraOpThreads: 1, scheduler, policies: noPolicies(), weights: null, logger, workerUrl: scripted });
  const pending = device.infer(request('hang#1'));
  await device.stop();
  const err = await stowageError(t, pending);
  t.regex(err.message, /the server is stopping/);
  t.is(device.state, DeviceState.DEAD);
});

/**
 * A scripted device actor numbered `deviceId` (100 and up: its replacements misbehave, as
 * scripted-device.js says), with the handle's own callbacks recorded: the instances it lost, and
 * each time it said it serves again.
 * @param {import('ava').ExecutionContext} t
 * @param {number} deviceId
 * @param {number} [startTimeoutMs]
 */
async function watched(t, deviceId, startTimeoutMs) {
  /** @type {{ instance: string, why: string }[]} */
  const lost = [];
  const serving = { count: 0 };
  const device = await DeviceHandle.create({ deviceId, intraOpThreads: 1, scheduler, policies: noPolicies(), weights: null, logger, workerUrl: scripted,
    startTimeoutMs, onLost: (_d, instance, why) => lost.push({ instance, why }), onServing: () => serving.count++ });
  t.teardown(async () => {
    await device.stop();
    rmSync(path.join(os.tmpdir(), `stowage-scripted-device-${process.pid}-${deviceId}`), { force: true });
  });
  return { device, lost, serving };
}

test('a replacement worker that never starts fails what was sent to it as soon as its start times out, not at each call\'s own timer', async (t) => {
  // 3 s to start: ample for the first worker even on a loaded machine; the replacement never starts.
  const { device } = await watched(t, 101, 3000);
  await device.load(spec('nostart'), key('nostart#1'), null);
  await t.throwsAsync(device.infer(request('crash#1')));
  // Posted to the replacement, behind its reload; its deadline is a minute off.
  const started = Date.now();
  const err = await stowageError(t, device.infer(request('nostart#1', { deadlineMs: inSeconds(60) })));
  t.is(err.code, 'STOWAGE_DEVICE_UNAVAILABLE');
  t.regex(err.message, /device 101 is unavailable: its worker did not start within 3000 ms/);
  t.true(Date.now() - started < 30_000, `failed after ${Date.now() - started} ms, at the start's timeout, not the request's deadline`);
});

test('a model the replacement worker cannot load again is lost there: said once, no longer held, never reloaded', async (t) => {
  const { device, lost, serving } = await watched(t, 102);
  await device.load(spec('noreload'), key('noreload#1'), null);
  await device.load(spec('echo'), key('echo#1'), null);
  t.true(device.holds(key('noreload#1')));
  await t.throwsAsync(device.infer(request('crash#1')));
  while (serving.count === 0) await new Promise((resolve) => setTimeout(resolve, 10));
  t.deepEqual(lost.map((l) => l.instance), ['noreload#1']);
  t.regex(lost[0].why, /could not load it again: noreload: its compiled files are gone/);
  t.false(device.holds(key('noreload#1')));
  t.true(device.holds(key('echo#1')));
  t.true(device.settled);
  // A second crash reloads only what it holds.
  await t.throwsAsync(device.infer(request('crash#1')));
  t.deepEqual((await device.status()).map((i) => i.instance), ['echo#1']);
  t.is(lost.length, 1);
});

test('two crashes back to back: the first replacement\'s end does not open edge doors while the second still reloads', async (t) => {
  const { device, serving } = await watched(t, 103);
  await device.load(spec('slowreload'), key('slowreload#1'), null);
  await t.throwsAsync(device.infer(request('crash#1')));
  // The first replacement dies while its slow reload runs (a request would wait for the reload in
  // the handle's door: a control call goes at once).
  await t.throwsAsync(device.load(spec('crash'), key('crash#2'), null));
  t.is(device.state, DeviceState.RESTARTING);
  await new Promise((resolve) => setTimeout(resolve, 150));
  t.false(device.settled, 'the second replacement is still reloading');
  t.is(device.openEdgeDoor(), null, 'no edge door before its models are loaded');
  t.is(serving.count, 0);
  while (serving.count === 0) await new Promise((resolve) => setTimeout(resolve, 10));
  t.is(serving.count, 1, 'said once, for the replacement that serves');
  const door = device.openEdgeDoor();
  t.truthy(door);
  t.true((door?.link ?? 0) > 3, 'numbered after the handle\'s own doors, one per worker (links 1 to 3)');
  door?.port.close();
  t.deepEqual((await device.status()).map((i) => i.instance), ['slowreload#1']);
});

test('an unload whose worker dies before it answers succeeds: the instance went with the worker and is not reloaded', async (t) => {
  const { device } = await watched(t, 104);
  await device.load(spec('hangunload'), key('hang#1'), null);
  await device.load(spec('echo'), key('echo#1'), null);
  const running = device.infer(request('hang#1'));
  const unloaded = device.unload(key('hang#1'));
  const crash = device.infer(request('crash#1'));
  await t.throwsAsync(crash);
  await t.throwsAsync(running);
  await t.notThrowsAsync(unloaded);
  t.deepEqual((await device.status()).map((i) => i.instance), ['echo#1']);
});

test('a request whose client went before it was handed over is not sent to the device', async (t) => {
  const device = await actor(t, scripted);
  const abort = new AbortController();
  abort.abort();
  const err = await stowageError(t, device.infer(request('hang#1'), abort.signal));
  t.is(err.code, 'STOWAGE_CANCELLED');
  t.is(device.inflight, 0);
});

test('a poisoned context takes out every device actor on its GPU: what they had pending fails saying why, and later calls are refused; other GPUs serve on', async (t) => {
  /** @type {[number, number, string][]} */
  const told = [];
  const onGpu = (/** @type {number} */ deviceId, /** @type {number} */ ordinal) => DeviceHandle.create({
    deviceId, intraOpThreads: 1, scheduler, policies: noPolicies(), weights: null, logger, workerUrl: scripted,
    cuda: { ordinal, providerOptions: {}, libraryDirs: [], graphs: false, sharedArena: false },
    onOutOfService: (id, reason, cudaError) => told.push([id, cudaError, reason]),
  });
  const handles = await Promise.all([onGpu(110, 0), onGpu(111, 0), onGpu(112, 1)]);
  t.teardown(() => Promise.all(handles.map((h) => h.stop())));
  const pool = new Devices(handles, { mode: 'round_robin', policies: noPolicies() });
  const pending = handles[1].infer(request('hang#1'));
  const taken = pool.outOfService(110, 'CUDA error 700 in a run: an illegal memory access was encountered', 700);
  t.deepEqual(taken, [111], 'the other actor on GPU 0');
  const err = await stowageError(t, pending);
  t.is(err.code, 'STOWAGE_DEVICE_UNAVAILABLE');
  t.regex(err.message, /device 111 is unavailable: it is out of service: GPU 0's context is poisoned \(device 110: CUDA error 700 in a run/);
  t.is(handles[1].state, DeviceState.OUT_OF_SERVICE);
  t.deepEqual(told.map(([id, code]) => [id, code]), [[111, 700]]);
  t.regex((await stowageError(t, handles[1].infer(request('echo#1')))).message, /out of service/);
  t.true(handles[2].serving, 'GPU 1\'s actor serves on');
  t.deepEqual(pool.outOfService(112, 'x', 700), [], 'alone on its GPU');
});
