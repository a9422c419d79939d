// What a pooled gateway keeps open to each node instead of a call per node per check, against real
// gRPC servers on 127.0.0.1: the placement thread's status stream (remote/node-status.ts,
// WatchModelControlStatus) and the main thread's health Watch (remote/remote-node.ts,
// grpc.health.v1), each falling back to a call per check on a node that answers UNIMPLEMENTED.
import test from 'ava';
import * as grpc from '@grpc/grpc-js';
import { service as healthService } from 'grpc-health-check';
import { loadControlClient, loadInferenceClient } from '../../../dist/protocol/proto.js';
import { NodeStatus } from '../../../dist/remote/node-status.js';
import { RemoteNode } from '../../../dist/remote/remote-node.js';

const control = loadControlClient().service;
const inference = loadInferenceClient().service;
const sleep = (/** @type {number} */ ms) => new Promise((resolve) => setTimeout(resolve, ms));
/** Resolves once `test()` holds, or fails `t` after 5 s (a stream's message arrives when the loop gets to it). */
async function soon(/** @type {import('ava').ExecutionContext} */ t, /** @type {() => boolean} */ test, /** @type {string} */ what) {
  const deadline = Date.now() + 5_000;
  while (!test() && Date.now() < deadline) await sleep(20);
  t.true(test(), what);
}

/** @param {import('ava').ExecutionContext} t @param {grpc.Server} server */
async function listen(t, server) {
  const port = await new Promise((resolve, reject) => server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))));
  t.teardown(() => server.forceShutdown());
  return `127.0.0.1:${port}`;
}

/** A node's versioned status answer. */
const answer = (/** @type {{ version: number, changesOnly?: boolean, load?: number, started?: number, windowEnd?: number }} */ a) => ({
  models: a.load === undefined ? [] : [{ name: 'm', state: 'READY', weight_bytes: '100', resident_bytes: '100', window_resident_bytes: '100', window_load: a.load }],
  weight_budget_bytes: '1000', devices: 1, node_name: 'node-a', started_unix_ms: String(a.started ?? 1000),
  repository_digest: 'd1', report_version: String(a.version), changes_only: a.changesOnly ?? false, gone: [],
  window_end_unix_ms: String(a.windowEnd ?? 0),
});

const WINDOW_MS = 200;
const statusOptions = {
  windowBytes: 1 << 20, windowMs: WINDOW_MS, reportMaxAgeMs: 10_000,
  encodeStatusRequest: (/** @type {number} */ since) => control.ModelControlStatus.requestSerialize({ name: '', window_seconds: WINDOW_MS / 1000, active_only: true, versioned: true, since_version: String(since) }),
  encodeIndexRequest: () => inference.RepositoryIndex.requestSerialize({}),
  encodePrefetch: () => Buffer.alloc(0),
};

/**
 * A NodeStatus, up, of a node whose control service answers with `handlers`.
 * @param {import('ava').ExecutionContext} t
 * @param {grpc.UntypedServiceImplementation} handlers
 */
async function statusOf(t, handlers) {
  const server = new grpc.Server();
  server.addService(control, handlers);
  const node = new NodeStatus(await listen(t, server), statusOptions);
  t.teardown(() => node.close());
  node.up = true;
  return node;
}

