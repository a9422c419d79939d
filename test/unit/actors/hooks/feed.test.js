// A preprocess hook feeding the device directly (HookFeed): the real hook pool (Piscina threads
// running bundles/digits_u8/model.js) and the real device worker (ONNX Runtime). The hook thread
// sends the preprocessed tensors through its door to the device; the main thread gets a door at
// most once per hook thread and worker, never the tensors, and the device answers the request.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { MessagePort } from 'node:worker_threads';
import test from 'ava';
import { pino } from 'pino';
import { DeviceHandle } from '../../../../dist/actors/device/handle.js';
import { HookPool } from '../../../../dist/actors/hooks/handle.js';
import { ModelPolicies } from '../../../../dist/node/model-policies.js';
import { readManifest } from '../../../../dist/bundle/manifest.js';
import { instanceKey } from '../../../../dist/shared/model-spec.js';
import { FIXTURES, ROOT } from '../../../helpers/server.js';
import { stowageError } from '../../../helpers/errors.js';
import { present } from '../../../helpers/checks.js';

const heldout = JSON.parse(readFileSync(path.join(FIXTURES, 'digits_heldout.json'), 'utf8'));
const BUNDLE = path.join(ROOT, 'bundles', 'digits_u8');
const spec = readManifest(BUNDLE);
const context = { model: 'digits_u8', requestId: '', parameters: {} };
/** A hook call's bound: a request never cancelled, with no deadline. */
const UNBOUND = { signal: new AbortController().signal, deadlineMs: Infinity };
const instance = instanceKey('digits_u8', 1);
/**
 * A request for digits_u8's labels whose inputs a hook will send.
 * @param {number} rows
 * @returns {import('../../../../dist/shared/channels/inference.js').InferenceRequest}
 */
const request = (rows) => ({ instance, inputs: [], rows, outputs: ['label'], outputRegions: [null], frame: null, deadlineMs: Infinity });
/** @type {import('../../../../dist/shared/channels/device.js').DeviceScheduling} */
const scheduler = { discipline: 'fair', prefer_resident: true, ema_halflife_seconds: 30, max_queue_depth: 64, priority_levels: 3, default_priority: 2, lower_priority_share: 0.1, dispatch_timeout_seconds: 30, compaction_interval: 0 };

/**
 * Held-out rows `from`.. as the raw 8-bit images digits_u8's preprocess scales.
 * @returns {import('../../../../dist/shared/channels/inference.js').WireTensor}
 */
function image(/** @type {number} */ from, /** @type {number} */ rows) {
  /** @type {number[][]} */
  const images = heldout.images;
  const pixels = Uint8Array.from(images.slice(from, from + rows).flat(), (v) => Math.round((v * 255) / 16));
  return { name: 'image', datatype: 'UINT8', shape: [rows, 8, 8], data: pixels };
}

/** @param {import('ava').ExecutionContext} t */
async function setup(t) {
  const device = await DeviceHandle.create({ deviceId: 0, intraOpThreads: 1, scheduler, policies: new ModelPolicies([{ deviceId: 0, models: {} }]), weights: null, logger: pino({ level: 'silent' }) });
  t.teardown(() => device.stop());
  await device.load(spec, instance, null);
  const pool = new HookPool({ threads: 2, timeoutMs: 5000, importTimeoutMs: 10_000, maxHeapMib: 0 });
  t.teardown(() => pool.close());
  const hooks = await pool.describe('digits_u8', path.join(BUNDLE, 'model.js'), '1');
  /** @type {MessagePort[]} */
  const doors = [];
  /**
   * One request the way the pipeline runs it: handed to the device without inputs, then the hook feeds it.
   * @param {import('../../../../dist/shared/channels/inference.js').WireTensor} tensor
   * @param {{ signal?: AbortSignal, hookTensor?: import('../../../../dist/shared/channels/inference.js').WireTensor }} [options]
   */
  const infer = async (tensor, { signal, hookTensor = tensor } = {}) => {
    /** @type {import('../../../../dist/shared/channels/device.js').HookFeedTarget | undefined} */
    let target;
    const executed = device.infer(request(tensor.shape[0]), signal, (where) => { target = where; });
    executed.catch(() => {});
    const to = present(target, 'where the hook sends the inputs');
    const door = await pool.preprocessInto('digits_u8', hooks, [hookTensor], context, { ...to, inputs: spec.inputs, rows: tensor.shape[0] }, UNBOUND);
    if (door !== undefined) {
      t.true(door instanceof MessagePort, 'a hook thread hands the main thread a door, never tensors');
      doors.push(door);
      device.adoptDoor(door, to.generation);
    }
    const { outputs, queueNs } = await executed;
    return { labels: [...new BigInt64Array(outputs[0].data.buffer, outputs[0].data.byteOffset, tensor.shape[0])].map(Number), queueNs };
  };
  return { device, pool, hooks, doors, infer };
}

