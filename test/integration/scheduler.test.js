// Scheduling and coalescing through the real server: many concurrent clients share executions and
// each gets exactly its own rows back; a flood on one model does not starve another; a full
// queue answers RESOURCE_EXHAUSTED.
import { appendFileSync } from 'node:fs';
import path from 'node:path';
import test from 'ava';
import { status } from '@grpc/grpc-js';
import { InferenceClient } from '../../dist/client/client.js';
import { dataAs, FIXTURES, makeRepository, ROOT, startServer, tempDir, tensor } from '../helpers/server.js';
import { present } from '../helpers/checks.js';
import { ControlClient } from '../../dist/client/control.js';
import { mlpLayers, writeBundle } from '../helpers/mlp-catalog.js';

const MODELS = path.join(FIXTURES, 'models');
/** @type {{ server: import('../helpers/server.js').Server, temp: import('../helpers/server.js').TempDir }[]} */
const servers = [];

/** A server of echo, convnet and digits with these scheduler settings, stopped after the tests. */
async function serve(scheduler = {}) {
  const temp = tempDir();
  const repo = makeRepository(temp.dir, {
    echo: path.join(MODELS, 'echo'),
    convnet: path.join(MODELS, 'convnet'),
    digits: path.join(ROOT, 'bundles', 'digits'),
  });
  const server = await startServer({ model_repo: repo, global: { scheduler } }, { root: temp.dir });
  servers.push({ server, temp });
  return server;
}

test.after.always(async () => {
  for (const { server, temp } of servers) {
    await server.stop();
    temp.cleanup();
  }
});

/**
 * A convnet input whose every row is unique to (client, request, row).
 * @param {number} client
 * @param {number} request
 * @param {number} rows
 */
function image(client, request, rows) {
  const data = new Float32Array(rows * 3 * 32 * 32);
  for (let r = 0; r < rows; r++) {
    for (let i = 0; i < 3 * 32 * 32; i++) data[r * 3 * 32 * 32 + i] = Math.sin(client * 7.1 + request * 1.3 + r * 0.37 + i * 0.001);
  }
  return tensor('image', 'FP32', [rows, 3, 32, 32], data);
}

const stats = async (/** @type {InferenceClient} */ client, /** @type {string} */ name) => (await client.call('ModelStatistics', { name })).model_stats[0];

test.serial('32 concurrent clients share executions and each gets exactly its own rows back', async (t) => {
  const server = await serve();
  const { client } = server;
  const CLIENTS = 32;
  const REQUESTS = 4;
  const rowsOf = (/** @type {number} */ c, /** @type {number} */ r) => 1 + ((c + r) % 3);
  // References: every request alone, one at a time (nothing to coalesce with).
  /** @type {Map<string, Float32Array>} */
  const expected = new Map();
  for (let c = 0; c < CLIENTS; c++) {
    for (let r = 0; r < REQUESTS; r++) {
      const { outputs } = await client.infer('convnet', [image(c, r, rowsOf(c, r))]);
      expected.set(`${c}/${r}`, dataAs(outputs[0], Float32Array));
    }
  }
  const before = await stats(client, 'convnet');
  await Promise.all(Array.from({ length: CLIENTS }, async (_, c) => {
    for (let r = 0; r < REQUESTS; r++) {
      const { outputs } = await client.infer('convnet', [image(c, r, rowsOf(c, r))]);
      const want = present(expected.get(`${c}/${r}`));
      t.deepEqual(outputs[0].shape, [rowsOf(c, r), 10]);
      const got = /** @type {Float32Array} */ (outputs[0].data);
      const worst = Math.max(...want.map((v, i) => Math.abs(v - got[i])));
      t.true(worst < 1e-4, `client ${c} request ${r}: rows differ by ${worst}`);
    }
  }));
  const after = await stats(client, 'convnet');
  const requests = CLIENTS * REQUESTS;
  let rows = 0;
  for (let c = 0; c < CLIENTS; c++) for (let r = 0; r < REQUESTS; r++) rows += rowsOf(c, r);
  const executions = Number(after.execution_count) - Number(before.execution_count);
  t.is(Number(after.inference_count) - Number(before.inference_count), rows, 'inference_count counts rows');
  t.is(Number(after.inference_stats.success.count) - Number(before.inference_stats.success.count), requests);
  t.true(executions < requests, `${executions} executions for ${requests} requests`);
  t.is(after.batch_stats.reduce((sum, b) => sum + Number(b.compute_infer.count), 0), Number(after.execution_count));
  t.true(after.batch_stats.some((b) => Number(b.batch_size) > 3), 'some executions carried several requests (of 1 to 3 rows each)');
  t.log(`${requests} requests (${rows} rows) ran in ${executions} executions`);
});

