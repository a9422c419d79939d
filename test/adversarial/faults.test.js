// Faults the server survives, each on the real server with nothing lost beyond what was in flight
// at the fault: a device worker that dies mid-batch, an edge thread that dies, the repository directory removed and
// restored, a damaged compile cache, two servers compiling into one cache_dir at once, and a
// log reader that goes away. (A hook thread that dies: bad-bundles.test.js; SIGTERM under load:
// integration/operations.test.js.)
import { once } from 'node:events';
import { cpSync, existsSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import test from 'ava';
import { status } from '@grpc/grpc-js';
import { InferenceClient } from '../../dist/client/client.js';
import { dataAs, FIXTURES, makeRepository, metric, ROOT, scrapeMetrics, startServer, tempDir, tensor } from '../helpers/server.js';
import { awaitableCount } from '../helpers/checks.js';
import { classify, classifyUntilStopped, DIGITS, heldout, referenceLabels } from '../helpers/digits.js';

test('a device worker that dies mid-batch fails only its in-flight requests, UNAVAILABLE; it restarts and later requests succeed', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const fault = path.join(temp.dir, 'device-exit');
  const repo = makeRepository(temp.dir, { digits: DIGITS, digits_u8: path.join(ROOT, 'bundles', 'digits_u8') });
  const server = await startServer({ model_repo: repo }, { root: temp.dir, env: { STOWAGE_FAULT_DEVICE_EXIT: fault } });
  t.teardown(() => server.stop());
  const CLIENTS = 8;
  const clients = Array.from({ length: CLIENTS }, () => new InferenceClient(server.address));
  t.teardown(() => clients.forEach((c) => c.close()));
  const reference = await referenceLabels(server.client);
  // digits_u8's preprocess hook sends its tensors to the device directly, through each hook
  // thread's door to the device's worker; the replacement worker needs new doors.
  const referenceU8 = await referenceLabels(server.client, 'digits_u8');

  // Eight clients back to back, half of them through the hook; the fault is armed once a few hundred requests have gone through.
  const ok = awaitableCount();
  const okAfterRestart = awaitableCount();
  let hookedAfterRestart = 0;
  let restarted = false;
  /** @type {import('@grpc/grpc-js').ServiceError[]} */
  const failures = [];
  /** @type {string[]} */
  const wrong = [];
  let stop = false;
  const load = clients.map(async (c, k) => {
    for (let i = 0; !stop; i++) {
      try {
        if (k % 2) await classify(c, referenceU8, k * 100 + i, 1 + (i % 3), 'digits_u8');
        else await classify(c, reference, k * 100 + i, 1 + (i % 3));
        ok.add();
        if (restarted) okAfterRestart.add();
        if (restarted && k % 2) hookedAfterRestart++;
      } catch (err) {
        const failure = /** @type {import('@grpc/grpc-js').ServiceError} */ (err);
        if (failure.code === undefined) wrong.push(failure.message);
        else failures.push(failure);
      }
    }
  });
  await ok.reached(300);
  writeFileSync(fault, '');
  await server.waitForLog((l) => String(l.msg).startsWith('device actor crashed'));
  // The replacement has its models again: let the load run on it a while.
  const back = await server.waitForLog((l) => l.msg === 'device actor restarted: its models are loaded again');
  t.is(back.reloaded, 2, 'both models loaded again');
  restarted = true;
  await okAfterRestart.reached(200);
  stop = true;
  await Promise.all(load);

  t.log(`${ok.value} answered, ${failures.length} failed at the crash`);
  t.false(existsSync(fault), 'the worker took the fault');
  t.deepEqual(wrong, [], 'no answer was wrong');
  t.true(hookedAfterRestart >= 50, `${hookedAfterRestart} hooked requests answered by the replacement`);
  // Only what the device held when it died fails: at most one request per client was in flight.
  t.true(failures.length >= 1 && failures.length <= CLIENTS, `${failures.length} failed`);
  for (const err of failures) {
    t.is(err.code, status.UNAVAILABLE);
    t.regex(err.details, /device 0 is unavailable: its worker exited \(code 70\)/);
  }
  t.is(server.logs.filter((l) => String(l.msg).startsWith('device actor crashed')).length, 1);
  // The other model on the device was loaded again too (its preprocess scales 0-255 to digits' 0-16).
  const u8 = Uint8Array.from(heldout.images.slice(0, 4).flat(), (v) => Math.round((v * 255) / 16));
  const { outputs } = await server.client.infer('digits_u8', [tensor('image', 'UINT8', [4, 8, 8], u8)], { outputs: ['label'] });
  const asFloat = await server.client.infer('digits', [tensor('image', 'FP32', [4, 8, 8], Float32Array.from(u8, (v) => v * (16 / 255)))], { outputs: ['label'] });
  t.deepEqual([...outputs[0].data], [...asFloat.outputs[0].data]);
  t.is(server.child.exitCode, null);
});

