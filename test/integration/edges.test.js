// Edge threads (endpoints.edge_threads, src/actors/edge/): gRPC and REST terminated by two threads
// on the same ports, connections spread over them by the kernel, one admission and one log level
// for all of them. The rest of the integration suites run with edge threads too (test/run.sh runs
// them again with INFERENCE_SERVER_ENDPOINTS_EDGE_THREADS=2); an edge's crash is in
// test/adversarial/faults.test.js.
import http from 'node:http';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import test from 'ava';
import { status } from '@grpc/grpc-js';
import { InferenceClient } from '../../dist/client/client.js';
import { createRegion, destroyRegion, readRegion, writeRegion } from '../../dist/client/shared-memory.js';
import { FIXTURES, ROOT, makeRepository, metric, scrapeMetrics, startServer, tempDir, tensor } from '../helpers/server.js';
import { mlpExpected, mlpLayers, writeBundle } from '../helpers/mlp-catalog.js';
import { grpcError } from '../helpers/errors.js';

/** A client on a connection of its own (grpc-js shares connections between clients of one target unless told not to). */
const ownConnection = (/** @type {string} */ address) => new InferenceClient(address, { 'grpc.use_local_subchannel_pool': 1 });

const digit = () => tensor('image', 'FP32', [1, 8, 8], new Float32Array(64).fill(3));

/** A REST inference on a connection of its own (no keep-alive agent). */
function restInfer(/** @type {string} */ rest, /** @type {string} */ model, /** @type {object} */ body) {
  const url = new URL(`${rest}/v2/models/${model}/infer`);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: url.hostname, port: url.port, path: url.pathname, method: 'POST', agent: false, headers: { 'content-type': 'application/json' } }, (res) => {
      let text = '';
      res.on('data', (chunk) => { text += chunk; });
      res.on('end', () => resolve({ status: res.statusCode, body: text }));
    });
    req.on('error', reject);
    req.end(JSON.stringify(body));
  });
}

/**
 * A server with two edge threads serving digits, and twelve clients on connections of their own
 * (which the kernel spreads over the edges); both stopped by the test's teardown.
 * @param {import('ava').ExecutionContext} t
 */
async function twoEdges(t) {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const repo = makeRepository(temp.dir, { digits: path.join(ROOT, 'bundles', 'digits') });
  const server = await startServer({ model_repo: repo, global: { endpoints: { edge_threads: 2 } } }, { root: temp.dir });
  t.teardown(() => server.stop());
  const clients = Array.from({ length: 12 }, () => ownConnection(server.address));
  t.teardown(() => clients.forEach((c) => c.close()));
  return { server, clients };
}

test('two edge threads serve gRPC and REST on the same ports, and connections land on both', async (t) => {
  const { server, clients } = await twoEdges(t);
  const answers = await Promise.all(clients.map((c) => c.infer('digits', [digit()], { outputs: ['label'] })));
  t.true(answers.every((a) => a.outputs[0].datatype === 'INT64'));
  const body = { inputs: [{ name: 'image', datatype: 'FP32', shape: [1, 8, 8], data: Array(64).fill(3) }], outputs: [{ name: 'label' }] };
  // Exact at once: each edge counted its requests in shared memory before it answered them (shared/request-counters.ts).
  const grpcOnly = await scrapeMetrics(server.adminPort);
  t.true([0, 1].every((edge) => metric(grpcOnly, 'stowage_edge_requests_total', `edge="${edge}"`) > 0), 'gRPC connections on both edges');
  const rest = await Promise.all(Array.from({ length: 12 }, () => restInfer(/** @type {string} */ (server.rest), 'digits', body)));
  t.true(rest.every((r) => r.status === 200), JSON.stringify(rest.filter((r) => r.status !== 200)));
  const m = await scrapeMetrics(server.adminPort);
  const perEdge = [0, 1].map((edge) => metric(m, 'stowage_edge_requests_total', `edge="${edge}"`));
  t.log(`requests per edge: ${perEdge.join(', ')}`);
  t.is(perEdge[0] + perEdge[1], 24, 'every request counted once, by the edge that took it');
  t.true(perEdge.every((n) => n > 0), 'the kernel spread the connections over both edges');
  t.true(perEdge.every((n, edge) => n > metric(grpcOnly, 'stowage_edge_requests_total', `edge="${edge}"`)), 'REST connections on both edges');
  t.is(metric(m, 'stowage_edge_requests_total', 'edge="main"'), 0, 'the main thread terminates nothing');
  // digits is plain (inline, no hooks): every request went from its edge to the device directly.
  t.deepEqual([0, 1].map((edge) => metric(m, 'stowage_edge_served_requests_total', `edge="${edge}"`)), perEdge, 'every request served by its edge');
  t.deepEqual([0, 1].map((edge) => metric(m, 'stowage_edge_direct_requests_total', `edge="${edge}"`)), perEdge, 'the old name, a deprecated alias for one release, says the same');
  t.is(metric(m, 'stowage_thread_heap_bytes', 'thread="edge-1",kind="used"') > 0, true, 'each edge thread\'s heap is reported');
  // One view of the statistics, whichever edge each request came through.
  const { model_stats: [stats] } = await server.client.call('ModelStatistics', { name: 'digits' });
  t.is(Number(stats.inference_stats.success.count), 24);
});

