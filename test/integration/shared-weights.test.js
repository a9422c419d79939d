// Shared weights stored once: fifty variants fine-tuned from one backbone (their heads differ, and
// every tenth has an unfrozen layer of its own) are served exactly from about one backbone plus
// the heads, on the device and in host RAM (one copy for two devices); an evicted variant leaves
// the backbone to the others; equal bytes in another shape are another tensor.
import test from 'ava';
import { alignUp } from '../../dist/actors/device/arena.js';
import { weightKey } from '../../dist/actors/compiler/compile-cache.js';
import { denseLayer, inferAndCheck, random, writeBundle, writeVariants } from '../helpers/mlp-catalog.js';
import { metric, scrapeMetrics, startServer, tempDir } from '../helpers/server.js';

const SIZES = [64, 512, 512, 8];
const COUNT = 50;

/** @typedef {import('../helpers/mlp-catalog.js').CatalogModel} CatalogModel */
/** @typedef {import('../helpers/mlp-catalog.js').Layer} Layer */

/**
 * The distinct tensors the server will hold for these models: key -> bytes (as the compile step splits them).
 * @param {{ layers: Layer[] }[]} models
 */
function distinctTensors(models) {
  /** @type {Map<string, number>} */
  const tensors = new Map();
  for (const { layers } of models) {
    for (const l of layers) {
      for (const [data, dims] of /** @type {[Float32Array, number[]][]} */ ([[l.w, [l.inputs, l.outputs]], [l.b, [l.outputs]]])) {
        // Every tensor moves out, small biases too: a Gemm reads them (split-weights.ts movesOut).
        tensors.set(weightKey('FP32', dims, new Uint8Array(data.buffer, data.byteOffset, data.byteLength)), data.byteLength);
      }
    }
  }
  return tensors;
}
const sum = (/** @type {Iterable<number>} */ xs) => [...xs].reduce((a, b) => a + b, 0);

/**
 * Serve the models `write(repo)` writes, with runtime settings computed from them.
 * @param {import('ava').ExecutionContext} t
 * @param {(repo: string) => CatalogModel[]} write
 * @param {(models: CatalogModel[]) => Record<string, number>} runtime
 * @param {Record<string, unknown>} [extra]
 */
async function serve(t, write, runtime, extra = {}) {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const repo = `${temp.dir}/repo`;
  const models = write(repo);
  const server = await startServer({
    model_repo: repo,
    global: { runtime: { mem_fraction: 1, weight_cache_wiggle_fraction: 0, ...runtime(models) } },
    ...extra,
  }, { root: temp.dir });
  t.teardown(() => server.stop());
  return { server, models };
}

/** Aligned bytes of the distinct tensors of these layers. */
const bytesOf = (/** @type {Layer[]} */ layers) => sum([...distinctTensors([{ layers }]).values()].map(alignUp));

test('fifty variants of one backbone fit in one backbone plus the heads, on two devices and in host RAM once', async (t) => {
  /** @type {CatalogModel[]} */
  let twins = [];
  const { server, models } = await serve(t, (repo) => {
    const variants = writeVariants(repo, { count: COUNT, sizes: SIZES, unfrozenEvery: 10 });
    // Equal bytes, other shapes: twin_b's first weight is twin_a's bytes read as [512, 64].
    const a = denseLayer(4242, 64, 512);
    const b = { inputs: 512, outputs: 64, w: a.w, b: denseLayer(4343, 512, 64).b };
    twins = [writeBundle(repo, 'twin_a', [a, denseLayer(1, 512, 8)]), writeBundle(repo, 'twin_b', [b, denseLayer(2, 64, 8)])];
    return variants;
  }, () => ({ cpu_device_memory_bytes: 16 * 2 ** 20 }), { gpus: 2 });
  const all = [...models, ...twins];
  const distinct = distinctTensors(all);
  const alignedDistinct = sum([...distinct.values()].map(alignUp));
  const logical = sum(all.map((m) => bytesOf(m.layers)));
  const next = random(3);
  // Twice round, so both devices (round robin) see every model: an odd number of calls per round.
  const round = all.length % 2 ? all : [...all, all[0]];
  for (let r = 0; r < 2; r++) {
    for (const model of round) {
      const wrong = await inferAndCheck(server.client, model, 1 + r, next);
      if (wrong) t.fail(wrong);
    }
  }
  const m = await scrapeMetrics(server.adminPort);
  for (const d of ['0', '1']) {
    t.is(metric(m, 'stowage_weight_cache_resident_bytes', `device="${d}"`), alignedDistinct, `device ${d} holds each distinct tensor once`);
    t.is(metric(m, 'stowage_weight_cache_logical_bytes', `device="${d}"`), logical);
  }
  t.is(m.stowage_weight_cache_host_bytes, sum(distinct.values()), 'host RAM: each distinct tensor once, for both devices');
  const backbone = bytesOf(models[1].layers.slice(0, -1));
  const ratio = metric(m, 'stowage_weight_cache_sharing_ratio', 'device="0"');
  t.log(`${all.length} models: ${logical} bytes without sharing, ${alignedDistinct} with (backbone ${backbone}); sharing ratio ${ratio.toFixed(2)}`);
  t.true(ratio > 5);
  t.true(alignedDistinct < logical / 5);
});

test('an evicted variant frees only its head: the backbone stays for the others and never comes on again', async (t) => {
  // A head: its weight and its bias (a Gemm reads it, so it moves out too), each at its aligned size.
  const headBytes = alignUp(4 * 512 * 8) + alignUp(4 * 8);
  let backbone = 0;
  // Room for the backbone and ten heads.
  const { server, models } = await serve(t, (repo) => writeVariants(repo, { count: 40, sizes: SIZES }), (variants) => {
    backbone = bytesOf(variants[0].layers.slice(0, -1));
    return { cpu_device_memory_bytes: backbone + 10 * headBytes };
  });
  const next = random(11);
  let calls = 0;
  for (let round = 0; round < 3; round++) {
    for (const model of models) {
      const wrong = await inferAndCheck(server.client, model, 1, next);
      if (wrong) t.fail(wrong);
      calls++;
    }
  }
  const m = await scrapeMetrics(server.adminPort);
  const total = (/** @type {string} */ name, labels = '') => sum(models.map((v) => metric(m, name, `model="${v.name}"${labels}`)));
  const misses = total('stowage_weight_cache_misses_total');
  t.true(total('stowage_weight_cache_evictions_total') >= 60, 'variants were evicted');
  t.is(total('stowage_weight_cache_load_bytes_total', ',source="host"'), backbone + misses * headBytes, 'the backbone came on once; every other miss copied a head');
  t.true(metric(m, 'stowage_weight_cache_resident_bytes', 'device="0"') <= backbone + 10 * headBytes);
  t.log(`${calls} calls, ${misses} misses, each after the first copying ${headBytes} bytes of head beside a ${backbone}-byte backbone`);
});