test('a device worker that dies under the edges\' direct requests fails only those in flight; the edges route to its replacement', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const fault = path.join(temp.dir, 'device-exit');
  const repo = makeRepository(temp.dir, { digits: DIGITS });
  const server = await startServer({ model_repo: repo, global: { endpoints: { edge_threads: 2 } } }, { root: temp.dir, env: { STOWAGE_FAULT_DEVICE_EXIT: fault } });
  t.teardown(() => server.stop());
  const CLIENTS = 8;
  // Connections of their own, spread over both edges; each edge hands digits to the device through its own door.
  const clients = Array.from({ length: CLIENTS }, () => new InferenceClient(server.address, { 'grpc.use_local_subchannel_pool': 1 }));
  t.teardown(() => clients.forEach((c) => c.close()));
  const reference = await referenceLabels(server.client);
  const direct = async () => {
    const m = await scrapeMetrics(server.adminPort);
    return [0, 1].reduce((sum, edge) => sum + metric(m, 'stowage_edge_served_requests_total', `edge="${edge}"`), 0);
  };
  const load = classifyUntilStopped(clients, reference);
  await load.ok.reached(300);
  const beforeCrash = await direct();
  t.true(beforeCrash >= 250, `${beforeCrash} requests went to the device directly before the crash`);
  writeFileSync(fault, '');
  await server.waitForLog((l) => String(l.msg).startsWith('device actor crashed'));
  await server.waitForLog((l) => l.msg === 'device actor restarted: its models are loaded again');
  const atRestart = await direct();
  load.restarted = true;
  await load.okAfterRestart.reached(200);
  load.stop = true;
  await load.done;
  const afterRestart = (await direct()) - atRestart;
  const { failures, wrong } = load;

  t.log(`${load.ok.value} answered, ${failures.length} failed at the crash, ${afterRestart} directly through the replacement's new doors`);
  t.false(existsSync(fault), 'the worker took the fault');
  t.deepEqual(wrong, [], 'no answer was wrong');
  // What was in flight at the crash fails: the request each client had on the device, and the one
  // it may have sent at once on its edge's door before that edge heard the door close (the port's
  // close event reaches the edge thread a moment after the worker dies). At most two per client.
  t.true(failures.length >= 1 && failures.length <= 2 * CLIENTS, `${failures.length} failed`);
  for (const err of failures) {
    t.is(err.code, status.UNAVAILABLE);
    t.regex(err.details, /device 0 is unavailable: its worker exited/);
  }
  // The edges were given doors to the replacement: the requests after the restart went there directly.
  t.true(afterRestart >= 150, `${afterRestart} of the requests after the restart went to the device directly`);
  t.is(server.child.exitCode, null);
});

test('an edge thread that dies fails only its own connections\' requests; a replacement serves on the same ports', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const fault = path.join(temp.dir, 'edge-exit');
  const repo = makeRepository(temp.dir, { digits: DIGITS });
  const server = await startServer({ model_repo: repo, global: { endpoints: { edge_threads: 2 } } }, { root: temp.dir, env: { STOWAGE_FAULT_EDGE_EXIT: fault } });
  t.teardown(() => server.stop());
  // Clients on connections of their own, which the kernel spreads over the two edges.
  const CLIENTS = 16;
  const own = () => new InferenceClient(server.address, { 'grpc.use_local_subchannel_pool': 1 });
  const clients = Array.from({ length: CLIENTS }, own);
  t.teardown(() => clients.forEach((c) => c.close()));
  const reference = await referenceLabels(server.client);

  const load = classifyUntilStopped(clients, reference);
  await load.ok.reached(300);
  writeFileSync(fault, '');
  const crash = await server.waitForLog((l) => l.msg === 'edge thread crashed: its connections are closed; starting another');
  await server.waitForLog((l) => l.msg === 'edge thread restarted');
  load.restarted = true;
  await load.okAfterRestart.reached(200);
  load.stop = true;
  await load.done;
  const { failures, failedClients, wrong } = load;

  t.log(`${load.ok.value} answered; edge ${crash.edge} died; ${failures.length} failed, on ${failedClients.size} of ${CLIENTS} connections`);
  t.false(existsSync(fault), 'an edge took the fault');
  t.is(readdirSync(temp.dir).filter((f) => f.startsWith('edge-exit.taken')).length, 1, 'one edge only');
  t.deepEqual(wrong, [], 'no answer was wrong');
  t.true(failedClients.size >= 1, 'the dead edge\'s connections saw their requests fail');
  t.true(failedClients.size < CLIENTS, 'the other edge\'s connections never noticed');
  for (const err of failures) t.is(err.code, status.UNAVAILABLE, err.details);
  const m = await scrapeMetrics(server.adminPort);
  t.is(m.stowage_edge_restarts_total, 1);
  // New connections land on the replacement too.
  const before = metric(m, 'stowage_edge_requests_total', `edge="${crash.edge}"`);
  const fresh = Array.from({ length: 16 }, own);
  await Promise.all(fresh.map((c, k) => classify(c, reference, k)));
  fresh.forEach((c) => c.close());
  t.true(metric(await scrapeMetrics(server.adminPort), 'stowage_edge_requests_total', `edge="${crash.edge}"`) > before, 'the replacement takes connections');
  t.is(server.child.exitCode, null);
});