test('the status stream: opened at the first check, applied as the node answers, with no read per check; a late answer waited for; silent past a window and the timeout, a failed read, opened again since the version held', async (t) => {
  /** @type {grpc.ServerWritableStream<any, any>[]} */
  const streams = [];
  /** @type {string[]} */
  const sinces = [];
  let reads = 0;
  const node = await statusOf(t, {
    WatchModelControlStatus: (/** @type {grpc.ServerWritableStream<any, any>} */ call) => {
      streams.push(call);
      sinces.push(call.request.since_version);
      call.write(answer(call.request.since_version === '0' ? { version: 5, load: 0.5 } : { version: 5, changesOnly: true }));
    },
    ModelControlStatus: (/** @type {any} */ _call, /** @type {grpc.sendUnaryData<any>} */ done) => {
      reads++;
      done(null, answer({ version: 5, load: 0.5 }));
    },
  });

  await node.readStatus(10_000);
  t.is(streams.length, 1);
  t.deepEqual(sinces, ['0'], 'the whole report at first');
  t.is(node.report?.models.get('m')?.windowLoad, 0.5);
  const serial = node.reportSerial;

  // The node answers at its window: the report follows with no call from here.
  streams[0].write(answer({ version: 6, changesOnly: true, load: 0.75 }));
  await soon(t, () => node.report?.models.get('m')?.windowLoad === 0.75, 'the answer applied as it came');
  t.true(node.reportSerial > serial);
  streams[0].write(answer({ version: 7, changesOnly: true, load: 0.8 }));
  await soon(t, () => node.report?.models.get('m')?.windowLoad === 0.8, 'the next window\'s answer applied');
  let started = Date.now();
  await node.readStatus(10_000);
  t.true(Date.now() - started < 5_000, 'this window\'s answer came: the check goes on at once, not after the timeout');
  t.is(streams.length, 1, 'checks read the open stream: no call');
  t.is(reads, 0);
  t.false(node.statusFailing);

  // This window's answer is late: the check waits for it, as for a read (every gateway places by the same window).
  started = Date.now();
  setTimeout(() => streams[0].write(answer({ version: 8, changesOnly: true, load: 1.25 })), 150);
  await node.readStatus(10_000);
  t.is(node.report?.models.get('m')?.windowLoad, 1.25, 'placed by the late answer');
  t.true(Date.now() - started < 9_000, `not past the timeout (${Date.now() - started} ms)`);
  streams[0].write(answer({ version: 8, changesOnly: true, load: 0.75 }));
  await soon(t, () => node.report?.models.get('m')?.windowLoad === 0.75, 'the next answer applied');

  // Silent past a window and the read timeout (a node whose status path is stuck): a failed read.
  await sleep(WINDOW_MS + 300);
  await node.readStatus(100);
  t.true(node.statusFailing);
  t.is(node.statusFailures, 1);
  t.is(node.report?.models.get('m')?.windowLoad, 0.75, 'the last report kept');
  await soon(t, () => streams[0].cancelled, 'the silent stream closed');
  // The next check opens it again, since the version held.
  await node.readStatus(10_000);
  t.is(streams.length, 2);
  t.is(sinces[1], '8');
  t.false(node.statusFailing);
  t.is(node.report?.models.get('m')?.windowLoad, 0.75);

  // Changes to a report of another process: refused, and the stream opened again from the whole report.
  streams[1].write(answer({ version: 9, changesOnly: true, load: 2, started: 2000 }));
  await soon(t, () => node.statusFailing, 'refused');
  await soon(t, () => streams[1].cancelled, 'and closed');
  await node.readStatus(10_000);
  t.is(sinces[2], '0');
  t.is(node.report?.startedMs, 1000);
});

test('with the window each answer is over: a check places by the window that ended where its own began, waiting for it when its clock is ahead', async (t) => {
  /** @type {grpc.ServerWritableStream<any, any>[]} */
  const streams = [];
  const HOUR = 3_600_000;
  const node = await statusOf(t, {
    WatchModelControlStatus: (/** @type {grpc.ServerWritableStream<any, any>} */ call) => {
      streams.push(call);
      call.write(answer({ version: 5, load: 0.5, windowEnd: Date.now() + HOUR })); // a window not yet begun by the gateway's clock
    },
  });
  await node.readStatus(10_000);
  t.is(node.report?.models.get('m')?.windowLoad, 0.5);
  // Its window held (no answer since the last check): the check goes on at once.
  let started = Date.now();
  await node.readStatus(10_000);
  t.true(Date.now() - started < 5_000, `${Date.now() - started} ms: at once, not after the timeout`);
  // The window held ended before the gateway's own window began (the node's clock behind): the check
  // waits for the node's next answer, as a read would.
  streams[0].write(answer({ version: 6, changesOnly: true, load: 0.25, windowEnd: Date.now() - HOUR }));
  await soon(t, () => node.report?.models.get('m')?.windowLoad === 0.25, 'an answer of an older window applied');
  started = Date.now();
  setTimeout(() => streams[0].write(answer({ version: 7, changesOnly: true, load: 1.5, windowEnd: Date.now() + HOUR })), 150);
  await node.readStatus(10_000);
  t.is(node.report?.models.get('m')?.windowLoad, 1.5, 'placed by the window it waited for');
  t.true(Date.now() - started >= 140 && Date.now() - started < 9_000, `${Date.now() - started} ms: until it came, not the timeout`);
  t.false(node.statusFailing);
});