const expected = (/** @type {number} */ from, /** @type {number} */ rows) => heldout.labels.slice(from, from + rows);

test('preprocessed tensors reach the device through the hook threads\' doors, one door per thread; the answers are right', async (t) => {
  const { device, doors, infer } = await setup(t);
  for (let i = 0; i < 4; i++) {
    const { labels } = await infer(image(i * 3, 3));
    t.deepEqual(labels, expected(i * 3, 3));
  }
  // Many at once: some tensors reach the device before their request's command does.
  const all = await Promise.all(Array.from({ length: 24 }, (_, i) => infer(image(i, 1 + (i % 4))).then(({ labels }) => [labels, expected(i, 1 + (i % 4))])));
  for (const [labels, want] of all) t.deepEqual(labels, want);
  t.true(doors.length >= 1 && doors.length <= 2, `${doors.length} doors for a pool of two threads`);
  t.is(device.inflight, 0);
});

test('a hook whose tensors are not the model\'s inputs fails its request with the reason; the device drops it and serves the next', async (t) => {
  const { device, infer } = await setup(t);
  const abandon = new AbortController();
  // A 4-row request whose hook gets 2 rows: the hook's tensors do not match the request's rows.
  const err = await stowageError(t, infer(image(0, 4), { hookTensor: image(0, 2), signal: abandon.signal }));
  t.is(err.code, 'STOWAGE_HOOK_FAILED');
  t.regex(err.message, /model "digits_u8": the preprocess hook in model\.js failed: tensor "image": expected shape \[4, 8, 8\] \(axes "nhw"\), got \[2, 8, 8\]/);
  // The pipeline cancels the request at the device when its hook fails (a request waiting for inputs never runs).
  abandon.abort();
  t.is(device.inflight, 0);
  // The device reads its inbox in order: by the time it answers this, it has dropped the cancelled request.
  const [status] = await device.status();
  t.is(status.queued, 0, 'nothing left queued on the device');
  const { labels } = await infer(image(5, 2));
  t.deepEqual(labels, expected(5, 2));
});

test('a request cancelled before its inputs arrive settles at once; the inputs that come later are dropped and the next request is answered', async (t) => {
  const { device, pool, hooks, infer } = await setup(t);
  await infer(image(0, 1)); // this thread has a door now
  const abandon = new AbortController();
  /** @type {import('../../../../dist/shared/channels/device.js').HookFeedTarget | undefined} */
  let target;
  const executed = device.infer(request(1), abandon.signal, (where) => { target = where; });
  const to = present(target, 'where the hook sends the inputs');
  abandon.abort();
  const err = await stowageError(t, executed);
  t.is(err.code, 'STOWAGE_CANCELLED');
  // The hook still sends the inputs of the cancelled request; the device must not run them or keep them.
  const door = await pool.preprocessInto('digits_u8', hooks, [image(0, 1)], context, { ...to, inputs: spec.inputs, rows: 1 }, UNBOUND);
  if (door) device.adoptDoor(door, to.generation);
  for (let i = 0; i < 6; i++) t.deepEqual((await infer(image(i, 2))).labels, expected(i, 2));
  const [status] = await device.status();
  t.is(status.queued, 0, 'nothing left queued on the device');
  t.is(device.inflight, 0);
});