test('a device whose GPU context is poisoned is taken out: its requests fail UNAVAILABLE saying why, the other device serves, and with none left the process exits non-zero', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const fault = path.join(temp.dir, 'sticky');
  const repo = makeRepository(temp.dir, { digits: DIGITS });
  // Two devices (virtual ones on the CPU); the fault poisons whichever runs a batch next, as an
  // illegal address poisons a GPU's context (src/actors/device/out-of-service.ts).
  const server = await startServer({ model_repo: repo, gpus: 2, gateway: { scheduling: { mode: 'round_robin' } } }, { root: temp.dir, env: { STOWAGE_FAULT_DEVICE_STICKY: fault } });
  t.teardown(() => server.stop());
  const reference = await referenceLabels(server.client);
  writeFileSync(fault, '');
  /** @type {import('@grpc/grpc-js').ServiceError[]} */
  const failures = [];
  let answered = 0;
  for (let i = 0; i < 40; i++) {
    try {
      await classify(server.client, reference, i);
      answered++;
    } catch (err) {
      failures.push(/** @type {import('@grpc/grpc-js').ServiceError} */ (err));
    }
  }
  const out = await server.waitForLog((l) => String(l.msg).startsWith('device taken out of service'));
  t.log(`device ${out.device} out; ${answered} answered, ${failures.length} failed`);
  t.true(failures.length >= 1 && failures.length <= 2, 'the batch it was running when poisoned fails, nothing after');
  for (const err of failures) {
    t.is(err.code, status.UNAVAILABLE);
    t.regex(err.details, new RegExp(`device ${out.device} is unavailable: it is out of service: CUDA error 700 in a run: an illegal memory access`));
  }
  // The pool routes around it from then on.
  for (let i = 0; i < 20; i++) await classify(server.client, reference, i);
  const readyz = await (await fetch(`http://127.0.0.1:${server.adminPort}/readyz`)).json();
  t.true(readyz.ready, 'the node serves on its other device');
  t.deepEqual(readyz.devices_out_of_service.map((/** @type {{ device: number }} */ d) => d.device), [out.device]);
  t.regex(readyz.devices_out_of_service[0].reason, /CUDA error 700/);
  const m = await scrapeMetrics(server.adminPort);
  t.is(metric(m, 'stowage_device_in_service', `device="${out.device}"`), 0);
  t.is(metric(m, 'stowage_device_in_service', `device="${1 - out.device}"`), 1);
  t.false(server.logs.some((l) => String(l.msg).startsWith('device actor restarted')), 'never restarted in this process');
  // The other one poisoned too: nothing can serve, and the process exits for its supervisor to replace it.
  writeFileSync(fault, '');
  await classify(server.client, reference, 0).catch(() => undefined);
  const [code] = await once(server.child, 'close');
  t.is(code, 70);
  t.truthy(server.logs.find((l) => l.msg === 'no device is in service: exiting for the supervisor to start a new process'));
});