test('a node without the status stream is read once a check', async (t) => {
  let reads = 0;
  const node = await statusOf(t, {
    ModelControlStatus: (/** @type {any} */ _call, /** @type {grpc.sendUnaryData<any>} */ done) => {
      reads++;
      done(null, answer({ version: 5, load: 0.5 }));
    },
  });
  await node.readStatus(10_000);
  t.is(reads, 1, 'UNIMPLEMENTED: read in the same check');
  t.is(node.report?.models.get('m')?.windowLoad, 0.5);
  await node.readStatus(10_000);
  t.is(reads, 2);
  t.false(node.statusFailing);
});

test('a node with no status stream free (RESOURCE_EXHAUSTED) is read once in that check, and its stream asked again at the next', async (t) => {
  let reads = 0;
  let watches = 0;
  let room = false;
  const node = await statusOf(t, {
    WatchModelControlStatus: (/** @type {grpc.ServerWritableStream<any, any>} */ call) => {
      watches++;
      if (!room) call.emit('error', { code: grpc.status.RESOURCE_EXHAUSTED, details: 'this thread already has 64 status streams open' });
      else call.write(answer({ version: 7, load: 0.25 }));
    },
    ModelControlStatus: (/** @type {any} */ _call, /** @type {grpc.sendUnaryData<any>} */ done) => {
      reads++;
      done(null, answer({ version: 5, load: 0.5 }));
    },
  });
  await node.readStatus(10_000);
  t.is(watches, 1);
  t.is(reads, 1, 'refused for lack of room: read in the same check');
  t.is(node.report?.models.get('m')?.windowLoad, 0.5);
  t.false(node.statusFailing);
  room = true;
  await node.readStatus(10_000);
  t.is(watches, 2, 'the stream asked for again');
  t.is(reads, 1, 'and, answered, no read');
  t.is(node.report?.models.get('m')?.windowLoad, 0.25);
});

/**
 * A node's health as a pooled gateway sees it, with `watch` false: a node without the health service.
 * @param {import('ava').ExecutionContext} t
 */
async function healthNode(t, watch = true) {
  const server = new grpc.Server();
  /** @type {grpc.ServerWritableStream<any, any>[]} */
  const watches = [];
  const node = { readyCalls: 0, ready: true, watches };
  server.addService(inference, {
    ServerReady: (/** @type {any} */ _call, /** @type {grpc.sendUnaryData<any>} */ done) => {
      node.readyCalls++;
      done(null, { ready: node.ready });
    },
  });
  if (watch) {
    server.addService(/** @type {any} */ (healthService), {
      Watch: (/** @type {grpc.ServerWritableStream<any, any>} */ call) => {
        node.watches.push(call);
        call.write({ status: node.ready ? 'SERVING' : 'NOT_SERVING' });
      },
    });
  }
  const remote = new RemoteNode(await listen(t, server), {
    maxStreams: 4, windowBytes: 1 << 20,
    encodeIndexRequest: () => Buffer.alloc(0),
    ready: {
      encodeReadyRequest: () => inference.ServerReady.requestSerialize({}),
      decodeReady: (/** @type {Buffer} */ b) => /** @type {{ ready: boolean }} */ (inference.ServerReady.responseDeserialize(b)),
      encodeWatchRequest: () => healthService.Watch.requestSerialize({ service: '' }),
      decodeWatch: (/** @type {Buffer} */ b) => /** @type {{ status: string }} */ (healthService.Watch.responseDeserialize(b)),
      intervalMs: 1000, timeoutMs: 1000,
    },
  });
  t.teardown(() => remote.close());
  return { node, remote };
}

