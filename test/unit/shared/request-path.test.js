// The request path by itself (shared/request-path.ts), on rooms of the test's own that record what
// the path asks of them: one request object carried from the lease to the answer. A request is
// leased, checked, run and counted before its lease is given back; its deadline is the sooner of
// the call's and its own timeout; the shared-memory regions it names are held only once nothing
// more can refuse it, and given back with the lease; a request answered is counted for its tenant;
// a meta model's sub-calls inherit their parent's deadline, priority and cancellation (not counted
// for the tenant again), on this thread or elsewhere; a failed preprocess
// hook withdraws the request from the device; a tenant over its quota is refused before anything runs.
import test from 'ava';
import { RequestPath } from '../../../dist/shared/request-path.js';
import { nowMs } from '../../../dist/shared/timers.js';
import { instanceKey } from '../../../dist/shared/model-spec.js';
import { StowageError, errors } from '../../../dist/shared/errors.js';
import { Quotas } from '../../../dist/shared/admission.js';
import { DeadlineAdmission } from '../../../dist/shared/backlog.js';
import { modelSpec, tensorSpec } from '../../helpers/specs.js';
import { stowageError } from '../../helpers/errors.js';

/** @typedef {import('../../../dist/shared/request-path.js').PathLease} PathLease */
/** @typedef {import('../../../dist/shared/channels/inference.js').InferenceRequest} InferenceRequest */

const x = tensorSpec('x', 'FP32', 'n k', [-1, 2], 0);
const y = tensorSpec('y', 'FP32', 'n k', [-1, 2], 0);
const plain = modelSpec({ name: 'plain', inputs: [x], outputs: [y], batchAxis: 'n', maxBatchSize: 8 });
const hooks = (/** @type {Partial<import('../../../dist/shared/model-spec.js').BundleHooks>} */ h) => ({ file: 'model.js', version: '1', preprocess: false, postprocess: false, run: false, ...h });
const preprocessed = modelSpec({ ...plain, name: 'pre', hooks: hooks({ preprocess: true }) });
const meta = modelSpec({ name: 'meta', kind: 'meta', subModels: ['plain', 'far'], inputs: [x], outputs: [y], batchAxis: 'n', hooks: hooks({ run: true }) });
const specs = new Map([plain, preprocessed, meta].map((s) => [s.name, s]));

/** One row of two FP32s, as a request's input off the wire. */
const inline = () => ({ name: 'x', datatype: /** @type {const} */ ('FP32'), shape: [1, 2], bytes: /** @type {const} */ ({ kind: 'inline', data: new Uint8Array(8), owned: true }) });
const wire = (/** @type {string} */ model, /** @type {Partial<import('../../../dist/shared/data-plane.js').DataPlaneRequest>} */ more = {}) => ({ model, version: '', id: 'r1', inputs: [inline()], outputs: [], parameters: {}, ...more });
const options = (/** @type {Partial<import('../../../dist/shared/data-plane.js').InferOptions>} */ more = {}) => ({ callDeadlineMs: Infinity, signal: new AbortController().signal, outputs: null, protocol: /** @type {const} */ ('grpc'), ...more });
const timing = { computeInputNs: 1, computeInferNs: 2, computeOutputNs: 3, batchRows: 1, executedBatchSize: 1, requests: 1 };

/**
 * Rooms that record every call in order: `log` says what the path asked of them, `commands` what
 * went to the device. `device` answers a command (by default with its inputs renamed to the outputs).
 * @param {{ aheadMs?: number, absent?: string[], device?: (command: InferenceRequest, signal: AbortSignal) => Promise<import('../../../dist/shared/channels/inference.js').InferenceResult>, hookRun?: Function, preprocess?: Function }} [o]
 */
