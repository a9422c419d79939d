// Quotas (shared/admission.ts) by themselves: a request's tenant as the node file names it; places in
// flight per tenant and per model, refused RESOURCE_EXHAUSTED naming the limit and given back when
// answered; device time charged at a rate (GCRA), a subject ahead of its rate by more than its
// burst refused until time catches up, others unaffected; a meta model's sub-call charged without a
// place; a dead thread's places given back; and two real threads racing never take more places than
// the limit; each tenant's answered requests by their time, summed over the threads' rows; device
// time charged ahead at admission, settled by the run or given back.
import { Worker } from 'node:worker_threads';
import test from 'ava';
import { Quotas } from '../../../dist/shared/admission.js';
import { stowageError } from '../../helpers/errors.js';

const limits = (/** @type {Partial<import('../../../dist/shared/admission.js').QuotaLimits>} */ l) => ({ max_inflight: 0, device_seconds_per_second: 0, burst_seconds: 1, ...l });
/** One execution of `ms` milliseconds of compute, of one request of one row. */
const ran = (/** @type {number} */ ms) => ({ computeInputNs: 0, computeInferNs: ms * 1e6, computeOutputNs: 0, batchRows: 1, executedBatchSize: 1, requests: 1 });

test('a request\'s tenant is the name the node file lists, `default` when it names none, `other` for the rest', (t) => {
  const q = new Quotas(Quotas.create({ alice: limits({}) }, {}, 1), 0);
  t.is(q.tenantOf('alice'), 'alice');
  t.is(q.tenantOf(undefined), 'default');
  t.is(q.tenantOf(''), 'default');
  t.is(q.tenantOf('mallory'), 'other');
});

test('a tenant over its quota is refused before its model is known, counted, taking nothing; under it, or without a quota, not', (t) => {
  const q = new Quotas(Quotas.create({ alice: limits({ max_inflight: 1 }), carol: limits({ device_seconds_per_second: 0.001, burst_seconds: 0.001 }) }, { resnet: limits({ max_inflight: 1 }) }, 1), 0);
  t.is(new Quotas(Quotas.create({}, { resnet: limits({ max_inflight: 1 }) }, 1), 0).earlyRefusal, undefined, 'model quotas alone: nothing for the edge to ask');
  t.is(q.earlyRefusal?.('mallory'), null, 'the edges\' question is tenantRefusal\'s');
  t.is(q.tenantRefusal('alice'), null, 'under its limit');
  const held = q.admit('resnet', 'alice');
  const refused = q.tenantRefusal('alice');
  t.is(refused?.code, 'STOWAGE_QUOTA_EXCEEDED');
  t.regex(refused?.message ?? '', /tenant "alice" is over its quota of 1 requests in flight \(global\.quotas\.tenants\.alice\.max_inflight\)/);
  t.is(q.tenantRefusal('mallory'), null, 'a tenant without a quota (other)');
  t.is(q.tenantRefusal(undefined), null, 'no tenant named (default)');
  // The model being full is not the tenant's: only admit, once the model is known, refuses that.
  t.is(q.tenantRefusal('bob'), null);
  q.charge(q.admit('digits', 'carol'), ran(100), 1);
  t.regex(q.tenantRefusal('carol')?.message ?? '', /tenant "carol" is over its quota of 0\.001 device-seconds per second/);
  const read = () => Object.fromEntries(q.read().map((r) => [`${r.kind} ${r.name}`, [r.inflight, r.refused.inflight, r.refused.rate]]));
  t.deepEqual(read()['tenant alice'], [1, 1, 0], 'refused and counted, no place taken');
  t.deepEqual(read()['tenant carol'].slice(2), [1]);
  q.leave(held);
  t.is(q.tenantRefusal('alice'), null, 'its place back: under again');
});