test('the health Watch: one probe, then the node\'s word, with no probe per check; a watch that ends is down, and the next check probes', async (t) => {
  const { node, remote } = await healthNode(t);
  t.true(await remote.probe(5_000), 'up: changed');
  t.true(remote.up);
  t.is(node.readyCalls, 1);
  await soon(t, () => node.watches.length === 1, 'watching once up');
  await sleep(50);
  t.false(await remote.probe(5_000));
  t.false(await remote.probe(5_000));
  t.is(node.readyCalls, 1, 'no probe while watching');

  node.watches[0].write({ status: 'NOT_SERVING' });
  await soon(t, () => !remote.up, 'down as soon as the node says so');
  t.true(await remote.probe(5_000), 'the check hears it changed');
  node.watches[0].write({ status: 'SERVING' });
  await soon(t, () => remote.up, 'up again');

  // After a failed call the gateway asks afresh, watching or not.
  await remote.probe(5_000, { fresh: true });
  t.is(node.readyCalls, 2);

  // The node ends the stream (it stops): down, and the next check probes again, then watches again.
  node.watches[0].end();
  await soon(t, () => !remote.up, 'down once the watch ends');
  node.ready = true;
  await remote.probe(5_000);
  t.true(remote.up);
  t.is(node.readyCalls, 3);
  await soon(t, () => node.watches.length === 2, 'watching again');
});

test('a node without the health service is probed at every check', async (t) => {
  const { node, remote } = await healthNode(t, false);
  t.true(await remote.probe(5_000));
  // Once the watch's UNIMPLEMENTED is in, every check probes.
  for (let tries = 0; tries < 100; tries++) {
    const before = node.readyCalls;
    await remote.probe(5_000);
    if (node.readyCalls > before) break;
    await sleep(50);
  }
  t.true(remote.up, 'UNIMPLEMENTED is not down');
  const before = node.readyCalls;
  await remote.probe(5_000);
  await remote.probe(5_000);
  t.is(node.readyCalls, before + 2);
  t.true(remote.up);
});

test('a node whose health probe answers late once stays up; late twice in a row, or refusing connections, it is down', async (t) => {
  let delayMs = 0;
  const server = new grpc.Server();
  server.addService(inference, {
    RepositoryIndex: (/** @type {any} */ _call, /** @type {grpc.sendUnaryData<any>} */ done) => {
      setTimeout(() => done(null, { models: [{ name: 'm', version: '', state: 'READY', reason: '' }] }), delayMs);
    },
  });
  const address = await listen(t, server);
  const remote = new RemoteNode(address, {
    maxStreams: 4, windowBytes: 1 << 20,
    encodeIndexRequest: () => inference.RepositoryIndex.requestSerialize({}),
  });
  t.teardown(() => remote.close());
  await remote.probe(1000);
  t.true(remote.up);
  t.deepEqual(remote.models, ['m']);
  delayMs = 300;
  await remote.probe(100);
  t.true(remote.up, 'one late probe: busy, not gone');
  delayMs = 0;
  await remote.probe(1000);
  t.true(remote.up);
  delayMs = 300;
  await remote.probe(100);
  t.true(remote.up);
  await remote.probe(100);
  t.false(remote.up, 'late twice in a row: down');
  delayMs = 0;
  await remote.probe(1000);
  t.true(remote.up, 'answering again: up');
  delayMs = 300;
  await remote.probe(100, { fresh: true });
  t.false(remote.up, 'late after a failed call: down at once');
  delayMs = 0;
  await remote.probe(1000);
  t.true(remote.up);
  server.forceShutdown();
  await remote.probe(1000);
  t.false(remote.up, 'a refused connection: down at once');
});