test('statistics read right after an answer count it and its execution, whichever edge answered and whichever edge is asked', async (t) => {
  const { clients } = await twoEdges(t);
  const counts = async (/** @type {InferenceClient} */ c) => {
    const [stats] = (await c.call('ModelStatistics', { name: 'digits' })).model_stats;
    return { success: Number(stats.inference_stats.success.count), executions: Number(stats.execution_count) };
  };
  let missed = 0;
  let expected = await counts(clients[0]);
  // Each answer comes from one edge and the next read of the statistics through another
  // connection (often the other edge): the request (counted by the edge in shared memory) and
  // its execution (reported by the device, heard before the read is answered) count by then.
  for (let round = 0; round < 40; round++) {
    await clients[round % 12].infer('digits', [digit()], { outputs: ['label'] });
    const read = await counts(clients[(round + 5) % 12]);
    if (read.success !== expected.success + 1 || read.executions !== expected.executions + 1) missed++;
    expected = read;
  }
  t.is(missed, 0, 'every read counted the request answered just before it, and the one execution it rode in');
});

test('admission counts the requests of every edge together', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  // gated: echo with a preprocess hook that holds each request until its gate file exists.
  const echo = path.join(FIXTURES, 'models', 'echo');
  const repo = makeRepository(temp.dir, { echo, gated: echo }, { 'gated/model.js': readFileSync(path.join(FIXTURES, 'hooks', 'gated.js')) });
  const server = await startServer({ model_repo: repo, global: { endpoints: { edge_threads: 2, max_concurrent_requests: 3 } } }, { root: temp.dir });
  t.teardown(() => server.stop());
  /** @type {ReturnType<typeof ownConnection>[]} */
  const opened = [];
  t.teardown(() => opened.forEach((c) => c.close()));
  const x = tensor('x', 'FP32', [1, 1024], new Float32Array(1024).fill(2));
  // The connections first (one request at a time: the cap is 3), each edge's told by its count; the
  // kernel spreads them over the edges by a hash, so eight may all land on one: open more until both
  // have one (at most 40).
  /** @type {number[]} */
  const edgeOf = [];
  let counted = [0, 0];
  while ((opened.length < 8 || !(edgeOf.includes(0) && edgeOf.includes(1))) && opened.length < 40) {
    const c = ownConnection(server.address);
    opened.push(c);
    await c.infer('echo', [x]);
    const m = await scrapeMetrics(server.adminPort);
    const now = [0, 1].map((edge) => metric(m, 'stowage_edge_requests_total', `edge="${edge}"`));
    edgeOf.push(now[0] > counted[0] ? 0 : 1);
    counted = now;
  }
  t.true(edgeOf.includes(0) && edgeOf.includes(1), 'both edges hold connections');
  // Eight of them, one of each edge among them.
  const firsts = [edgeOf.indexOf(0), edgeOf.indexOf(1)];
  const clients = [...firsts.map((i) => opened[i]), ...opened.filter((_, i) => !firsts.includes(i))].slice(0, 8);
  // Then 16 requests held in flight by their gate, two per connection: 3 may be in flight in all.
  const gate = path.join(temp.dir, 'gate');
  const gated = { parameters: { gate: { parameter_choice: /** @type {const} */ ('string_param'), string_param: gate } } };
  const burst = clients.flatMap((c) => [c.infer('gated', [x], gated), c.infer('gated', [x], gated)]);
  const settled = Promise.allSettled(burst);
  for (let i = 0; i < 200 && (await scrapeMetrics(server.adminPort)).stowage_grpc_shed_total < 13; i++) await new Promise((resolve) => setTimeout(resolve, 10));
  const during = await scrapeMetrics(server.adminPort);
  t.is(during.stowage_grpc_inflight_requests, 3, 'three in flight, from whichever edges');
  writeFileSync(gate, '');
  const results = await settled;
  const refused = results.filter((r) => r.status === 'rejected');
  t.is(results.length - refused.length, 3, 'three answered');
  t.is(refused.length, 13);
  for (const r of refused) {
    t.is(/** @type {PromiseRejectedResult} */ (r).reason.code, status.RESOURCE_EXHAUSTED);
    t.regex(/** @type {PromiseRejectedResult} */ (r).reason.details, /3 inference requests in flight \(endpoints\.max_concurrent_requests = 3\)/);
  }
  t.is((await scrapeMetrics(server.adminPort)).stowage_grpc_shed_total, 13, 'each refusal counted once, whichever edge refused it');
});

