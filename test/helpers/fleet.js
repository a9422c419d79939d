// A fleet on one machine, for the pooled-gateway test and bench: Stowage nodes serving one shared
// repository of MLPs, each with a weight budget a fraction of the catalog, and gateway-only
// processes in front of them; Zipf traffic through the gateways, every answer checked against the
// model's own weights.
import path from 'node:path';
import { InferenceClient } from '../../dist/client/client.js';
import { mlpExpected, mlpWeightBytes, random, writeCatalog } from './mlp-catalog.js';
import { makeRepository, scrapeMetrics, startServer } from './server.js';

/** @typedef {Awaited<ReturnType<typeof startServer>>} Server */
/** @typedef {import('./mlp-catalog.js').CatalogModel} CatalogModel */
/** @typedef {{ server: Server, root: string, start: (env?: Record<string, string>) => Promise<Server> }} FleetNode */

/**
 * A catalog of `count` MLPs of `sizes` in `dir`/repo, and `nodes` nodes serving it, each with a
 * weight budget of `budgetShare` of the catalog's weights, named node-0, node-1, ... (node_name:
 * what a pooled gateway places by and labels its placement metrics with).
 * @param {string} dir
 * @param {{ count: number, sizes: number[], nodes: number, budgetShare: number, env?: (node: number) => Record<string, string> }} options
 */
export async function startFleet(dir, { count, sizes, nodes, budgetShare, env = () => ({}) }) {
  const repo = path.join(dir, 'repo');
  const catalog = writeCatalog(repo, { count, sizes });
  const budget = Math.ceil(count * mlpWeightBytes(sizes) * budgetShare);
  /** @type {FleetNode[]} */
  const fleet = await Promise.all(Array.from({ length: nodes }, async (_, i) => {
    const root = path.join(dir, `node-${i}`);
    makeRepository(root, {});
    const config = { model_repo: repo, node_name: `node-${i}`, // Several nodes share this machine's cores: one ONNX Runtime thread each, not one per core each.
    global: { runtime: { cpu_device_memory_bytes: budget, mem_fraction: 1, weight_cache_wiggle_fraction: 0, intra_op_threads: 1 } } };
    const start = (/** @type {Record<string, string>} */ more = {}) => startServer(config, { root, env: { ...env(i), ...more } });
    return { server: await start(), root, start };
  }));
  return { catalog, nodes: fleet, budget };
}

/**
 * A gateway-only process in front of `nodes`, routing by `mode`, checking the nodes every
 * `healthSeconds`; its /metrics includes the nodes'.
 * @param {FleetNode[]} nodes
 * @param {string} mode
 * @param {number} healthSeconds
 */
export function startGateway(nodes, mode, healthSeconds) {
  return startServer({
    gateway: {
      endpoints: nodes.map((n) => n.server.address),
      metrics_endpoints: nodes.map((n) => `127.0.0.1:${n.server.adminPort}`),
      health_seconds: healthSeconds,
      scheduling: { mode },
    },
  });
}

/**
 * `n` picks from the catalog, Zipf(1.0) over a shuffled order (so the popular models are not the
 * first written), from `seed`. The order is shuffled from `seed` too unless `orderSeed` is given:
 * two streams with one `orderSeed` and different seeds ask for the same models as often, in a
 * different sequence (a warm-up and the measured requests after it).
 * @param {CatalogModel[]} catalog
 * @param {number} n
 * @param {number} seed
 * @param {number} [orderSeed]
 */
export function zipfPicks(catalog, n, seed, orderSeed) {
  const next = random(seed);
  const shuffle = orderSeed === undefined ? next : random(orderSeed);
  const order = [...catalog];
  for (let i = order.length - 1; i > 0; i--) {
    const j = Math.floor(shuffle() * (i + 1));
    [order[i], order[j]] = [order[j], order[i]];
  }
  const weights = order.map((_, k) => 1 / (k + 1));
  const total = weights.reduce((a, b) => a + b);
  return Array.from({ length: n }, () => {
    let u = next() * total;
    for (let k = 0; k < order.length; k++) if ((u -= weights[k]) <= 0) return order[k];
    return order[order.length - 1];
  });
}

