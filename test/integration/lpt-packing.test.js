// lpt_packing through the real server: four virtual devices and a catalog whose weights are about
// three times one device's budget. Each model is placed on one device, every answer is its own,
// the measured loads are balanced; a model with replicas spreads over two devices; repacking
// while clients keep calling fails no request. With edge threads (test/run.sh runs this file again
// with two), the edges route each model to its placement themselves.
import test from 'ava';
import { ControlClient } from '../../dist/client/control.js';
import { inferAndCheck, mlpWeightBytes, random, writeCatalog } from '../helpers/mlp-catalog.js';
import { scrapeMetrics, startServer, tempDir } from '../helpers/server.js';

const SIZES = [64, 1024, 8];
const COUNT = 24;
const MODEL_BYTES = mlpWeightBytes(SIZES);
const BUDGET = Math.floor((COUNT * MODEL_BYTES) / 3 / 64) * 64; // the catalog is 3x one device

/**
 * A four-device node under lpt_packing serving a catalog of `count` MLPs; `placement()` reads where each model is.
 * @param {import('ava').ExecutionContext} t
 * @param {Record<string, unknown>} scheduling the node file's gateway.scheduling
 * @param {{ count?: number, edges?: number }} [options]
 */
async function serve(t, scheduling, { count = COUNT, edges } = {}) {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const repo = `${temp.dir}/repo`;
  const models = writeCatalog(repo, { count, sizes: SIZES });
  const server = await startServer({
    model_repo: repo,
    gpus: 4,
    gateway: { scheduling: { mode: 'lpt_packing', ...scheduling } },
    global: {
      runtime: { cpu_device_memory_bytes: BUDGET, mem_fraction: 1, weight_cache_wiggle_fraction: 0, intra_op_threads: 1 },
      scheduler: { discipline: 'fifo' },
      ...(edges === undefined ? {} : { endpoints: { edge_threads: edges } }),
    },
  }, { root: temp.dir });
  t.teardown(() => server.stop());
  const control = new ControlClient(server.address);
  t.teardown(() => control.close());
  const placement = async () => {
    const { models: status } = await control.call('ModelControlStatus', { name: '', fresh: true });
    return Object.fromEntries(status.map((m) => [m.name, m.placed_devices]));
  };
  return { server, models, placement };
}

/**
 * `clients` concurrent callers making `calls` checked calls in all, models chosen by `choose`; resolves to the failures.
 * @param {import('ava').ExecutionContext} t
 * @param {import('../helpers/server.js').Server} server
 * @param {{ calls: number, clients: number, choose: (next: () => number) => import('../helpers/mlp-catalog.js').CatalogModel, seed?: number }} load
 */
async function traffic(t, server, { calls, clients, choose, seed = 1 }) {
  /** @type {string[]} */
  const failures = [];
  let left = calls;
  const next = random(seed);
  await Promise.all(Array.from({ length: clients }, async () => {
    while (left-- > 0) {
      const model = choose(next);
      try {
        const wrong = await inferAndCheck(server.client, model, 1 + Math.floor(next() * 2), next);
        if (wrong) failures.push(wrong);
      } catch (err) {
        failures.push(`${model.name}: ${/** @type {Error} */ (err).message}`);
      }
    }
  }));
  if (failures.length) t.fail(failures.slice(0, 3).join('\n'));
  return failures.length;
}

test('each model on one device, every answer its own, the hot ones spread; repacking under load fails nothing', async (t) => {
  const { server, models, placement } = await serve(t, { rebalance_compute_seconds: 0.05 });
  const start = await placement();
  t.true(Object.values(start).every((ids) => ids.length === 1), 'placed on one device each');
  const perDevice = [0, 1, 2, 3].map((d) => Object.values(start).filter((ids) => ids[0] === d).length);
  t.deepEqual(perDevice, [6, 6, 6, 6], 'at start-up, packed by weight bytes: equal models, equal counts');
  // Skew: the models of device 0 get most of the traffic, so a repack must spread them.
  const hot = models.filter((m) => start[m.name][0] === 0);
  const skewed = (/** @type {() => number} */ next) => (next() < 0.8 ? hot[Math.floor(next() * hot.length)] : models[Math.floor(next() * models.length)]);
  let failed = 0;
  for (let round = 0; round < 20 && !server.logs.some((l) => l.msg === 'model moved'); round++) {
    failed += await traffic(t, server, { calls: 400, clients: 8, choose: skewed, seed: 100 + round });
  }
  // Then even traffic until two packings have happened in it, so the last one measured even
  // traffic only: its measured loads come out balanced. (One measuring the skew cannot do better
  // than about 1.3x: six hot models do not split evenly over four devices.)
  const mark = server.logs.length;
  const packingsSinceMark = () => server.logs.slice(mark).filter((l) => l.msg === 'models packed onto devices').length;
  for (let round = 0; round < 20 && packingsSinceMark() < 2; round++) {
    failed += await traffic(t, server, { calls: 500, clients: 8, choose: (/** @type {() => number} */ next) => models[Math.floor(next() * models.length)], seed: 2 + round });
  }
  t.true(packingsSinceMark() >= 2, 'the even traffic was measured and packed');
  t.is(failed, 0, 'no request failed while models moved');
  const moved = server.logs.filter((l) => l.msg === 'model moved');
  t.true(moved.length > 0, 'the skewed load made the packer move models');
  const end = await placement();
  t.true(Object.values(end).every((ids) => ids.length === 1));
  const m = await scrapeMetrics(server.adminPort);
  const loads = [0, 1, 2, 3].map((d) => m[`stowage_gateway_placed_load_seconds{device="${d}"}`]);
  t.log(`${moved.length} moves; last packing's measured load per device: ${loads.map((l) => (l * 1000).toFixed(1)).join(', ')} ms`);
  // The skew's hot models, all on device 0 at start-up, are spread, and every device is given models.
  // How even the packing comes out is bench/gateway.js's to measure: the loads it packs are measured
  // execution times, which another process on this machine inflates (1.6x once while CI ran beside a
  // benchmark, 3.3x in a fresh-clone CI on 2026-11-30), so no ratio of them is asserted here.
  t.true(new Set(hot.map((model) => end[model.name][0])).size >= 2, 'the hot models were spread over the devices');
  t.deepEqual([...new Set(Object.values(end).map((ids) => ids[0]))].sort(), [0, 1, 2, 3], 'every device was given models');
  // Each model's requests went only where it was placed at the time: no device ran all models.
  for (const d of [0, 1, 2, 3]) t.true(m[`stowage_weight_cache_resident_bytes{device="${d}"}`] <= BUDGET);
});