test('the repository directory removed and restored: the loaded models keep serving meanwhile, and changes made while it was gone are acted on', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const repo = makeRepository(temp.dir, { digits: DIGITS, echo: path.join(FIXTURES, 'models', 'echo') });
  const server = await startServer({ model_repo: repo, global: { model_control_mode: 'dynamic', model_poll_seconds: 0.5, logging: { level: 'debug' } } }, { root: temp.dir });
  t.teardown(() => server.stop());
  const reference = await referenceLabels(server.client);

  // Removed: moved away whole, as a deploy or a dropped mount would take it.
  const away = path.join(temp.dir, 'repo-away');
  renameSync(repo, away);
  const gone = await server.waitForLog((l) => String(l.msg).startsWith('model_repo cannot be read'));
  t.is(gone.err, 'ENOENT');
  // Three more looks at the missing directory (each logged at debug level only).
  await server.waitForLogs((l) => l.msg === 'model_repo still cannot be read', 3);
  t.deepEqual(await classify(server.client, reference, 3), reference.slice(3, 5), 'digits still serves');
  t.true(await server.client.modelReady('echo'));
  t.is(server.logs.filter((l) => String(l.msg).startsWith('model_repo cannot be read')).length, 1, 'said once, not at every poll');
  t.false(server.logs.some((l) => l.msg === 'model removed'), 'nothing was unloaded');

  // Restored with one bundle fewer and one more: the next look acts on exactly that.
  rmSync(path.join(away, 'echo'), { recursive: true });
  cpSync(path.join(FIXTURES, 'models', 'negate'), path.join(away, 'negate'), { recursive: true });
  renameSync(away, repo);
  await server.waitForLog((l) => l.msg === 'model loaded' && l.model === 'negate');
  await server.waitForLog((l) => l.msg === 'model removed' && l.model === 'echo');
  t.truthy(server.logs.find((l) => l.msg === 'model_repo can be read again: acting on what changed'));
  const { outputs } = await server.client.infer('negate', [tensor('x', 'FP32', [3], Float32Array.from([1, 2, 3]))]);
  t.deepEqual([...outputs[0].data], [-1, -2, -3]);
  t.deepEqual(await classify(server.client, reference, 9), reference.slice(9, 11));
  t.false(server.logs.some((l) => l.msg === 'model reloaded' && l.model === 'digits'), 'digits, unchanged, was not reloaded');

  // The directory now there is watched (not only polled): a bundle dropped into it loads.
  cpSync(path.join(FIXTURES, 'models', 'echo'), path.join(repo, 'echo2'), { recursive: true });
  await server.waitForLog((l) => l.msg === 'model loaded' && l.model === 'echo2');
});

test('a damaged compile cache is detected and compiled again, never served: a weight file with other bytes, a garbled graph, a broken index', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const repo = makeRepository(temp.dir, { digits: DIGITS });
  const cacheDir = path.join(temp.dir, 'cache');
  const first = await startServer({ model_repo: repo, cache_dir: cacheDir }, { root: temp.dir });
  const reference = await referenceLabels(first.client).finally(() => first.stop());

  const entries = readdirSync(cacheDir).filter((f) => f !== 'tensors');
  t.is(entries.length, 1, 'one entry: digits\' model.onnx');
  const entry = path.join(cacheDir, entries[0]);
  const tensors = readdirSync(path.join(cacheDir, 'tensors')).map((f) => path.join(cacheDir, 'tensors', f));
  /** Flip one byte in the middle of `file`: same length, other bytes (what a size check misses). */
  const flip = (/** @type {string} */ file) => {
    const bytes = readFileSync(file);
    bytes[bytes.length >> 1] ^= 0x5a;
    writeFileSync(file, bytes);
  };
  /** @type {[string, () => void, RegExp][]} */
  const damages = [
    ['a weight file', () => flip(tensors[0]), /tensors\/[0-9a-f]{64}\.bin does not hash to its key/],
    ['the graph', () => flip(path.join(entry, 'graph.onnx')), /graph\.onnx does not hash to the index's/],
    ['the index', () => writeFileSync(path.join(entry, 'index.json'), '{"format": 4, "gra'), /index\.json does not read/],
  ];
  for (const [what, damage, named] of damages) {
    damage();
    const server = await startServer({ model_repo: repo, cache_dir: cacheDir }, { root: temp.dir });
    try {
      const warning = server.logs.find((l) => l.msg === 'compile cache damaged: compiled again');
      t.truthy(warning, `${what}: the damage is logged`);
      t.regex(warning?.damage ?? '', named, what);
      t.deepEqual(await referenceLabels(server.client), reference, `${what}: the answers are the undamaged model's`);
    } finally {
      await server.stop();
    }
  }
  // Repaired in place: the next start is a clean hit.
  const last = await startServer({ model_repo: repo, cache_dir: cacheDir }, { root: temp.dir });
  t.teardown(() => last.stop());
  t.false(last.logs.some((l) => l.msg === 'compile cache damaged: compiled again'));
  t.deepEqual(await referenceLabels(last.client), reference);
});