test('the log level set through LogSettings is every edge\'s', async (t) => {
  const { server, clients } = await twoEdges(t);
  /** Every client asks for a model that is not there: each edge logs the refusal at debug level. */
  const askForNothing = () => Promise.allSettled(clients.map((c) => c.infer('nothing', [digit()])));
  await askForNothing();
  const refusals = () => server.logs.filter((l) => l.edge !== undefined && l.rpc === 'ModelInfer');
  t.is(refusals().length, 0, 'at info, nothing');
  await server.client.call('LogSettings', { settings: { log_verbose_level: { parameter_choice: 'uint32_param', uint32_param: 1 } } });
  await askForNothing();
  await server.waitForLogs((l) => l.edge !== undefined && l.rpc === 'ModelInfer', 12);
  t.deepEqual([...new Set(refusals().map((l) => l.edge))].sort(), [0, 1], 'both edges log at debug now');
});

test('inferences take the request path on their edge, hooked ones with the edge\'s own hook threads; an unload waits for them', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const repo = makeRepository(temp.dir, { digits_u8: path.join(ROOT, 'bundles', 'digits_u8') });
  // A model slow enough (about 10 ms a row here) that requests are still in flight when the unload comes.
  const slow = writeBundle(repo, 'slow', mlpLayers(5, [1024, 2048, 2048, 2048, 16]));
  const server = await startServer({ model_repo: repo, global: { endpoints: { edge_threads: 2 } } }, { root: temp.dir });
  t.teardown(() => server.stop());
  const clients = Array.from({ length: 6 }, () => ownConnection(server.address));
  t.teardown(() => clients.forEach((c) => c.close()));
  const direct = async () => {
    const m = await scrapeMetrics(server.adminPort);
    return [0, 1].reduce((sum, edge) => sum + metric(m, 'stowage_edge_served_requests_total', `edge="${edge}"`), 0);
  };

  // digits_u8 runs a preprocess hook: on the edge's own hook threads, which feed the device through doors of their own.
  const u8 = tensor('image', 'UINT8', [1, 8, 8], new Uint8Array(64).fill(40));
  const labels = await Promise.all(clients.map((c) => c.infer('digits_u8', [u8], { outputs: ['label'] })));
  const reference = await server.client.infer('digits_u8', [u8], { outputs: ['label'] });
  t.deepEqual(labels.map((a) => a.outputs[0].data[0]), Array(6).fill(reference.outputs[0].data[0]), 'each the model\'s answer');
  t.is(await direct(), 7, 'hooked requests take the path on their edge');

  // Twelve requests of 8 rows (each run alone: 8 is the model's largest batch) on the direct path,
  // and the unload while most still wait: it waits for every one.
  const rows = 8;
  const x = Float32Array.from({ length: rows * 1024 }, (_, i) => ((i * 7919) % 200) / 100 - 1);
  const inflight = Array.from({ length: 12 }, (_, i) => clients[i % clients.length].infer('slow', [tensor('x', 'FP32', [rows, 1024], x)]));
  const pending = async () => (await scrapeMetrics(server.adminPort))['nv_inference_pending_request_count{model="slow",version="1"}'] ?? 0;
  while (await pending() < 6) await new Promise((resolve) => setImmediate(resolve));
  const unload = server.client.call('RepositoryModelUnload', { model_name: 'slow' });
  const unloading = await server.waitForLog((l) => l.msg?.startsWith('model unloading') && l.model === 'slow' || false);
  t.true(unloading.inflight > 0, `the edges' leases are counted in flight (${unloading.inflight})`);
  const results = await Promise.allSettled(inflight);
  t.deepEqual(results.map((r) => r.status), Array(12).fill('fulfilled'), JSON.stringify(results.filter((r) => r.status === 'rejected').map((r) => /** @type {PromiseRejectedResult} */ (r).reason.message)));
  const want = mlpExpected(slow.layers, x.subarray(0, 1024));
  for (const r of results) {
    const y = /** @type {Float32Array} */ (/** @type {PromiseFulfilledResult<any>} */ (r).value.outputs[0].data);
    t.true([...want].every((v, k) => Math.abs(y[k] - v) <= 1e-4 * (1 + Math.abs(v))), 'each answer is the model\'s');
  }
  await unload;
  t.is(await direct(), 19, 'the slow model\'s requests took the path on their edge');
  // Unloaded: the edges route it no more, and the main thread says why.
  const err = await grpcError(t, clients[0].infer('slow', [tensor('x', 'FP32', [1, 1024], x.subarray(0, 1024))]));
  t.is(err.code, status.UNAVAILABLE);
  t.regex(err.details, /model "slow" is not ready \(state UNAVAILABLE\): unloaded/);
  const { model_stats: [stats] } = await server.client.call('ModelStatistics', { name: 'slow' });
  t.is(Number(stats.inference_stats.success.count), 12, 'the direct requests are counted once, on the main thread');
  // Loaded again, it is routed on its edge again, from the first request after the load's answer:
  // the load answers once every edge has read its route.
  await server.client.call('RepositoryModelLoad', { model_name: 'slow' });
  await Promise.all(clients.map((c) => c.infer('slow', [tensor('x', 'FP32', [1, 1024], x.subarray(0, 1024))])));
  t.is(await direct(), 19 + clients.length, 'each request after the load served on its edge, none handed to the main thread');
});

