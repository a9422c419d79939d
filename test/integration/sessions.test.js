// Sessions shared by graph and opened on demand, through the real server (actors/device/sessions.ts):
// variants of one architecture (weights of their own, one graph) run on one ONNX Runtime session per
// device, each with its own weights, under concurrent load, across a reload, the unload of one, the
// eviction and compaction of one while others run, a load beside their runs and a device crash; a
// failed load leaves the counts right; under a session budget, idle sessions close and reopen on
// their next call with no request failing, from the compile cache or (its entry gone) compiled again.
import { rmSync, readdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import test from 'ava';
import { ControlClient } from '../../dist/client/control.js';
import { denseLayer, inferAndCheck, mlpLayers, random, writeBundle, writeVariants } from '../helpers/mlp-catalog.js';
import { metric, scrapeMetrics, startServer, tempDir } from '../helpers/server.js';

const SIZES = [32, 256, 256, 8];

/**
 * Serve what `write(repo)` writes, with `config` over the test defaults.
 * @param {import('ava').ExecutionContext} t
 * @param {(repo: string) => import('../helpers/mlp-catalog.js').CatalogModel[]} write
 * @param {Record<string, unknown>} [config]
 * @param {Record<string, string>} [env]
 */
async function serve(t, write, config = {}, env = {}) {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const repo = path.join(temp.dir, 'repo');
  const models = write(repo);
  const server = await startServer({ model_repo: repo, ...config }, { root: temp.dir, env });
  const control = new ControlClient(server.address);
  t.teardown(async () => {
    control.close();
    await server.stop();
  });
  return { server, control, models, repo, cacheDir: path.join(temp.dir, 'compile-cache') };
}

/** Every model called `rounds` times over, `concurrency` calls at once, each answer checked as its own. */
async function callAll(/** @type {import('ava').ExecutionContext} */ t, /** @type {any} */ server, /** @type {import('../helpers/mlp-catalog.js').CatalogModel[]} */ models, rounds = 2, concurrency = 8, seed = 1) {
  const next = random(seed);
  /** @type {import('../helpers/mlp-catalog.js').CatalogModel[]} */
  const calls = [];
  for (let r = 0; r < rounds; r++) for (const m of models) calls.push(m);
  let failed = 0;
  const worker = async () => {
    for (let m = calls.shift(); m; m = calls.shift()) {
      const wrong = await inferAndCheck(server.client, m, 1 + Math.floor(next() * 4), next).catch((err) => `${m.name}: ${err.message}`);
      if (wrong) {
        failed++;
        t.log(wrong);
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return failed;
}

/** The device-level session figures of device 0 from /metrics. */
async function sessions(/** @type {number | undefined} */ adminPort, device = '0') {
  const m = await scrapeMetrics(/** @type {number} */ (adminPort));
  const d = `device="${device}"`;
  return {
    open: metric(m, 'stowage_device_sessions', d),
    graphs: metric(m, 'stowage_device_session_graphs', d),
    perSession: metric(m, 'stowage_device_models_per_session', d),
    opens: metric(m, 'stowage_device_session_opens_total', `${d},reason="load"`),
    reopens: metric(m, 'stowage_device_session_opens_total', `${d},reason="reopen"`),
    unloads: metric(m, 'stowage_device_session_closes_total', `${d},reason="unload"`),
    budget: metric(m, 'stowage_device_session_closes_total', `${d},reason="budget"`),
    bytes: metric(m, 'stowage_device_session_bytes', d),
    arena: metric(m, 'stowage_activation_arena_bytes', 'kind="reserved"'),
    m,
  };
}

test('variants of one graph share one session per device and answer with their own weights under concurrent load', async (t) => {
  const { server, control, models } = await serve(t, (repo) => writeVariants(repo, { count: 12, sizes: SIZES, unfrozenEvery: 3 }), { gpus: 2 });
  t.is(await callAll(t, server, models, 3, 12), 0, 'every answer its own model\'s');
  const [s0, s1] = [await sessions(server.adminPort, '0'), await sessions(server.adminPort, '1')];
  for (const [device, s] of /** @type {const} */ ([['0', s0], ['1', s1]])) {
    t.is(s.graphs, 1, `device ${device}: one session for twelve models`);
    t.is(s.open, 1);
    t.is(s.perSession, 12);
    t.is(s.opens, 1, 'opened once, for the first load');
    // Measured as the C heap's growth across its open: other threads' work at that moment blurs it (approximate, never negative).
    t.true(s.bytes >= 0, 'its bytes measured at its open');
  }
  const { models: status } = await control.call('ModelControlStatus', { name: '', fresh: true });
  for (const m of status) t.regex(m.session, /^device 0: shared with 12 models \(graph [0-9a-f]{12}\); device 1: shared with 12 models/, m.name);
  t.true(status.every((m) => Number(m.session_bytes) >= 0 && Number(m.session_bytes) <= (s0.bytes + s1.bytes) / 12 + 1), 'each model\'s share is its session\'s bytes over the twelve');
  const loaded = server.logs.filter((l) => l.msg === 'model loaded');
  t.is(loaded.length, 12);
  t.regex(String(loaded[loaded.length - 1].session), /shared with 12 models/, 'the load log line says which session it shares');
  t.true((await sessions(server.adminPort)).arena > 0, 'activations from the one CPU arena of the process');
});

test('a reload to the same graph keeps the session; unloading one leaves it to the others; a failed load leaves the counts right', async (t) => {
  const { server, control, models, repo } = await serve(t, (repo) => writeVariants(repo, { count: 4, sizes: SIZES }));
  t.is(await callAll(t, server, models), 0);
  const arena = (await sessions(server.adminPort)).arena;
  t.true(arena > 0);
  // A reload with new weights of the same shapes: the new version joins the session before the old leaves.
  const [first, second, ...rest] = models;
  const retrained = writeBundle(repo, first.name, first.layers.map((l, i) => (i === 2 ? denseLayer(4242, l.inputs, l.outputs) : l)));
  await server.client.call('RepositoryModelLoad', { model_name: first.name });
  t.is(await callAll(t, server, [retrained, second, ...rest]), 0, 'the reloaded model answers with its new weights, the others with theirs');
  let s = await sessions(server.adminPort);
  t.is(s.graphs, 1);
  t.is(s.opens, 1, 'the reload opened nothing');
  t.is(s.unloads, 0, 'and closed nothing');
  t.true(s.arena >= arena, 'the process\'s one activation arena, registered once, kept across the reload');
  // Unload one: the others run on.
  await server.client.call('RepositoryModelUnload', { model_name: second.name });
  t.is(await callAll(t, server, [retrained, ...rest]), 0);
  s = await sessions(server.adminPort);
  t.is(s.perSession, 3);
  t.is(s.unloads, 0);
  // A bundle of the same graph whose manifest the graph refuses: its load fails after joining the session.
  writeBundle(repo, 'broken', mlpLayers(9, SIZES));
  writeFileSync(path.join(repo, 'broken', 'manifest.yaml'), 'format_version: "2.0"\nexecutable_inputs:\n  - { name: x, dtype: f32, shape: nk, dims: { k: 33 } }\nexecutable_outputs:\n  - { name: y, dtype: f32, shape: nk, dims: { k: 8 } }\nbatching:\n  compiled_batch_sizes: [1, 8]\n');
  await t.throwsAsync(server.client.call('RepositoryModelLoad', { model_name: 'broken' }));
  s = await sessions(server.adminPort);
  t.is(s.perSession, 3, 'the failed load left the session as it was');
  t.is(s.graphs, 1);
  t.is(s.unloads, 0);
  t.is(await callAll(t, server, [retrained, ...rest]), 0);
  // The last ones unloaded: the session closes with them.
  for (const m of [retrained, ...rest]) await server.client.call('RepositoryModelUnload', { model_name: m.name });
  s = await sessions(server.adminPort);
  t.is(s.open, 0);
  t.is(s.unloads, 1, 'closed once, with its last model');
  const { models: status } = await control.call('ModelControlStatus', { name: '', fresh: true });
  t.true(status.every((m) => m.state !== 'READY'));
});

test('sharers evicted, compacted and loaded while the others run, and a device crash, all answer right', async (t) => {
  const variants = 16;
  const exitFile = path.join(tempDir().dir, 'exit');
  // Room for the backbone and four of the sixteen heads (each tensor at its 64-byte alignment): evictions at every turn.
  const backbone = 4 * (32 * 256 + 256 + 256 * 256 + 256);
  const head = 4 * 256 * 8 + 64;
  const { server, control, models, repo } = await serve(t, (repo) => writeVariants(repo, { count: variants, sizes: SIZES }), {
    global: { runtime: { cpu_device_memory_bytes: backbone + 4 * head, mem_fraction: 1, weight_cache_wiggle_fraction: 0 } },
  }, { STOWAGE_FAULT_DEVICE_EXIT: exitFile });
  const load = callAll(t, server, models, 4, 8, 3);
  // Compaction beside the runs, and a new variant of the same graph loaded meanwhile.
  await control.call('CompactMemory', { device: -1 });
  const late = writeBundle(repo, 'late', mlpLayers(1, SIZES).map((l, i, all) => (i === all.length - 1 ? denseLayer(555, l.inputs, l.outputs) : l)));
  await server.client.call('RepositoryModelLoad', { model_name: 'late' });
  await control.call('CompactMemory', { device: -1 });
  t.is(await load, 0, 'every answer right while evicted, compacted and joined');
  const m = await scrapeMetrics(/** @type {number} */ (server.adminPort));
  t.true(models.reduce((n, v) => n + metric(m, 'stowage_weight_cache_evictions_total', `model="${v.name}"`), 0) > variants, 'variants were evicted');
  t.is((await sessions(server.adminPort)).graphs, 1);
  // The device crashes before a batch: its replacement loads every model again, on one session.
  writeFileSync(exitFile, '');
  await server.client.infer(models[0].name, [{ name: 'x', datatype: 'FP32', shape: [1, 32], data: new Float32Array(32) }]).catch(() => undefined);
  await server.waitForLog((l) => /serving again|loaded again/.test(l.msg ?? ''));
  let failed = 1;
  for (let i = 0; i < 50 && failed > 0; i++) {
    failed = await callAll(t, server, [...models, late], 1, 4, 10 + i);
    if (failed) await new Promise((r) => setTimeout(r, 100));
  }
  t.is(failed, 0, 'after the crash every sharer answers its own');
  const s = await sessions(server.adminPort);
  t.is(s.graphs, 1);
  t.is(s.perSession, variants + 1);
  t.true(s.arena > 0, 'the replacement worker takes activations from the arena the process registered before');
});

test('under a session budget idle sessions close and reopen on their next call, from the compile cache or compiled again, and no request fails', async (t) => {
  // Eight architectures (a head size each): eight sessions, more than the budget holds.
  const write = (/** @type {string} */ repo) => Array.from({ length: 8 }, (_, i) => writeBundle(repo, `arch${i}`, mlpLayers(20 + i, [32, 256, 256, 4 + i])));
  const { server, control, models, cacheDir } = await serve(t, write, {
    global: { runtime: { session_budget_bytes: 1 }, scheduler: { models: { arch0: { residency: 'device' } } } },
  });
  t.is(await callAll(t, server, models, 3, 4), 0, 'every call answered right');
  let s = await sessions(server.adminPort);
  t.true(s.budget > 0, `sessions closed under the budget: ${s.budget}`);
  t.true(s.reopens > 0, `and reopened on their calls: ${s.reopens}`);
  t.is(s.graphs, 8);
  t.true(s.open <= 2, `at most the one in use and the pinned one stay open: ${s.open}`);
  const reply = await control.call('ModelControlStatus', { name: '', fresh: true });
  const status = reply.models;
  t.is(Number(reply.session_budget_bytes), 1, 'the node reports its session budget (one device), for pooled gateways');
  t.true(status.some((m) => Number(m.session_bytes) > 0), 'and each model\'s share of its open sessions');
  const arch0 = status.find((m) => m.name === 'arch0');
  t.notRegex(String(arch0?.session), /closed/, 'the residency: device model keeps its session');
  t.true(status.some((m) => /closed until its next call/.test(m.session)), 'the status says a session is closed');
  t.true(status.every((m) => m.state === 'READY'), 'closed or open, every model is READY');
  // The compile cache cleared while sessions are closed: the next calls compile their files again.
  for (const entry of readdirSync(cacheDir)) if (entry !== 'tensors') rmSync(path.join(cacheDir, entry), { recursive: true, force: true });
  t.is(await callAll(t, server, models, 2, 2, 7), 0, 'answered right after compiling again');
  s = await sessions(server.adminPort);
  t.true(s.reopens > 8);
  t.true(metric(s.m, 'stowage_device_session_reopen_seconds_total', 'device="0"') > 0);
});

test('runtime.session_per_batch_size: a session per compiled batch size, each run padded to the smallest that fits, every answer right; off (the CPU default), one session at every row count', async (t) => {
  /** The batch sizes the device executed for `name`, from its statistics. */
  const executed = async (/** @type {any} */ server, /** @type {string} */ name) => (await server.client.call('ModelStatistics', { name })).model_stats[0].batch_stats
    .map((/** @type {{ batch_size: string }} */ b) => Number(b.batch_size)).sort((/** @type {number} */ a, /** @type {number} */ b) => a - b);
  const calls = async (/** @type {any} */ server, /** @type {import('../helpers/mlp-catalog.js').CatalogModel[]} */ models) => {
    const next = random(5);
    const wrong = [];
    // One at a time, so no two coalesce: 3 and 5 rows run alone.
    for (const m of models) for (const rows of [1, 3, 8, 5, 1]) wrong.push(await inferAndCheck(server.client, m, rows, next));
    return wrong.filter((w) => w !== null);
  };
  {
    const { server, control, models } = await serve(t, (repo) => writeVariants(repo, { count: 3, sizes: SIZES }), { global: { runtime: { session_per_batch_size: true } } });
    t.deepEqual(await calls(server, models), [], 'every answer its own model\'s, padded rows cut off');
    const s = await sessions(server.adminPort);
    t.is(s.graphs, 2, 'a session for batch 1 and one for batch 8, each shared by the three models');
    t.is(s.open, 2);
    t.is(s.perSession, 3);
    for (const m of models) t.deepEqual(await executed(server, m.name), [1, 8], `${m.name}: 3 and 5 rows ran padded to 8`);
    const { models: status } = await control.call('ModelControlStatus', { name: models[0].name, fresh: true });
    t.regex(status[0].session, /^batch 1: shared with 3 models \(graph [0-9a-f]{12}\); batch 8: shared with 3 models \(graph [0-9a-f]{12}\)$/);
  }
  {
    const { server, models } = await serve(t, (repo) => writeVariants(repo, { count: 3, sizes: SIZES }));
    t.deepEqual(await calls(server, models), []);
    const s = await sessions(server.adminPort);
    t.is(s.graphs, 1, 'off: one session for the graph, run at every row count');
    t.deepEqual(await executed(server, models[0].name), [1, 3, 5, 8]);
  }
});
