// The device pool's placement and policies with stand-in devices: a model that moves is made resident on
// its new device before requests follow (the choice of device per request is the rooms': rooms.test.js).
import test from 'ava';
import { Devices } from '../../../dist/node/devices.js';
import { instanceKey, modelOf } from '../../../dist/shared/model-spec.js';
import { ModelPolicies } from '../../../dist/node/model-policies.js';

/** A prefetch a fake device was asked for, answered when the test calls `resolve`. @typedef {{ prefetch: number, instance: import('../../../dist/shared/model-spec.js').InstanceKey, resolve: () => void }} PrefetchEvent */

/**
 * A device whose infers stay pending until released; it records what it was asked. A stand-in
 * for a DeviceHandle with only what routing and placement use, hence `any`.
 * @param {number} deviceId
 * @param {PrefetchEvent[]} events
 * @returns {any}
 */
function fakeDevice(deviceId, events) {
  /** @type {(() => void)[]} */
  const pending = [];
  /** @type {Set<string>} */
  const lost = new Set();
  return {
    deviceId,
    serving: true,
    settled: true,
    state: 'READY',
    /** Instances this device lost (its replacement worker could not load them again); it holds every other. */
    lost,
    holds: (/** @type {string} */ instance) => !lost.has(instance),
    get inflight() {
      return pending.length;
    },
    pending,
    load: async (/** @type {{ bytes?: number }} */ spec) => ({ loadMs: 1, weightBytes: spec.bytes ?? 1000 }),
    unload: async () => {},
    prefetch: (/** @type {PrefetchEvent['instance']} */ instance) => new Promise((resolve) => events.push({ prefetch: deviceId, instance, resolve: () => resolve(undefined) })),
    infer: () => new Promise((resolve) => pending.push(() => resolve({ outputs: [], queueNs: 0, timing: {} }))),
  };
}
/**
 * A model spec with what placement reads (and the weight bytes its fake load reports).
 * @param {string} name
 * @param {number} maxBatchSize
 * @param {number} [bytes]
 * @returns {any}
 */
const spec = (name, maxBatchSize, bytes) => ({ name, maxBatchSize, bytes });
/**
 * A request for `model`: the pool reads only its instance, the fake devices nothing.
 * @param {string} model
 * @returns {any}
 */
const request = (model) => ({ instance: instanceKey(model, 1) });
/** @returns {import('../../../dist/node/devices.js').LptOptions} */
const lpt = (over = {}) => ({ defaultReplicas: 1, replicas: {}, fillFactor: 1, policy: 'fill_rr', rebalanceSeconds: 0, budgets: new Map(), ...over });

test('a model that moves is made resident on its new device before its requests switch', async (t) => {
  /** @type {PrefetchEvent[]} */
  const events = [];
  const devices = [0, 1].map((id) => fakeDevice(id, events));
  // The pool reports a placement once it is applied: after the moves' prefetches are done.
  /** @type {() => void} */
  let applied = () => {};
  const repacked = new Promise((resolve) => { applied = () => resolve(undefined); });
  const pool = new Devices(devices, { mode: 'lpt_packing', policies: new ModelPolicies([]), lpt: lpt({ rebalanceSeconds: 1 }), onPlacement: () => applied() });
  for (const name of ['a', 'b', 'c', 'd']) await pool.load(spec(name, 1, 100), instanceKey(name, 1));
  const before = Object.fromEntries(['a', 'b', 'c', 'd'].map((m) => [m, pool.placementOf(m)[0]]));
  // All the work lands on the models of one device: a repack must move one of them.
  const busy = Object.keys(before).filter((m) => before[m] === before.a);
  for (const m of busy) pool.recordExecution(m, 0.6e9);
  await new Promise((r) => setImmediate(r));
  t.true(events.length > 0, 'a prefetch was asked for');
  const { instance, prefetch: to } = events[0];
  const model = modelOf(instance);
  t.not(to, before[model]);
  t.is(pool.placementOf(model)[0], before[model], 'while its weights come on, requests still go where it was');
  for (const e of events) e.resolve();
  await repacked;
  t.is(pool.placementOf(model)[0], to, 'then they follow');
});

test('policy changes go through the one owner; a residency a device refuses is undone everywhere', async (t) => {
  // Worker 1 pins "big" to device memory in the node file; worker 0 keeps the default (system).
  const policies = new ModelPolicies([{ deviceId: 0, models: {} }, { deviceId: 1, models: { big: { weight: 2, residency: 'device' } } }]);
  /** @type {Record<string, unknown>[]} */
  const applied = [];
  const devices = [0, 1].map((id) => ({
    ...fakeDevice(id, []),
    applyPolicy: async (/** @type {string} */ model) => applied.push({ device: id, model, ...policies.of(id, model) }),
    applyResidency: async (/** @type {string} */ model) => {
      const { residency } = policies.of(id, model);
      if (id === 1 && residency === 'unpinned') throw new Error('device 1 refuses');
      applied.push({ device: id, model, residency });
    },
  }));
  const pool = new Devices(devices, { mode: 'round_robin', policies });

  await pool.setPolicy('big', { maxBatchSize: 4 });
  t.deepEqual(applied.splice(0), [
    { device: 0, model: 'big', weight: 1, maxBatchSize: 4, residency: 'system' },
    { device: 1, model: 'big', weight: 2, maxBatchSize: 4, residency: 'device' },
  ]);
  t.is(pool.policies.maxBatchSize('big'), 4, 'ModelConfig reads the owner');

  await t.throwsAsync(pool.setResidency('big', 'unpinned'), { message: 'device 1 refuses' });
  // Device 0 took the change, then went back to what the node file gives it; the owner forgot the change.
  t.deepEqual(applied.splice(0), [{ device: 0, model: 'big', residency: 'unpinned' }, { device: 0, model: 'big', residency: 'system' }]);
  t.deepEqual([policies.of(0, 'big').residency, policies.of(1, 'big').residency], ['system', 'device']);
  t.is(policies.of(1, 'big').maxBatchSize, 4, 'the earlier policy change stands');
});