test('two servers starting at once on one empty cache_dir both serve right answers and leave one whole entry per model', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const cacheDir = path.join(temp.dir, 'shared-cache');
  const [a, b] = await Promise.all(['a', 'b'].map((n) => {
    const root = path.join(temp.dir, n);
    const repo = makeRepository(root, { digits: DIGITS, convnet: path.join(FIXTURES, 'models', 'convnet') });
    return startServer({ model_repo: repo, cache_dir: cacheDir }, { root });
  }));
  t.teardown(() => Promise.all([a.stop(), b.stop()]));
  t.deepEqual(await referenceLabels(a.client), await referenceLabels(b.client));
  const image = tensor('image', 'FP32', [2, 3, 32, 32], new Float32Array(2 * 3 * 32 * 32).fill(0.3));
  const [ca, cb] = await Promise.all([a.client.infer('convnet', [image]), b.client.infer('convnet', [image])]);
  t.deepEqual([...ca.outputs[0].data], [...cb.outputs[0].data]);
  const files = readdirSync(cacheDir);
  t.is(files.filter((f) => f !== 'tensors').length, 2, `one entry per model: ${files}`);
  t.false(files.some((f) => f.includes('.tmp-')), 'no temporary left behind');
  t.false(readdirSync(path.join(cacheDir, 'tensors')).some((f) => f.includes('.tmp-')));
});

test('a node and a gateway whose log reader went away still stop promptly on SIGTERM, exit code 0', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const repo = makeRepository(temp.dir, { digits: DIGITS });
  const node = await startServer({ model_repo: repo }, { root: temp.dir });
  t.teardown(() => node.stop());
  const gateway = await startServer({ gateway: { endpoints: [node.address] } });
  t.teardown(() => gateway.stop());
  // The gateway first: it stops in a few milliseconds, which is what used to leave a log line
  // buffered at exit (pino's exit flush then retried its EPIPE forever and the process never ended).
  for (const [name, server] of /** @type {const} */ ([['gateway', gateway], ['node', node]])) {
    // Nothing reads the process's stdout any more (a log shipper or parent that died): every log
    // line it writes from now on fails with EPIPE. Stopping writes two ('stopping', 'stopped').
    server.child.stdout.destroy();
    const started = Date.now();
    server.child.kill('SIGTERM');
    const exited = once(server.child, 'exit');
    const timeout = new Promise((resolve) => setTimeout(resolve, 15_000, ['did not exit within 15 s']));
    const [code] = await Promise.race([exited, timeout]);
    if (server.child.exitCode === null) server.child.kill('SIGKILL'); // a regression fails here, and the teardown does not hang
    t.is(code, 0, `${name}: exit code`);
    t.true(Date.now() - started < 10_000, `${name} exited in ${Date.now() - started} ms`);
  }
});

test('a request that makes ONNX Runtime\'s allocator run out is refused RESOURCE_EXHAUSTED, saying so; the device serves on', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  // y = Expand(x, shape): the request's `shape` decides how much memory the run asks for.
  const repo = makeRepository(temp.dir, {}, {
    'expand/manifest.yaml': [
      'format_version: "2.0"',
      'executable_inputs:',
      '  - { name: x, dtype: f32, shape: k, dims: { k: 1 } }',
      '  - { name: shape, dtype: i64, shape: r, dims: { r: 1 } }',
      'executable_outputs:',
      '  - { name: y, dtype: f32, shape: m, dims: { m: 4 } }',
    ].join('\n'),
  });
  cpSync(path.join(FIXTURES, 'graphs', 'expand.onnx'), path.join(repo, 'expand', 'model.onnx'));
  const server = await startServer({ model_repo: repo }, { root: temp.dir });
  t.teardown(() => server.stop());
  const ask = (/** @type {bigint} */ n) => server.client.infer('expand', [tensor('x', 'FP32', [1], new Float32Array([2])), tensor('shape', 'INT64', [1], new BigInt64Array([n]))]);
  t.deepEqual([...dataAs((await ask(4n)).outputs[0], Float32Array)], [2, 2, 2, 2]);
  // 4 TiB of float32: more than any machine running this has.
  const err = await t.throwsAsync(ask(2n ** 40n));
  t.is(/** @type {{ code?: number }} */ (err).code, status.RESOURCE_EXHAUSTED);
  t.regex(err?.message ?? '', /model "expand": device 0 ran out of memory running it: .*Failed to allocate memory for requested buffer of size 4398046511104/);
  t.deepEqual([...dataAs((await ask(3n)).outputs[0], Float32Array)], [2, 2, 2], 'the next request is served');
});