test.serial('rows of concurrent requests are never mixed up (exact, on the identity model)', async (t) => {
  const server = await serve();
  await Promise.all(Array.from({ length: 32 }, async (_, c) => {
    for (let r = 0; r < 8; r++) {
      const rows = 1 + (r % 3);
      const x = Float32Array.from({ length: rows * 1024 }, (_, i) => c * 10_000 + r * 100 + (i % 97));
      const { outputs } = await server.client.infer('echo', [{ name: 'x', datatype: 'FP32', shape: [rows, 1024], data: x }]);
      t.deepEqual(outputs[0].data, x);
    }
  }));
});

test.serial('under a flood on one model, a rare model\'s requests wait for no more than the batch running, not the flood\'s queue', async (t) => {
  // Counted in the flood's executions that finish while a rare request waits, not in milliseconds,
  // so that a busy machine (which slows every execution alike) does not fail it: 16 flood clients
  // keep about four full executions queued; a rare request waits at most for the one running (and
  // the statistics reads around it, each answered between executions). Measured: median 3 here,
  // 6 with scheduler.discipline fifo, where it waits behind the whole queue.
  const server = await serve();
  const { client } = server;
  let flooding = true;
  const flood = Promise.all(Array.from({ length: 16 }, async (_, c) => {
    let sent = 0;
    while (flooding && sent < 200) await client.infer('convnet', [image(c, sent++, 8)]);
    return sent;
  }));
  // The rare model's client has a connection of its own, as a separate client would.
  const rare = new InferenceClient(server.address);
  t.teardown(() => rare.close());
  const executions = async () => Number((await stats(rare, 'convnet')).execution_count);
  await new Promise((resolve) => setTimeout(resolve, 300)); // the flood's queue fills
  /** @type {number[]} */
  const passed = [];
  for (let i = 0; i < 20; i++) {
    const before = await executions();
    await rare.infer('digits', [{ name: 'image', datatype: 'FP32', shape: [1, 8, 8], data: new Float32Array(64) }], { outputs: ['label'] });
    passed.push((await executions()) - before);
  }
  flooding = false;
  const sent = (await flood).reduce((a, b) => a + b, 0);
  t.true(sent > 0);
  const median = [...passed].sort((a, b) => a - b)[passed.length >> 1];
  t.true(median <= 4, `the flood's executions that finished while a rare request waited: median ${median} (${passed.join(', ')})`);
  t.log(`flood executions during each rare request: ${passed.join(', ')}; ${sent} flood requests`);
});

test.serial('a request whose deadline passes while it is queued never runs', async (t) => {
  const server = await serve();
  const { client } = server;
  const before = await stats(client, 'convnet');
  // The 32-row request fills a whole execution; the 1-row one queues behind it with 2 ms to live.
  const [big, late] = await Promise.allSettled([
    client.infer('convnet', [image(0, 0, 32)]),
    client.infer('convnet', [image(0, 1, 1)], { parameters: { timeout: { int64_param: '2000' } } }),
  ]);
  t.is(big.status, 'fulfilled');
  t.is(late.status, 'rejected');
  t.is(late.status === 'rejected' && late.reason.code, status.DEADLINE_EXCEEDED);
  const after = await stats(client, 'convnet');
  t.is(Number(after.inference_count) - Number(before.inference_count), 32, 'only the big request\'s rows ran');
  t.is(Number(after.inference_stats.fail.count) - Number(before.inference_stats.fail.count), 1);
});