test('a model with replicas: 2 is served from two devices, filling one batch before the next', async (t) => {
  const { server, models, placement } = await serve(t, { rebalance_compute_seconds: 0, models: { m000: { replicas: 2 } } }, { count: 8 });
  const placed = await placement();
  t.is(new Set(placed.m000).size, 2);
  t.true(Object.entries(placed).filter(([name]) => name !== 'm000').every(([, ids]) => ids.length === 1));
  const failed = await traffic(t, server, { calls: 400, clients: 24, choose: () => models[0] });
  t.is(failed, 0);
  const m = await scrapeMetrics(server.adminPort);
  const routed = placed.m000.map((d) => m[`stowage_requests_routed_total{model="m000",device="${d}"}`] ?? 0);
  t.log(`m000 on devices ${placed.m000}: ${routed.join(' and ')} requests`);
  t.true(routed.every((n) => n > 0), 'both replicas served');
  const others = [0, 1, 2, 3].filter((d) => !placed.m000.includes(d));
  t.true(others.every((d) => !(m[`stowage_requests_routed_total{model="m000",device="${d}"}`] > 0)), 'and no other device');
});

test('with edge threads, the edges route a placed model to its replicas themselves', async (t) => {
  const { server, models, placement } = await serve(t, { rebalance_compute_seconds: 0, models: { m000: { replicas: 2 } } }, { count: 8, edges: 2 });
  const placed = await placement();
  t.is(new Set(placed.m000).size, 2);
  const failed = await traffic(t, server, { calls: 400, clients: 24, choose: () => models[0] });
  t.is(failed, 0);
  let m = await scrapeMetrics(server.adminPort);
  const direct = () => [0, 1].reduce((sum, edge) => sum + (m[`stowage_edge_served_requests_total{edge="${edge}"}`] ?? 0), 0);
  t.is(direct(), 400, 'every call went from its edge to the device directly');
  const routed = placed.m000.map((d) => m[`stowage_requests_routed_total{model="m000",device="${d}"}`] ?? 0);
  t.log(`m000 on devices ${placed.m000}: ${routed.join(' and ')} requests, routed by the edges`);
  t.true(routed.every((n) => n > 0), 'both replicas served');
  const others = [0, 1, 2, 3].filter((d) => !placed.m000.includes(d));
  t.true(others.every((d) => !(m[`stowage_requests_routed_total{model="m000",device="${d}"}`] > 0)), 'and no other device');
  // m001 is placed on one device: every request of it goes there.
  const one = placed.m001[0];
  await traffic(t, server, { calls: 200, clients: 8, choose: () => models[1] });
  m = await scrapeMetrics(server.adminPort);
  t.is(m[`stowage_requests_routed_total{model="m001",device="${one}"}`], 200, 'a model on one device: all its requests there');
});

test('default_replicas: all puts every model on every device, and a device that cannot hold them is warned about', async (t) => {
  const { server, placement } = await serve(t, { default_replicas: 'all', rebalance_compute_seconds: 0 }, { count: 12 });
  const placed = await placement();
  t.true(Object.values(placed).every((ids) => [...ids].sort().join() === '0,1,2,3'));
  const warning = server.logs.find((l) => l.level === 40 && /the models placed on it need \d+ bytes of weights, more than its budget of \d+; it will thrash/.test(l.msg ?? ''));
  t.truthy(warning, 'twelve models of a catalog sized for 24 at one third each do not fit one device');
  t.is(warning?.budget, BUDGET);
});
