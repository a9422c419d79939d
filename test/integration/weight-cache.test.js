// The on-demand weight cache through the real server: a catalog of 50 models whose weights are
// five times the device's budget, called in cycles and at random. Every answer must be the
// model's own (no weights mixed up between models that share every shape), resident bytes must
// never exceed the budget, `device` models must never be evicted, `unpinned` ones must re-read
// their weights from the compile cache each time they come on.
import test from 'ava';
import { inferAndCheck, mlpWeightBytes, random, writeCatalog } from '../helpers/mlp-catalog.js';
import { metric, scrapeMetrics, startServer, tempDir } from '../helpers/server.js';
import { grpcError } from '../helpers/errors.js';
import { ControlClient } from '../../dist/client/control.js';

const INPUTS = 64;
const OUTPUTS = 8;
const SIZES = [INPUTS, 512, OUTPUTS];
const COUNT = 50;
// Every tensor moves out of the executable, the last bias (32 bytes, read by a Gemm) too.
const WEIGHT_BYTES = mlpWeightBytes(SIZES);
const BUDGET = Math.floor((COUNT * WEIGHT_BYTES) / 5 / 64) * 64;

/** @type {import('../helpers/server.js').Server} */
let server;
/** @type {import('../helpers/server.js').TempDir} */
let temp;
/** @type {import('../helpers/mlp-catalog.js').CatalogModel[]} */
let catalog;
/** @type {import('../helpers/mlp-catalog.js').CatalogModel} */
let giant;

test.before(async () => {
  temp = tempDir();
  const repo = `${temp.dir}/repo`;
  catalog = writeCatalog(repo, { count: COUNT, sizes: SIZES });
  [giant] = writeCatalog(repo, { count: 1, sizes: [INPUTS, 8192, OUTPUTS], prefix: 'giant', firstSeed: 999 });
  server = await startServer({
    model_repo: repo,
    global: {
      runtime: { cpu_device_memory_bytes: BUDGET, mem_fraction: 1, weight_cache_wiggle_fraction: 0 },
      scheduler: { models: { m000: { residency: 'device' }, m001: { residency: 'unpinned' }, m002: { residency: 'unpinned' } } },
    },
  }, { root: temp.dir });
});

test.after.always(async () => {
  await server?.stop();
  temp?.cleanup();
});

/**
 * Call a model and check every row against the model's own weights; false (and a failed assertion) if any differs.
 * @param {import('ava').ExecutionContext} t
 * @param {import('../helpers/mlp-catalog.js').CatalogModel} model
 * @param {number} rows
 * @param {() => number} next
 */
async function callAndCheck(t, model, rows, next) {
  const wrong = await inferAndCheck(server.client, model, rows, next);
  if (wrong) t.fail(wrong);
  return wrong === null;
}


test.serial('a catalog five times the budget answers right in cycles and at random, never over the budget', async (t) => {
  const m0 = await scrapeMetrics(server.adminPort);
  t.is(metric(m0, 'stowage_weight_cache_budget_bytes', 'device="0"'), BUDGET);
  t.true(COUNT * WEIGHT_BYTES >= 5 * BUDGET, `catalog ${COUNT * WEIGHT_BYTES} bytes, budget ${BUDGET}`);
  const next = random(42);
  let calls = 0;
  let wrong = 0;
  let peak = 0;
  const check = async (/** @type {import('../helpers/mlp-catalog.js').CatalogModel} */ model) => {
    if (!(await callAndCheck(t, model, 1 + Math.floor(next() * 3), next))) wrong++;
    calls++;
    const m = await scrapeMetrics(server.adminPort);
    const resident = metric(m, 'stowage_weight_cache_resident_bytes', 'device="0"');
    peak = Math.max(peak, resident);
    if (resident > BUDGET) t.fail(`after call ${calls} (${model.name}): ${resident} bytes resident, budget ${BUDGET}`);
  };
  for (let cycle = 0; cycle < 3; cycle++) for (const model of catalog) await check(model);
  for (let i = 0; i < 150; i++) await check(catalog[Math.floor(next() * COUNT)]);
  t.is(wrong, 0);
  const m = await scrapeMetrics(server.adminPort);
  const evictions = catalog.reduce((sum, { name }) => sum + metric(m, 'stowage_weight_cache_evictions_total', `model="${name}"`), 0);
  const misses = catalog.reduce((sum, { name }) => sum + metric(m, 'stowage_weight_cache_misses_total', `model="${name}"`), 0);
  t.log(`${calls} calls, ${misses} misses, ${evictions} evictions; peak resident ${peak} of ${BUDGET} bytes`);
  t.true(evictions > COUNT, 'the cache really evicted');
  t.is(metric(m, 'stowage_weight_cache_evictions_total', 'model="m000"'), 0, 'the device model was never evicted');
  t.true(peak <= BUDGET && peak > BUDGET / 2);
  // Unpinned models came back from disk on every miss; system models from host RAM only.
  for (const name of ['m001', 'm002']) {
    const missed = metric(m, 'stowage_weight_cache_misses_total', `model="${name}"`);
    t.true(missed >= 3);
    t.is(metric(m, 'stowage_weight_cache_load_bytes_total', `model="${name}",source="disk"`), missed * WEIGHT_BYTES, name);
  }
  t.is(metric(m, 'stowage_weight_cache_load_bytes_total', 'model="m010",source="disk"'), 0);
  t.true(metric(m, 'stowage_weight_cache_load_bytes_total', 'model="m010",source="host"') >= 3 * WEIGHT_BYTES);
  t.truthy(server.logs.find((l) => l.level === 40 && /weight cache thrashing on device 0/.test(l.msg ?? '')), 'cycling over 5x the budget is reported as thrash');
});