test.serial('a full queue answers RESOURCE_EXHAUSTED naming the model and the cap, and the rest are served; the window\'s rate counts what it refused', async (t) => {
  const server = await serve({ max_queue_depth: 1 });
  const { client } = server;
  const control = new ControlClient(server.address);
  t.teardown(() => control.close());
  // A window of convnet's counters opened before the burst, read again after it (the node's reads lie between each call's ends).
  const WINDOW_S = 0.3;
  const windowed = async () => /** @type {import('../../dist/client/control.js').ModelControlStatus} */ ((await control.call('ModelControlStatus', { name: 'convnet', window_seconds: WINDOW_S, fresh: true })).models[0]);
  const opening = [performance.now()];
  await windowed();
  opening.push(performance.now());
  // A 32-row request keeps the device busy while ten single requests arrive behind it.
  const results = await Promise.allSettled([
    client.infer('convnet', [image(0, 0, 32)]),
    ...Array.from({ length: 10 }, (_, i) => client.infer('convnet', [image(1, i, 1)])),
  ]);
  t.is(results[0].status, 'fulfilled');
  const rejected = results.filter((r) => r.status === 'rejected');
  t.true(rejected.length >= 1, 'at least one request found the queue full');
  for (const r of rejected) {
    t.is(r.reason.code, status.RESOURCE_EXHAUSTED);
    t.regex(r.reason.details, /model "convnet" already has 1 requests queued \(scheduler\.max_queue_depth\)/);
  }
  // Into the next window: its rate is every row that came, 42, the refused included (answers alone: 42 less those).
  await new Promise((resolve) => setTimeout(resolve, WINDOW_S * 1000 + 50 - (Date.now() % (WINDOW_S * 1000))));
  const closing = [performance.now()];
  const w = await windowed();
  closing.push(performance.now());
  const [shortest, longest] = [(closing[0] - opening[1]) / 1000, (closing[1] - opening[0]) / 1000];
  t.true(w.window_rate * longest >= 42 - 1e-6 && w.window_rate * shortest <= 42 + 1e-6,
    `${w.window_rate} rows a second over ${shortest.toFixed(3)}-${longest.toFixed(3)} s: 42 rows came, ${rejected.length} refused`);
  const { outputs } = await client.infer('convnet', [image(2, 0, 1)]);
  t.deepEqual(outputs[0].shape, [1, 10]);
});

test.serial('a manifest\'s scheduling.priority is its model\'s level: its requests pass a queue of another model\'s at the default level; ModelConfig says it; a level above the node\'s is refused at load', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const repo = path.join(temp.dir, 'repo');
  writeBundle(repo, 'slow', mlpLayers(11, [512, 4096, 4096, 8]));
  writeBundle(repo, 'urgent', mlpLayers(12, [512, 64, 8]));
  appendFileSync(path.join(repo, 'urgent', 'manifest.yaml'), 'scheduling: { priority: 1 }\n');
  writeBundle(repo, 'overridden', mlpLayers(14, [512, 64, 8]));
  appendFileSync(path.join(repo, 'overridden', 'manifest.yaml'), 'scheduling: { priority: 1 }\n');
  writeBundle(repo, 'beyond', mlpLayers(13, [512, 64, 8]));
  appendFileSync(path.join(repo, 'beyond', 'manifest.yaml'), 'scheduling: { priority: 5 }\n');
  const server = await startServer({ model_repo: repo, global: { runtime: { cpu_device_memory_bytes: 2 ** 30 }, scheduler: { discipline: 'fifo', models: { slow: { max_batch_size: 1 }, overridden: { priority: 3 } } } } }, { root: temp.dir });
  const control = new ControlClient(server.address);
  t.teardown(async () => {
    control.close();
    await server.stop();
  });
  const { models: index } = await server.client.call('RepositoryIndex', { repository_name: '', ready: false });
  const beyond = index.find((/** @type {{ name: string }} */ m) => m.name === 'beyond');
  t.is(beyond?.state, 'UNAVAILABLE');
  t.regex(beyond?.reason ?? '', /scheduling\.priority 5 is above this node's scheduler\.priority_levels 3/);
  const level = async (/** @type {string} */ name) => Number((await server.client.call('ModelConfig', { name, version: '' })).config.dynamic_batching?.default_priority_level);
  t.deepEqual([await level('urgent'), await level('overridden')], [1, 3], 'the manifest\'s level; the node file\'s over it');
  // fifo: without its level it would wait behind the other model's queue, as it came after it.
  const x = tensor('x', 'FP32', [1, 512], new Float32Array(512).fill(0.25));
  let done = 0;
  const queue = Array.from({ length: 60 }, () => server.client.infer('slow', [x]).then(() => { done++; }));
  let depth = 0;
  for (let i = 0; i < 500 && depth < 30; i++) {
    depth = Number((await control.call('ModelControlStatus', { name: 'slow', fresh: true })).models[0].queue_depth);
    if (depth < 30) await new Promise((r) => setTimeout(r, 5));
  }
  const atSend = done;
  await server.client.infer('urgent', [x]); // naming no priority
  const whileWaiting = done - atSend;
  await Promise.all(queue);
  t.log(`urgent waited while ${whileWaiting} of a queue of ${depth} ran`);
  t.true(depth >= 30, 'the queue was deep when it came');
  t.true(whileWaiting <= depth / 4, 'it passed the queue');
});