test('shared-memory requests take the path on their edge: a region registered through one connection serves every edge, and unregistering it closes it for all', async (t) => {
  const { server, clients } = await twoEdges(t);
  const key = `/stowage_edges_${process.pid}`;
  createRegion(key, 4096);
  t.teardown(() => destroyRegion(key));
  const pixels = Float32Array.from({ length: 64 }, (_, i) => (i * 7) % 17);
  writeRegion(key, 0, pixels);
  const direct = async () => {
    const m = await scrapeMetrics(server.adminPort);
    return [0, 1].reduce((sum, edge) => sum + metric(m, 'stowage_edge_served_requests_total', `edge="${edge}"`), 0);
  };
  const reference = (await clients[0].infer('digits', [tensor('image', 'FP32', [1, 8, 8], pixels)])).outputs;
  await clients[0].registerSystemSharedMemory('in', key, 4096);
  const before = await direct();
  /** @type {import('../../dist/client/client.js').SharedMemoryInput[]} */
  const input = [{ name: 'image', datatype: 'FP32', shape: [1, 8, 8], sharedMemory: { region: 'in', byteSize: 256 } }];
  const outputs = { outputs: [{ name: 'probabilities', sharedMemory: { region: 'in', byteSize: 40, offset: 1024 } }, 'label'] };
  // Right after the register, on every connection: the registration answered once every edge had read the region,
  // so each request is served on its edge.
  const answers = await Promise.all(clients.map((c) => c.infer('digits', input, outputs)));
  for (const a of answers) t.deepEqual([...a.outputs[1].data], [...reference.find((o) => o.name === 'label')?.data ?? []], 'each answer the model\'s');
  const probabilities = new Float32Array(readRegion(key, 1024, 40).buffer.slice(0));
  const want = [...reference.find((o) => o.name === 'probabilities')?.data ?? []].map(Number);
  t.true(want.length === 10 && want.every((v, k) => Math.abs(probabilities[k] - v) <= 1e-5), 'the output written into the region (a batch may round otherwise than a lone run)');
  await Promise.all(clients.map((c) => c.infer('digits', input, outputs)));
  t.is(await direct() - before, 24, 'the edges ran every one themselves (twelve connections, twice)');
  await clients[5].unregisterSystemSharedMemory('in');
  for (const c of clients) {
    const err = await grpcError(t, c.infer('digits', input));
    t.is(err.code, status.NOT_FOUND);
    t.regex(err.details, /no shared-memory region "in" is registered/);
  }
  t.deepEqual(Object.keys(await clients[3].systemSharedMemoryStatus()), []);
});

test('STOWAGE_START_TIMEOUT_SCALE scales the edge threads\' start limit with the device\'s; a value that is not a number above 0 is ignored', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const repo = makeRepository(temp.dir, { digits: path.join(ROOT, 'bundles', 'digits') });
  const config = { model_repo: repo, global: { endpoints: { edge_threads: 1 } } };
  // 1e-9: every 30 s limit becomes 1 ms, which no worker starts in, so the start fails naming the limit used: the
  // device's first (it starts before the edges).
  const tiny = await t.throwsAsync(startServer(config, { root: temp.dir, env: { STOWAGE_START_TIMEOUT_SCALE: '1e-9' } }));
  t.regex(String(tiny?.message), /device 0 is unavailable: its worker did not start within 1 ms/);
  // With the device's limit (the fault knob's, scaled by the same) 60 s, it is the edge that fails.
  const env = { STOWAGE_START_TIMEOUT_SCALE: '1e-9', STOWAGE_FAULT_DEVICE_START_TIMEOUT_MS: String(60e12) };
  const err = await t.throwsAsync(startServer(config, { root: temp.dir, env }));
  t.regex(String(err?.message), /edge thread 0 did not start listening within 1 ms/);
  for (const ignored of ['-5', 'soon']) {
    const server = await startServer(config, { env: { STOWAGE_START_TIMEOUT_SCALE: ignored } });
    t.teardown(() => server.stop());
    t.true(await server.client.serverReady(), `${ignored}: started with the 30 s limits`);
  }
});