test('places in flight: past a tenant\'s or a model\'s limit RESOURCE_EXHAUSTED naming it, a refusal taking nothing; given back when answered', async (t) => {
  const q = new Quotas(Quotas.create({ alice: limits({ max_inflight: 2 }), bob: limits({}) }, { resnet: limits({ max_inflight: 3 }) }, 1), 0);
  t.is(q.admit('digits', 'default'), null, 'neither has a quota: nothing counted');
  const a1 = q.admit('resnet', 'alice');
  const a2 = q.admit('resnet', 'alice');
  const err = await stowageError(t, Promise.resolve().then(() => q.admit('resnet', 'alice')));
  t.is(err.code, 'STOWAGE_QUOTA_EXCEEDED');
  t.is(err.status, 8, 'RESOURCE_EXHAUSTED');
  t.regex(err.message, /tenant "alice" is over its quota of 2 requests in flight \(global\.quotas\.tenants\.alice\.max_inflight\)/);
  const b1 = q.admit('resnet', 'bob');
  const byModel = await stowageError(t, Promise.resolve().then(() => q.admit('resnet', 'bob')));
  t.regex(byModel.message, /model "resnet" is over its quota of 3 requests in flight \(global\.quotas\.models\.resnet\.max_inflight\)/);
  const read = () => Object.fromEntries(q.read().map((r) => [`${r.kind} ${r.name}`, [r.inflight, r.refused.inflight]]));
  t.deepEqual(read(), { 'tenant alice': [2, 1], 'tenant bob': [1, 0], 'model resnet': [3, 1] }, 'bob\'s refusal by the model gave his own place back');
  q.leave(a1);
  t.truthy(q.admit('digits', 'alice'), 'a place back: admitted again');
  q.leave(a2);
  q.leave(b1);
  t.deepEqual(read(), { 'tenant alice': [1, 1], 'tenant bob': [0, 0], 'model resnet': [0, 1] });
});

test('device time at a rate: a tenant ahead of it by more than its burst is refused until time catches up; another tenant is not', async (t) => {
  const q = new Quotas(Quotas.create({ alice: limits({ device_seconds_per_second: 0.5, burst_seconds: 0.05 }), bob: limits({ device_seconds_per_second: 0.5, burst_seconds: 0.05 }) }, {}, 1), 0);
  const alice = q.admit('m', 'alice');
  q.charge(alice, ran(100), 1); // 100 ms of device at half a device: 200 ms of its time
  q.leave(alice);
  const err = await stowageError(t, Promise.resolve().then(() => q.admit('m', 'alice')));
  t.is(err.code, 'STOWAGE_QUOTA_EXCEEDED');
  t.regex(err.message, /tenant "alice" is over its quota of 0\.5 device-seconds per second \(burst 0\.05 s\), and it is 0\.[12]\d s ahead of that rate \(global\.quotas\.tenants\.alice\.device_seconds_per_second\)/);
  t.truthy(q.admit('m', 'bob'), 'bob has his own rate');
  await new Promise((resolve) => setTimeout(resolve, 200));
  t.truthy(q.admit('m', 'alice'), 'time caught up');
  const alices = q.read().find((r) => r.name === 'alice');
  t.is(alices?.refused.rate, 1);
  t.true(Math.abs((alices?.deviceSeconds ?? 0) - 0.1) < 1e-6, 'the device time charged');
});

test('device time charged ahead as a request is let through: the next refused before any run; its run settles it, and a request that never runs gives it back', async (t) => {
  const q = new Quotas(Quotas.create({ alice: limits({ device_seconds_per_second: 0.5, burst_seconds: 0.05 }) }, {}, 1), 0);
  const first = q.admit('m', 'alice');
  q.prepay(first, 100); // its run predicted at 100 ms: 200 ms of its time at half a device
  const err = await stowageError(t, Promise.resolve().then(() => q.admit('m', 'alice')));
  t.regex(err.message, /tenant "alice" is over its quota of 0\.5 device-seconds per second \(burst 0\.05 s\), and it is 0\.[12]\d s ahead/, 'refused with no run charged yet');
  q.charge(first, ran(10), 1); // it ran 10 ms: 20 ms of its time, not 200
  q.leave(first);
  const second = q.admit('m', 'alice');
  t.truthy(second, 'the run settled the charge ahead: 0.02 s ahead, within the burst');
  q.prepay(second, 100);
  q.leave(second); // refused or failed before it ran
  t.truthy(q.admit('m', 'alice'), 'what it was charged ahead is given back');
  const alices = q.read().find((r) => r.name === 'alice');
  t.true(Math.abs((alices?.deviceSeconds ?? 0) - 0.01) < 1e-6, 'device time counts the run alone');
  t.is(alices?.refused.rate, 1);
  const sub = q.subCall(second, 'm');
  q.prepay(sub, 100);
  t.is(sub?.prepaidNs, undefined, 'a sub-call, holding no place, is charged after its run only');
  const counted = new Quotas(Quotas.create({ erin: limits({ max_inflight: 4 }) }, {}, 1), 0);
  const places = counted.admit('m', 'erin');
  counted.prepay(places, 100);
  t.is(places?.prepaidNs, 0, 'no device-time rate: nothing to charge ahead');
});