test.serial('priorities: a request of level 1 passes a queue of level 3 requests on the same model, over gRPC; one above the levels is refused over gRPC and REST', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  // A model slow enough on the CPU (two 4096-wide layers, several ms a run) that requests queue
  // behind one another, one per execution.
  const repo = path.join(temp.dir, 'repo');
  writeBundle(repo, 'slow', mlpLayers(11, [512, 4096, 4096, 8]));
  const server = await startServer({ model_repo: repo, global: { runtime: { cpu_device_memory_bytes: 2 ** 30 }, scheduler: { models: { slow: { max_batch_size: 1 } } } } }, { root: temp.dir });
  const control = new ControlClient(server.address);
  t.teardown(async () => {
    control.close();
    await server.stop();
  });
  const x = tensor('x', 'FP32', [1, 512], new Float32Array(512).fill(0.25));
  const call = (/** @type {number} */ priority) => server.client.infer('slow', [x], { parameters: { priority: { uint64_param: String(priority) } } });
  /** Of a queue of level-3 requests, how many ran while one more, at `priority`, waited: and how deep the queue was when it came. */
  const overtaken = async (/** @type {number} */ priority) => {
    let done = 0;
    const queue = Array.from({ length: 150 }, () => call(3).then(() => { done++; }));
    let depth = 0;
    for (let i = 0; i < 500 && depth < 100; i++) {
      depth = Number((await control.call('ModelControlStatus', { name: 'slow', fresh: true })).models[0].queue_depth);
      if (depth < 100) await new Promise((r) => setTimeout(r, 5));
    }
    const atSend = done;
    let whileWaiting = -1;
    await call(priority).then(() => { whileWaiting = done - atSend; });
    await Promise.all(queue);
    return { depth, whileWaiting };
  };
  const high = await overtaken(1);
  const same = await overtaken(3);
  t.log(`level 1 waited while ${high.whileWaiting} of a queue of ${high.depth} ran; level 3 while ${same.whileWaiting} of ${same.depth}`);
  t.true(high.depth >= 100 && same.depth >= 100, 'the queue was 100 deep or more when the last request came (issue 65)');
  // What ran meanwhile: the execution under way, and those that ran while the request crossed the
  // client, the edge and the device's inbox (a few on a busy machine): it passed the rest.
  t.true(high.whileWaiting <= high.depth / 4, 'level 1 passed the queue');
  // Answers reach the client in about the order they were given, not exactly: a quarter's slack both ways.
  t.true(same.whileWaiting >= (same.depth * 3) / 4, 'level 3, like the queue, waited its turn');
  const refused = await t.throwsAsync(call(4));
  t.is(/** @type {any} */ (refused).code, status.INVALID_ARGUMENT);
  t.regex(/** @type {any} */ (refused).details, /priority 4 is above this server's 3 priority levels \(scheduler\.priority_levels\)/);
  const rest = await fetch(`${server.rest}/v2/models/slow/infer`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ parameters: { priority: 7 }, inputs: [{ name: 'x', datatype: 'FP32', shape: [1, 512], data: Array.from({ length: 512 }, () => 0.5) }] }),
  });
  t.is(rest.status, 400);
  t.regex(/** @type {{ error: string }} */ (await rest.json()).error, /priority 7 is above this server's 3 priority levels/);
});