test.serial('a window\'s weight load is the time batches waited for weights over it, as the load-seconds counter grew', async (t) => {
  const control = new ControlClient(server.address);
  try {
    const windowed = () => control.call('ModelControlStatus', { name: '', window_seconds: 1, fresh: true });
    const waited = async () => {
      const m = await scrapeMetrics(server.adminPort);
      return catalog.reduce((sum, { name }) => sum + metric(m, 'stowage_weight_cache_load_seconds_total', `model="${name}"`), 0);
    };
    // Into a fresh window, then the counters taken by the first read in it; a cycle over five times
    // the budget (every call a cold load); the next window's first read publishes the window between.
    await new Promise((resolve) => setTimeout(resolve, 1000 - (Date.now() % 1000) + 50));
    const before = await waited();
    const opening = [performance.now()];
    await windowed();
    opening.push(performance.now());
    const next = random(7);
    for (const model of catalog.slice(3)) await callAndCheck(t, model, 1, next);
    await new Promise((resolve) => setTimeout(resolve, 1000 - (Date.now() % 1000) + 50));
    const closing = [performance.now()];
    const reply = await windowed();
    closing.push(performance.now());
    const grew = (await waited()) - before;
    const sum = reply.models.reduce((s, m) => s + m.window_weight_load, 0);
    const [shortest, longest] = [(closing[0] - opening[1]) / 1000, (closing[1] - opening[0]) / 1000];
    t.true(grew > 0, 'the cycle waited for weights');
    // The window lies between the calls' nearest and farthest ends: its weight loads times its length are what the counter grew by.
    t.true(sum * shortest <= grew * 1.0001 + 1e-6 && sum * longest >= grew * 0.9999 - 1e-6, `${sum}/s over ${shortest}-${longest} s against ${grew} s waited`);
    t.true(reply.models.filter((m) => m.window_weight_load > 0).length >= 10, 'the models that missed report it');
  } finally {
    control.close();
  }
});

test.serial('concurrent requests for a cold model share one load, and clients at random all get their own answers', async (t) => {
  const cold = catalog[COUNT - 1];
  for (const model of catalog.slice(3, 15)) await callAndCheck(t, model, 1, random(1)); // push the last model out
  const before = metric(await scrapeMetrics(server.adminPort), 'stowage_weight_cache_misses_total', `model="${cold.name}"`);
  const results = await Promise.all(Array.from({ length: 8 }, (_, i) => callAndCheck(t, cold, 2, random(100 + i))));
  t.true(results.every(Boolean));
  const after = metric(await scrapeMetrics(server.adminPort), 'stowage_weight_cache_misses_total', `model="${cold.name}"`);
  t.is(after - before, 1, 'one load for all eight');
  // 8 clients, 240 calls over random models: answers stay each model's own under interleaving.
  const next = random(7);
  const picks = Array.from({ length: 240 }, () => catalog[Math.floor(next() * COUNT)]);
  const answers = await Promise.all(Array.from({ length: 8 }, async (_, c) => {
    let ok = 0;
    for (let i = c; i < picks.length; i += 8) if (await callAndCheck(t, picks[i], 1 + (i % 3), random(i))) ok++;
    return ok;
  }));
  t.is(answers.reduce((a, b) => a + b, 0), 240);
  t.true(metric(await scrapeMetrics(server.adminPort), 'stowage_weight_cache_resident_bytes', 'device="0"') <= BUDGET);
});

test.serial('a model larger than the whole budget fails its requests with its size and the budget', async (t) => {
  const err = await grpcError(t, server.client.infer(giant.name, [{ name: 'x', datatype: 'FP32', shape: [1, INPUTS], data: new Float32Array(INPUTS) }]));
  t.is(err.code, 8); // RESOURCE_EXHAUSTED
  t.regex(err.details, new RegExp(`model "${giant.name}" needs \\d+ bytes of weights on the device, but the device's weight budget is ${BUDGET} bytes`));
  t.true(await callAndCheck(t, catalog[5], 1, random(5)), 'the others keep serving');
});