test('the index read brings every model\'s weight bytes (a full status answer, no window); nodes of one digest share one read, read at once too; a failed bytes read keeps the list it had and reads again at the next check', async (t) => {
  let indexReads = 0;
  let bytesReads = 0;
  let failBytes = false;
  const server = new grpc.Server();
  server.addService(inference, {
    RepositoryIndex: (/** @type {any} */ _call, /** @type {grpc.sendUnaryData<any>} */ done) => {
      indexReads++;
      done(null, { models: ['a', 'b', 'c'].map((name) => ({ name, version: '', state: 'READY', reason: '' })) });
    },
  });
  server.addService(control, {
    ModelControlStatus: (/** @type {any} */ call, /** @type {grpc.sendUnaryData<any>} */ done) => {
      if (call.request.active_only) return done(null, answer({ version: 1, load: 0.5 }));
      bytesReads++;
      t.is(call.request.window_seconds, 0, 'the bytes read asks for no window');
      if (failBytes) return done({ code: grpc.status.UNAVAILABLE, details: 'bytes read refused' });
      done(null, { ...answer({ version: 0 }), models: [['a', 100], ['b', 200], ['c', 300]].map(([name, b]) => ({ name, state: 'READY', weight_bytes: String(b) })) });
    },
  });
  const address = await listen(t, server);
  const options = {
    ...statusOptions,
    encodeBytesRequest: () => control.ModelControlStatus.requestSerialize({ name: '', window_seconds: 0, active_only: false }),
    indexLists: new Map(),
  };
  const [first, second] = [new NodeStatus(address, options), new NodeStatus(address, options)];
  for (const n of [first, second]) {
    t.teardown(() => n.close());
    n.up = true;
    await n.readStatus(5_000);
  }
  t.true(await first.readIndexIfChanged(5_000));
  t.deepEqual(first.models, ['a', 'b', 'c']);
  t.deepEqual([...(first.modelBytes ?? [])], [['a', 100], ['b', 200], ['c', 300]]);
  t.true(await second.readIndexIfChanged(5_000), 'the second node of digest d1: the shared list');
  t.is(second.modelBytes, first.modelBytes, 'one map for the nodes of one repository');
  t.is(indexReads, 1);
  t.is(bytesReads, 1);
  t.false(await first.readIndexIfChanged(5_000), 'the same digest: nothing read');
  t.is(indexReads, 1);

  // A node of no shared list whose bytes cannot be read: its list is not taken without them.
  failBytes = true;
  const third = new NodeStatus(address, { ...options, indexLists: new Map() });
  t.teardown(() => third.close());
  third.up = true;
  await third.readStatus(5_000);
  t.false(await third.readIndexIfChanged(5_000));
  t.deepEqual(third.models, []);
  t.is(third.modelBytes, undefined);
  failBytes = false;
  t.true(await third.readIndexIfChanged(5_000), 'read again at the next check');
  t.is(third.modelBytes?.get('b'), 200);

  // Nodes of one digest read at once (a gateway's start): one read, which the others wait for.
  const atOnce = { ...options, indexLists: new Map(), indexReads: new Map() };
  const started = [0, 1, 2].map(() => new NodeStatus(address, atOnce));
  for (const n of started) {
    t.teardown(() => n.close());
    n.up = true;
    await n.readStatus(5_000);
  }
  const [indexBefore, bytesBefore] = [indexReads, bytesReads];
  t.deepEqual(await Promise.all(started.map((n) => n.readIndexIfChanged(5_000))), [true, true, true]);
  t.is(indexReads - indexBefore, 1, 'one index read for three nodes read at once');
  t.is(bytesReads - bytesBefore, 1);
  t.true(started.every((n) => n.models === started[0].models && n.modelBytes === started[0].modelBytes), 'one list and one map');
  t.is(atOnce.indexReads.size, 0, 'the read under way is forgotten once done');

  // One that fails: each node waiting reads for itself (and fails alike); each keeps what it had.
  failBytes = true;
  const failing = { ...options, indexLists: new Map(), indexReads: new Map() };
  const unlucky = [0, 1].map(() => new NodeStatus(address, failing));
  for (const n of unlucky) {
    t.teardown(() => n.close());
    n.up = true;
    await n.readStatus(5_000);
  }
  const bytesThen = bytesReads;
  t.deepEqual(await Promise.all(unlucky.map((n) => n.readIndexIfChanged(5_000))), [false, false]);
  t.is(bytesReads - bytesThen, 2, 'the second read for itself once the first failed');
  t.true(unlucky.every((n) => n.models.length === 0 && n.modelBytes === undefined));
});