/** Inputs per model whose answers are worked out once (in JS, a large MLP's answer costs far more than the server's). */
const INPUTS_PER_MODEL = 4;
/** @type {WeakMap<CatalogModel, { x: Float32Array, y: Float32Array }[]>} */
const known = new WeakMap();

/**
 * One of `model`'s inputs with its answer from the model's own weights.
 * @param {CatalogModel} model
 * @param {number} i
 */
function knownAnswer(model, i) {
  let cases = known.get(model);
  if (!cases) {
    const next = random(model.layers[0].w.length);
    cases = Array.from({ length: INPUTS_PER_MODEL }, () => {
      const x = Float32Array.from({ length: model.layers[0].inputs }, () => next() * 2 - 1);
      return { x, y: Float32Array.from(mlpExpected(model.layers, x)) };
    });
    known.set(model, cases);
  }
  return cases[i % cases.length];
}

/**
 * Send `picks` through the gateways from `clients` clients (client c uses gateway c mod the
 * gateways), each answer checked against the model's own weights; stops early when `running()`
 * turns false.
 * @param {{ address: string }[]} gateways
 * @param {CatalogModel[]} picks
 * @param {{ clients: number, running?: () => boolean, onError?: (model: string, err: any) => void }} options
 */
export async function drive(gateways, picks, { clients, running = () => true, onError }) {
  const result = { ok: 0, failed: 0, wrong: /** @type {string[]} */ ([]), latencies: /** @type {number[]} */ ([]), seconds: 0 };
  for (const model of new Set(picks)) knownAnswer(model, 0); // before the clock starts
  const open = Array.from({ length: clients }, (_, c) => new InferenceClient(gateways[c % gateways.length].address));
  const t0 = performance.now();
  let at = 0;
  await Promise.all(open.map(async (client) => {
    while (at < picks.length && running()) {
      const i = at++;
      const model = picks[i];
      const { x, y } = knownAnswer(model, i);
      const started = performance.now();
      try {
        const reply = await client.infer(model.name, [{ name: 'x', datatype: 'FP32', shape: [1, x.length], data: x }]);
        result.latencies.push(performance.now() - started);
        const got = /** @type {Float32Array} */ (reply.outputs[0].data);
        const k = y.findIndex((want, j) => !(Math.abs(got[j] - want) <= 1e-4 * (1 + Math.abs(want))));
        if (got.length !== y.length || k >= 0) result.wrong.push(`${model.name} output ${k}: got ${got[k]}, its own weights give ${y[k]}`);
        else result.ok++;
      } catch (err) {
        result.failed++;
        onError?.(model.name, err);
      }
    }
  }));
  result.seconds = (performance.now() - t0) / 1000;
  for (const client of open) client.close();
  return result;
}

/**
 * Cold loads so far: every node's weight-cache misses (prefetches included), summed.
 * @param {FleetNode[]} nodes
 */
export async function coldLoads(nodes) {
  let sum = 0;
  for (const n of nodes) {
    for (const [key, v] of Object.entries(await scrapeMetrics(n.server.adminPort))) if (key.startsWith('stowage_weight_cache_misses_total{')) sum += v;
  }
  return sum;
}

/**
 * Where a pooled gateway sends each model now, from its /metrics: model -> its nodes, sorted.
 * @param {number | undefined} adminPort
 * @returns {Promise<Map<string, string[]>>}
 */
export async function placements(adminPort) {
  /** @type {Map<string, string[]>} */
  const placed = new Map();
  for (const [key, v] of Object.entries(await scrapeMetrics(adminPort))) {
    const m = /^stowage_gateway_model_placement\{model="([^"]+)",node="([^"]+)"\}$/.exec(key);
    if (!m || v !== 1) continue;
    placed.set(m[1], [...(placed.get(m[1]) ?? []), m[2]].sort());
  }
  return placed;
}

export const sleep = (/** @type {number} */ ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Resolves once `check` is true, checked every 100 ms; fails after `ms`.
 * @param {() => Promise<boolean>} check
 * @param {number} ms
 * @param {string} what
 */
export async function until(check, ms, what) {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await sleep(100);
  }
}