test('an execution\'s device time is shared by rows; a meta model\'s sub-call charges its parent\'s tenant and its own model, holding no place', (t) => {
  const q = new Quotas(Quotas.create({ alice: limits({ max_inflight: 1 }) }, { meta: limits({ max_inflight: 1 }), sub: limits({}) }, 1), 0);
  const parent = q.admit('meta', 'alice');
  const sub = q.subCall(parent, 'sub');
  t.deepEqual(sub?.holds, false);
  q.charge(sub, { computeInputNs: 0, computeInferNs: 40e6, computeOutputNs: 0, batchRows: 4, executedBatchSize: 4, requests: 2 }, 1);
  const seconds = Object.fromEntries(q.read().map((r) => [r.name, [r.inflight, r.deviceSeconds]]));
  t.deepEqual(seconds, { alice: [1, 0.01], meta: [1, 0], sub: [0, 0.01] }, 'a quarter of 40 ms to alice and to sub, not to the meta model; the places are the parent\'s');
  q.leave(sub);
  t.is(q.read().find((r) => r.name === 'alice')?.inflight, 1, 'a sub-call gives back nothing');
});

test('a thread that dies with places gives them back', (t) => {
  const shape = Quotas.create({ alice: limits({ max_inflight: 2 }) }, {}, 3);
  const main = new Quotas(shape, 0);
  const edge = new Quotas(shape, 2);
  edge.admit('m', 'alice');
  edge.admit('m', 'alice');
  t.throws(() => main.admit('m', 'alice'), { message: /over its quota of 2/ });
  main.forget(2);
  t.truthy(main.admit('m', 'alice'));
  t.is(main.read()[0].inflight, 1);
});

test('two threads racing for places never take more than the limit between them', async (t) => {
  const shape = Quotas.create({ alice: limits({ max_inflight: 1000 }) }, { m: limits({ max_inflight: 1500 }) }, 3);
  const race = (/** @type {number} */ row) => new Promise((resolve, reject) => {
    const w = new Worker(new URL('../../fixtures/workers/quota-admitter.js', import.meta.url), { workerData: { shape, row, tries: 1000, tenant: 'alice', model: 'm' } });
    w.once('message', resolve);
    w.once('error', reject);
  });
  const [one, two] = /** @type {number[]} */ (await Promise.all([race(1), race(2)]));
  t.is(one + two, 1000, `${one} and ${two} places: the limit exactly`);
  const read = Object.fromEntries(new Quotas(shape, 0).read().map((r) => [r.name, r.inflight]));
  t.deepEqual(read, { alice: 1000, m: 1000 });
});

test('each tenant\'s answered requests are counted by their time under its label, over every thread\'s row; a name outside the labels as other', (t) => {
  const shape = Quotas.create({ alice: limits({ max_inflight: 1 }) }, {}, 2);
  t.deepEqual(shape.tenantLabels, ['alice', 'default', 'other'], 'the named tenants, then default and other: a bounded set');
  const [main, edge] = [new Quotas(shape, 0), new Quotas(shape, 1)];
  main.answered('alice', 0.5e6); // 0.5 ms: the first bucket (1 ms)
  edge.answered('alice', 30e6); // 30 ms: the 50 ms bucket
  edge.answered(edge.tenantOf(undefined), 2e6);
  main.answered('mallory', 20_000e6); // past the last bucket: in the count and the sum alone
  const read = Object.fromEntries(main.durations().map((d) => [d.label, d]));
  t.is(read.alice.count, 2);
  t.is(read.alice.seconds, 0.0305);
  t.is(read.alice.buckets[0], 1);
  t.is(read.alice.buckets[5], 1, 'le 50 ms');
  t.is(read.alice.buckets.reduce((a, b) => a + b), 2);
  t.is(read.default.count, 1);
  t.is(read.default.buckets[1], 1, 'le 2.5 ms');
  t.deepEqual([read.other.count, read.other.seconds, read.other.buckets.reduce((a, b) => a + b)], [1, 20, 0]);
  t.deepEqual(edge.durations(), main.durations(), 'every thread reads the same sums');
  t.deepEqual(Quotas.create({ default: limits({}) }, {}, 1).tenantLabels, ['default', 'other'], 'a tenant named default is not listed twice');
});