for (const edgeThreads of [0, 2]) {
  test.serial(`edge_threads ${edgeThreads}: deadlines refused at admission: a request the device's published backlog would keep past its deadline is refused at once, before it runs; at priority 1 the same deadline is met`, async (t) => {
    const temp = tempDir();
    t.teardown(temp.cleanup);
    // A model of a few ms a run, one request per execution: a queue of hundreds is a backlog of a second or so.
    const repo = path.join(temp.dir, 'repo');
    writeBundle(repo, 'slow', mlpLayers(11, [512, 2048, 2048, 8]));
    const server = await startServer({ model_repo: repo, global: { endpoints: { edge_threads: edgeThreads }, runtime: { cpu_device_memory_bytes: 2 ** 30 }, scheduler: { models: { slow: { max_batch_size: 1 } } } } }, { root: temp.dir });
    const control = new ControlClient(server.address);
    t.teardown(async () => {
      control.close();
      await server.stop();
    });
    const x = tensor('x', 'FP32', [1, 512], new Float32Array(512).fill(0.25));
    const call = (/** @type {number} */ priority, /** @type {number} */ timeoutMs = 0) => server.client.infer('slow', [x], {
      parameters: { priority: { uint64_param: String(priority) }, ...(timeoutMs ? { timeout: { int64_param: String(timeoutMs * 1000) } } : {}) },
    });
    // Its run learned by the device and by the thread that holds the requests (both edges, with two).
    for (let i = 0; i < 3; i++) await call(2);
    const started = performance.now();
    for (let i = 0; i < 3; i++) await call(2);
    const runMs = (performance.now() - started) / 3; // a run and a round trip, once warm
    // A queue of 400 at level 3: the backlog says far more work waits than the deadline below leaves.
    // Level 1 waits at most the run under way, then its own: well within 4 runs.
    const deadlineMs = Math.max(100, Math.round(4 * runMs));
    const queue = Array.from({ length: 400 }, () => call(3));
    let depth = 0;
    for (let i = 0; i < 500 && depth < 200; i++) {
      depth = Number((await control.call('ModelControlStatus', { name: 'slow', fresh: true })).models[0].queue_depth);
      if (depth < 200) await new Promise((r) => setTimeout(r, 5));
    }
    const stats = async () => (await server.client.call('ModelStatistics', { name: 'slow' })).model_stats[0].inference_stats.fail;
    const before = await stats();
    const refused = await call(3, deadlineMs).catch((/** @type {any} */ e) => e);
    const after = await stats();
    t.is(refused.code, status.DEADLINE_EXCEEDED);
    t.regex(refused.details, /request for model "slow" refused before it ran: its deadline is \d+ ms away, and the device has \d+ ms of work ahead of it at priority 3 and above, then its run takes about \d+ ms/);
    t.is(Number(after.count) - Number(before.count), 1, 'counted as a failure of the model');
    t.log(`run ${runMs.toFixed(1)} ms, queue ${depth}, deadline ${deadlineMs} ms: refused in ${((Number(after.ns) - Number(before.ns)) / 1e6).toFixed(3)} ms of the path`);
    // At level 1 only the batch running now is ahead of it: the same deadline is met.
    await t.notThrowsAsync(call(1, deadlineMs), 'priority 1 passes the queue within the deadline');
    await Promise.all(queue);
  });
}