function rooms(o = {}) {
  const deadlines = new DeadlineAdmission({ defaultLevel: 2, models: {} }, 30_000);
  const quotas = new Quotas(Quotas.create({ alice: { max_inflight: 1, device_seconds_per_second: 0.5, burst_seconds: 1 } }, {}, 1), 0);
  /** @type {string[]} */
  const log = [];
  /** @type {import('../../../dist/shared/request-path.js').HookBound[]} */
  const bounds = [];
  /** @type {{ command: InferenceRequest, signal: AbortSignal }[]} */
  const commands = [];
  /** @type {any[]} */
  const elsewhere = [];
  /** @type {(command: InferenceRequest) => Promise<import('../../../dist/shared/channels/inference.js').InferenceResult>} */
  const echo = async (command) => ({ outputs: command.outputs.map((name) => ({ name, datatype: /** @type {const} */ ('FP32'), shape: [command.rows, 2], data: new Uint8Array(8 * command.rows) })), queueNs: 5, timing });
  /** @type {import('../../../dist/shared/request-path.js').PathRooms<PathLease>} */
  const r = {
    acquire(model) {
      log.push(`acquire ${model}`);
      if (o.absent?.includes(model)) return null;
      const spec = specs.get(model);
      if (!spec) throw errors.modelNotFound(model, [...specs.keys()]);
      return { spec, instance: instanceKey(model, 1) };
    },
    release: (lease) => { log.push(`release ${lease.spec.name}`); },
    infer(lease, command, signal, feedFromHook) {
      log.push(`infer ${lease.spec.name}`);
      commands.push({ command, signal });
      feedFromHook?.({ deviceId: 0, generation: 1, link: 1, id: commands.length });
      return (o.device ?? echo)(command, signal);
    },
    adoptDoor: () => { log.push('adoptDoor'); },
    hooks: {
      run: (model, hook, _hooks, given, context, bound, subInfer) => {
        log.push(`hook ${hook} ${model}`);
        bounds.push(bound);
        return /** @type {Function} */ (o.hookRun)(given, context, subInfer);
      },
      preprocessInto: async (model, _hooks, given, context, feed, bound) => {
        log.push(`preprocess ${model}`);
        bounds.push(bound);
        return o.preprocess ? o.preprocess(given, context, feed) : undefined;
      },
    },
    regions: {
      slice: (what, name, offset, byteSize) => {
        if (name !== 'r') throw errors.sharedMemoryNotFound(name);
        return { regionId: 1, name, key: '/r', fd: 3, regionOffset: 0, regionByteSize: 64, offset, byteSize };
      },
      hold: (slices) => { log.push(`hold ${slices.length}`); },
      release: (slices) => { log.push(`release ${slices.length} regions`); },
    },
    succeeded: (lease, batchSize, durationNs, queueNs) => { log.push(`succeeded ${lease.spec.name} rows ${batchSize} queue ${queueNs}`); t0 = durationNs; },
    failed: (lease, code) => { log.push(`failed ${lease.spec.name} ${code}`); },
    trace: () => null,
    backlog: () => ({ aheadMs: () => o.aheadMs ?? 0, noteSlack: () => {} }),
    deadlines,
    // alice may have one request in flight, and half a device.
    quotas,
    // A sub-call these rooms cannot take, as a request of its own: its parent's priority on it, its deadline and signal.
    elsewhere: async (request, { callDeadlineMs, signal }) => {
      elsewhere.push({ model: request.model, urgency: { deadlineMs: callDeadlineMs, priority: request.priority ?? 0 }, signal });
      log.push(`elsewhere ${request.model}`);
      return { outputs: request.outputs.map(({ name }) => ({ name, datatype: 'FP32', shape: [1, 2], data: new Uint8Array(8) })), framed: null };
    },
  };
  let t0 = 0;
  return { rooms: r, log, commands, elsewhere, quotas, bounds, duration: () => t0 };
}

test('a plain request is leased, checked, run on the device with its deadline and priority, and counted before its lease is given back', async (t) => {
  const { rooms: r, log, commands, duration } = rooms();
  const path = new RequestPath(r);
  const callDeadlineMs = nowMs() + 60_000;
  const answer = await path.infer(wire('plain', { timeoutUs: 2_000_000, priority: 2 }), options({ callDeadlineMs }));
  t.deepEqual(log, ['acquire plain', 'infer plain', 'succeeded plain rows 1 queue 5', 'release plain']);
  const [{ command }] = commands;
  t.is(command.instance, instanceKey('plain', 1));
  t.deepEqual(command.outputs, ['y'], 'every output, when the request names none');
  t.true(command.deadlineMs < nowMs() + 2_001 && command.deadlineMs > nowMs() + 1_000, 'its own timeout, sooner than the call\'s deadline');
  t.is(command.priority, 2);
  t.is(answer?.outputs[0].name, 'y');
  t.true(duration() > 0);
});

test('a request its edge found wrong is refused once its model is known, counted as failed, and given back; nothing reaches the device', async (t) => {
  const { rooms: r, log, commands } = rooms();
  const refused = { code: /** @type {const} */ ('STOWAGE_INVALID_TENSOR'), message: 'input "x": bad bytes' };
  const err = await stowageError(t, /** @type {Promise<unknown>} */ (new RequestPath(r).infer(wire('plain', { refused }), options())));
  t.is(err.code, 'STOWAGE_INVALID_TENSOR');
  t.deepEqual(log, ['acquire plain', 'failed plain STOWAGE_INVALID_TENSOR', 'release plain']);
  t.is(commands.length, 0);
});

