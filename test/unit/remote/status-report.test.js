// The pooled gateway's reading of a node's ModelControlStatus answer (remote/status-report.ts), against
// the bytes protobufjs writes from proto/control.proto, so that a field renumbered in the proto
// fails here: every field placement reads, 64-bit counts past 2^32, a model not READY left out, the
// fields it does not read skipped whatever their wire type, and a truncated answer refused; a
// versioned answer's version, changes and gone names, and the changes applied to the report held;
// a full answer's weight bytes alone, as read with the index.
import test from 'ava';
import { loadControlClient } from '../../../dist/protocol/proto.js';
import { applyChanges, readStatusReport, readWeightBytes } from '../../../dist/remote/status-report.js';

const { ModelControlStatus: rpc } = loadControlClient().service;

/**
 * Every field of a model's status set, those placement does not read included.
 * @param {string} name
 * @param {string} state
 * @param {number} k
 */
const model = (name, state, k) => ({
  name, state, reason: state === 'READY' ? '' : 'loading', instance: `${name}#3`, residency: 'system',
  resident_bytes: String(2 ** 33 + k), device: -1, queue_depth: 4 + k, learned_cost: [{ batch_size: 8, ms: 2.5 }, { batch_size: 1, ms: 0.7 }],
  weight: 1.5, max_batch_size: 16, placed_devices: [0, 1], session_device_bytes: '12345', cuda_graphs: 'on',
  weight_bytes: String(5 * 2 ** 32 + k), compute_seconds: 12.25, weight_hits: String(2 ** 40 + k), weight_misses: String(7 + k),
  window_load: 0.125 * (k + 1), window_resident_bytes: String(2 ** 34 + k), session: 'shared with 3', session_bytes: String(2 ** 36 + k),
  window_rate: 1000.5 + k, window_capacity: 2666.75 * (k + 1), window_weight_load: 0.0625 * (k + 1),
});

test('a ModelControlStatus answer is read field by field as protobufjs wrote it', (t) => {
  const bytes = rpc.responseSerialize({
    models: [model('résnet-ü', 'READY', 0), model('loading-one', 'LOADING', 1), model('m2', 'READY', 2)],
    weight_budget_bytes: String(3 * 2 ** 35), devices: 2, queue_depth: 17, snapshot_age_seconds: 0.4,
    node_name: 'node-a', started_unix_ms: String(1_790_000_000_123), repository_digest: 'abc123', session_budget_bytes: String(2 ** 37),
    window_end_unix_ms: String(1_790_000_002_000),
  });
  const { report, digest, version, changesOnly, notReady, windowEndMs } = readStatusReport(bytes);
  t.is(windowEndMs, 1_790_000_002_000);
  t.is(digest, 'abc123');
  t.is(version, 0, 'not versioned');
  t.false(changesOnly);
  t.deepEqual(notReady, ['loading-one']);
  t.is(report.nodeName, 'node-a');
  t.is(report.startedMs, 1_790_000_000_123);
  t.is(report.budgetBytes, 3 * 2 ** 35);
  t.is(report.sessionBudgetBytes, 2 ** 37);
  t.is(report.devices, 2);
  t.is(report.queueDepth, 17);
  t.deepEqual([...report.models.keys()], ['résnet-ü', 'm2'], 'a model not READY is left out');
  t.deepEqual(report.models.get('m2'), {
    weightBytes: 5 * 2 ** 32 + 2, residentBytes: 2 ** 33 + 2, windowLoad: 0.375, windowResidentBytes: 2 ** 34 + 2, hits: 2 ** 40 + 2, misses: 9, sessionBytes: 2 ** 36 + 2,
    windowRate: 1002.5, windowCapacity: 2666.75 * 3, windowWeightLoad: 0.1875,
  });
});

test('an answer of defaults reads as an empty report, and a truncated one is refused', (t) => {
  const empty = readStatusReport(rpc.responseSerialize({ models: [] }));
  t.deepEqual(empty, {
    report: { nodeName: '', startedMs: 0, budgetBytes: 0, sessionBudgetBytes: 0, devices: 0, queueDepth: 0, models: new Map() },
    digest: '', version: 0, changesOnly: false, gone: [], notReady: [], windowEndMs: 0,
  });
  const bytes = rpc.responseSerialize({ models: [model('m0', 'READY', 0)], node_name: 'node-b' });
  t.throws(() => readStatusReport(bytes.subarray(0, bytes.length - 3)), { message: /ModelControlStatus answer malformed/ });
});

test('a versioned answer of changes is read and applied to the report held: rows set, the gone and the no longer READY dropped', (t) => {
  const started = String(1_790_000_000_123);
  const whole = readStatusReport(rpc.responseSerialize({
    models: [model('a', 'READY', 0), model('b', 'READY', 1), model('c', 'READY', 2)],
    node_name: 'node-a', started_unix_ms: started, weight_budget_bytes: '1000', report_version: String(1_790_000_000_130),
  }));
  t.is(whole.version, 1_790_000_000_130);
  t.false(whole.changesOnly);
  const held = whole.report;
  const changes = readStatusReport(rpc.responseSerialize({
    models: [model('b', 'READY', 5), model('c', 'UNLOADING', 2), model('d', 'READY', 3)],
    node_name: 'node-a', started_unix_ms: started, weight_budget_bytes: '2000', queue_depth: 3,
    report_version: String(1_790_000_000_133), changes_only: true, gone: ['a'],
  }));
  t.true(changes.changesOnly);
  t.is(changes.version, 1_790_000_000_133);
  t.deepEqual(changes.gone, ['a']);
  t.deepEqual(changes.notReady, ['c']);
  const now = applyChanges(held, changes);
  t.deepEqual([...now.models.keys()].sort(), ['b', 'd']);
  t.is(now.models.get('b')?.windowLoad, 0.125 * 6, 'the changed row is the answer\'s');
  t.is(now.models.get('d')?.windowRate, 1003.5);
  t.is(now.budgetBytes, 2000, 'the node\'s own figures are the answer\'s');
  t.is(now.queueDepth, 3);
  t.is(now.models, held.models, 'the held map, brought up to date in place');
});

test('a full answer\'s weight bytes are read alone: READY models only, 64-bit counts whole, the rest skipped', (t) => {
  const bytes = rpc.responseSerialize({
    models: [model('résnet-ü', 'READY', 0), model('loading-one', 'LOADING', 1), model('m2', 'READY', 2), { name: 'plain', state: 'READY' }],
    weight_budget_bytes: String(3 * 2 ** 35), node_name: 'node-a', repository_digest: 'abc123',
  });
  t.deepEqual([...readWeightBytes(bytes)], [['résnet-ü', 5 * 2 ** 32], ['m2', 5 * 2 ** 32 + 2], ['plain', 0]]);
  const expected = [...readStatusReport(bytes).report.models].map(([name, m]) => [name, m.weightBytes]);
  t.deepEqual([...readWeightBytes(bytes)], expected, 'the same as the whole report\'s');
  t.throws(() => readWeightBytes(bytes.subarray(0, bytes.length - 3)), { message: /ModelControlStatus answer malformed/ });
});