test('an unknown model fails at the lease, counted nowhere; a model this thread cannot take is handed back as null', async (t) => {
  const { rooms: r, log } = rooms({ absent: ['plain'] });
  const path = new RequestPath(r);
  t.is((await stowageError(t, /** @type {Promise<unknown>} */ (path.infer(wire('nosuch'), options())))).code, 'STOWAGE_MODEL_NOT_FOUND');
  t.is(path.infer(wire('plain'), options()), null);
  t.deepEqual(log, ['acquire nosuch', 'acquire plain']);
});

test('regions are held once nothing more can refuse the request, and given back with the lease, answered or failed', async (t) => {
  const region = { name: 'x', datatype: /** @type {const} */ ('FP32'), shape: [1, 2], bytes: /** @type {const} */ ({ kind: 'region', region: 'r', offset: 0, byteSize: 8 }) };
  const ok = rooms();
  await new RequestPath(ok.rooms).infer(wire('plain', { inputs: [region] }), options());
  t.deepEqual(ok.log, ['acquire plain', 'hold 1', 'infer plain', 'succeeded plain rows 1 queue 5', 'release plain', 'release 1 regions']);

  const failing = rooms({ device: () => Promise.reject(errors.deviceUnavailable(0, 'its worker exited')) });
  await stowageError(t, /** @type {Promise<unknown>} */ (new RequestPath(failing.rooms).infer(wire('plain', { inputs: [region] }), options())));
  t.deepEqual(failing.log, ['acquire plain', 'hold 1', 'infer plain', 'failed plain STOWAGE_DEVICE_UNAVAILABLE', 'release plain', 'release 1 regions']);

  // A hooked model refuses shared memory after the check: nothing was held, so nothing leaks.
  const hooked = rooms();
  const err = await stowageError(t, /** @type {Promise<unknown>} */ (new RequestPath(hooked.rooms).infer(wire('pre', { inputs: [region] }), options())));
  t.regex(err.message, /runs model\.js hooks.*send them inline/);
  t.deepEqual(hooked.log, ['acquire pre', 'failed pre STOWAGE_UNSUPPORTED', 'release pre']);
});

test('a meta model\'s sub-calls inherit its deadline, priority and cancellation, here or elsewhere; a model outside its manifest is refused', async (t) => {
  /** @type {string[]} */
  const subAnswers = [];
  const client = new AbortController();
  const r = rooms({
    absent: ['far'],
    hookRun: async (/** @type {any[]} */ given, /** @type {any} */ _context, /** @type {Function} */ subInfer) => {
      const near = await subInfer('plain', given, ['y']);
      const far = await subInfer('far', given, ['y']);
      subAnswers.push(near[0].name, far[0].name);
      await subInfer('plain-but-not-listed', given, ['y']).catch((/** @type {Error} */ err) => subAnswers.push(err.message));
      return [{ name: 'y', datatype: 'FP32', shape: [1, 2], data: new Uint8Array(8) }];
    },
  });
  const callDeadlineMs = nowMs() + 5_000;
  const answer = await new RequestPath(r.rooms).infer(wire('meta', { priority: 1 }), options({ callDeadlineMs, signal: client.signal, tenant: 'alice' }));
  t.is(answer?.outputs[0].name, 'y');
  t.deepEqual(r.quotas.durations().map((d) => [d.label, d.count]), [['alice', 1], ['default', 0], ['other', 0]], 'the client\'s request counted for its tenant once, its sub-calls not');
  const [{ command, signal }] = r.commands;
  t.is(command.deadlineMs, callDeadlineMs, 'the parent\'s deadline');
  t.is(command.priority, 1, 'the parent\'s priority');
  t.is(signal, client.signal, 'cancelled with the parent');
  t.deepEqual(r.bounds.map((b) => [b.deadlineMs, b.signal === client.signal]), [[callDeadlineMs, true]], 'its run hook waits for a thread no longer than the request');
  t.deepEqual(r.elsewhere.map((e) => [e.model, e.urgency.deadlineMs, e.urgency.priority, e.signal === client.signal]), [['far', callDeadlineMs, 1, true]]);
  t.is(subAnswers[0], 'y');
  t.is(subAnswers[1], 'y');
  t.regex(subAnswers[2], /meta model "meta" may call only plain, far .*not "plain-but-not-listed"/);
  t.deepEqual(r.log, ['acquire meta', 'hook run meta', 'acquire plain', 'infer plain', 'succeeded plain rows 1 queue 5', 'release plain', 'acquire far', 'elsewhere far', 'succeeded meta rows 1 queue 0', 'release meta']);
});

test('a preprocess hook that fails withdraws its request from the device and fails it with the hook\'s error', async (t) => {
  /** @type {AbortSignal | undefined} */
  let deviceSignal;
  const r = rooms({
    device: (_command, signal) => { deviceSignal = signal; return new Promise((_, reject) => signal.addEventListener('abort', () => reject(errors.cancelled()))); },
    preprocess: async () => { throw new StowageError('STOWAGE_HOOK_FAILED', 'model.js preprocess threw: no'); },
  });
  const err = await stowageError(t, /** @type {Promise<unknown>} */ (new RequestPath(r.rooms).infer(wire('pre'), options())));
  t.is(err.code, 'STOWAGE_HOOK_FAILED');
  t.true(deviceSignal?.aborted, 'the device was told to drop it');
  t.is(r.commands[0].command.inputs.length, 0, 'it went to the device without inputs: the hook sends them');
  t.deepEqual(r.log, ['acquire pre', 'infer pre', 'preprocess pre', 'failed pre STOWAGE_HOOK_FAILED', 'release pre']);
});

test('a request over its tenant\'s quota is refused before its tensors are checked, it holds a region or reaches the device; its place comes back when answered or refused later, its device time charged', async (t) => {
  const region = { name: 'x', datatype: /** @type {const} */ ('FP32'), shape: [1, 2], bytes: /** @type {const} */ ({ kind: 'region', region: 'r', offset: 0, byteSize: 8 }) };
  /** @type {() => void} */
  let finish = () => {};
  const r = rooms({ device: () => new Promise((resolve) => { finish = () => resolve({ outputs: [], queueNs: 0, timing: { ...timing, computeInferNs: 4e6 } }); }) });
  const path = new RequestPath(r.rooms);
  const first = path.infer(wire('plain'), options({ tenant: 'alice' }));
  const err = await stowageError(t, /** @type {Promise<unknown>} */ (path.infer(wire('plain'), options({ tenant: 'alice' }))));
  t.is(err.code, 'STOWAGE_QUOTA_EXCEEDED');
  t.regex(err.message, /tenant "alice" is over its quota of 1 requests in flight/);
  t.deepEqual(r.log, ['acquire plain', 'infer plain', 'acquire plain', 'failed plain STOWAGE_QUOTA_EXCEEDED', 'release plain']);
  // A request its check would refuse is refused for the quota first: the cheapest refusal for a flood.
  t.is((await stowageError(t, /** @type {Promise<unknown>} */ (path.infer(wire('pre', { inputs: [region] }), options({ tenant: 'alice' }))))).code, 'STOWAGE_QUOTA_EXCEEDED');
  finish();
  await first;
  const refusedLater = await stowageError(t, /** @type {Promise<unknown>} */ (path.infer(wire('pre', { inputs: [region] }), options({ tenant: 'alice' }))));
  t.is(refusedLater.code, 'STOWAGE_UNSUPPORTED');
  const [alice] = r.quotas.read();
  t.is(alice.inflight, 0, 'its place given back, and the place of the request refused after taking one');
  t.true(Math.abs(alice.deviceSeconds - 0.004000004) < 1e-9, `its execution's device time charged: ${alice.deviceSeconds}`);
  const again = path.infer(wire('plain'), options({ tenant: 'alice' }));
  finish();
  t.truthy(await again, 'admitted again');
});

test('a request the work ahead of it would keep past its deadline is refused before it runs, taking no place; one with time enough runs', async (t) => {
  const r = rooms({ aheadMs: 500 });
  const path = new RequestPath(r.rooms);
  await path.infer(wire('plain'), options()); // its model seen running once: 1+2+3 ns
  r.log.length = 0;
  const err = await stowageError(t, /** @type {Promise<unknown>} */ (path.infer(wire('plain', { timeoutUs: 100_000 }), options({ tenant: 'alice' }))));
  t.is(err.code, 'STOWAGE_DEADLINE_EXCEEDED');
  t.regex(err.message, /refused before it ran: its deadline is (99|100) ms away, and the device has 500 ms of work ahead of it at priority 2 and above/);
  t.deepEqual(r.log, ['acquire plain', 'failed plain STOWAGE_DEADLINE_EXCEEDED', 'release plain'], 'nothing held, nothing sent to the device');
  t.is(r.quotas.read()[0].inflight, 0, 'no quota place taken');
  t.truthy(await path.infer(wire('plain', { timeoutUs: 600_000 }), options()), 'a deadline past the work ahead: it runs');
});
