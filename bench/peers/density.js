// The density workload of bench/peers/run.js: how many models one machine serves at a quality of
// service. A catalog of 200 MLPs (256-768-768-16, 3.2 MB of weights each) under Zipf(1.0) traffic
// (the model of rank k called with probability ∝ 1/k; one seeded sequence, the same for every
// server), open loop at a fixed rate. Stowage serves it with a device budget of all, 10% and 5%
// of the catalog's weights (it loads on a miss and evicts the least recently used); a peer must
// instead keep everything resident (MLServer does, with 200 models: measured) or load and unload
// explicitly, so its cold-load time is measured: MLServer's RepositoryModelUnload then
// RepositoryModelLoad, and Triton's PyTriton bind (pytriton_cold_load.py says why not Triton's
// repository API), each with the first inference after it. What a peer's p99 would be under the
// same budget is then bounded from below: the same sequence through an LRU of the budget's size
// gives its miss rate, and when 1% or more of the requests miss, its p99 is at least a cold load.
//
// The load generator is ghz, not perf_analyzer: perf_analyzer drives one model per process, and
// Zipf traffic is one stream over 200 models. ghz sends the sequence's requests (a count-delimited
// file of ModelInferRequest messages; for a unary call ghz sends message i mod n as request i) at
// RATE requests/s over CONCURRENCY connections' worth of workers.
//
// Triton all resident is measured only with `--triton-resident` on run.js: PyTriton starts a Python
// stub process per model (about 45 MB each), which took 513 s and 11 GB of RAM for this catalog
// on a 2-core machine.
import { execFile } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import protobuf from 'protobufjs';
import { mlpWeightBytes, random, writeCatalog } from '../../test/helpers/mlp-catalog.js';
import { ROOT, makeRepository, scrapeMetrics, startServer } from '../../test/helpers/server.js';
import { InferenceClient } from '../../dist/client/client.js';
import { ghz } from '../perf-analyzer.js';
import { treeRssBytes } from '../proc-cpu.js';
import { PEERS, freePort, measuredPoint, startPeer } from './peers.js';

const SIZES = [256, 768, 768, 16];
const MODELS = 200;
const RATE = 200;
const CONCURRENCY = 16;
/** Budgets as fractions of the catalog's weights; 1.02: all of it, with room for rounding. */
const FRACTIONS = [1.02, 0.1, 0.05];
/** How many models' cold loads are timed per peer (the least popular ones). */
const COLD_LOADS = 5;

const run = promisify(execFile);

/**
 * Run the density workload in `dir` with `threads` ONNX Runtime threads; `requests` requests per
 * point; `tritonResident`: also serve the whole catalog with PyTriton. Logs each point; resolves
 * to the figures for the report and the plot (see report() and plot.py).
 */
export async function densityWorkload({ dir, threads, requests = 6000, servers, tritonResident = false, log = console.log }) {
  const repo = path.join(dir, 'density-repo');
  const catalog = writeCatalog(repo, { count: MODELS, sizes: SIZES });
  const modelBytes = mlpWeightBytes(SIZES);
  const catalogBytes = modelBytes * MODELS;

  // The sequence: Zipf(1.0) over the catalog in rank order, seeded.
  const cumulative = [];
  catalog.reduce((sum, _, k) => (cumulative[k] = sum + 1 / (k + 1)), 0);
  const next = random(2026);
  const sequence = Array.from({ length: requests }, () => {
    const u = next() * cumulative[MODELS - 1];
    return cumulative.findIndex((c) => c >= u);
  });
  const root = protobuf.loadSync(path.join(ROOT, 'proto', 'grpc_service.proto'));
  const ModelInferRequest = root.lookupType('inference.ModelInferRequest');
  const row = Buffer.from(new Float32Array(SIZES[0]).fill(0.5).buffer);
  const requestFile = (name, ranks) => {
    const file = path.join(dir, `${name}.bin`);
    writeFileSync(file, Buffer.concat(ranks.map((k) => ModelInferRequest.encodeDelimited(ModelInferRequest.create({
      modelName: catalog[k].name,
      inputs: [{ name: 'x', datatype: 'FP32', shape: [1, SIZES[0]] }],
      rawInputContents: [row],
    })).finish())));
    return file;
  };
  const warmFile = requestFile('density-warm-up', catalog.map((_, k) => k));
  const loadFile = requestFile('density-load', sequence);

  /** One point: every model once (loaded, compiled, warm), `afterWarmUp()`, then the sequence at RATE; and the server's memory after it. */
  const point = async (address, pid, afterWarmUp = async () => {}) => {
    await ghz(address, warmFile, { concurrency: CONCURRENCY, requests: MODELS });
    await afterWarmUp();
    const r = await measuredPoint(pid, () => ghz(address, loadFile, { concurrency: CONCURRENCY, requests, rate: RATE }));
    return { ...r, rssBytes: treeRssBytes(pid) };
  };
  const failure = (err) => ({ error: String(err.message).slice(0, 300) });
  const fmt = (x, digits = 0) => (Number.isFinite(x) ? x.toFixed(digits) : '-');
  const show = (label, r) => log(`density  ${label.padEnd(34)} ${fmt(r.rps).padStart(5)} req/s  p50 ${fmt(r.p50 / 1000, 2).padStart(7)} ms  p99 ${fmt(r.p99 / 1000, 2).padStart(7)} ms  others ${fmt(r.otherCpu * 100)}% of a core${r.hitRate === undefined ? '' : `  hits ${fmt(r.hitRate * 100, 1)}%, a miss loads in ${fmt(r.missLoadMs, 1)} ms`}`);

  const result = { models: MODELS, sizes: SIZES, modelBytes, catalogBytes, requests, rate: RATE, concurrency: CONCURRENCY, stowage: [], peers: {}, lru: [] };
  log(`density  ${MODELS} models, ${(catalogBytes / 1e6).toFixed(0)} MB of weights, ${requests} Zipf(1.0) requests at ${RATE} req/s, ${CONCURRENCY} workers (ghz)`);

  // ---- Stowage at each budget (one compile cache for the three) ----
  for (const fraction of FRACTIONS) {
    const serverDir = path.join(dir, `density-stowage-${fraction}`);
    makeRepository(serverDir, {});
    const server = await startServer({
      model_repo: repo,
      cache_dir: path.join(dir, 'density-compile-cache'),
      global: { runtime: { cpu_device_memory_bytes: Math.floor(catalogBytes * fraction), mem_fraction: 1, weight_cache_wiggle_fraction: 0, intra_op_threads: threads } },
    }, { root: serverDir });
    try {
      const sum = (m, name) => Object.entries(m).filter(([k]) => k.startsWith(`${name}{`)).reduce((s, [, v]) => s + v, 0);
      const metrics = () => scrapeMetrics(server.adminPort);
      let before;
      const r = await point(server.address, server.child.pid, async () => { before = await metrics(); }).catch(failure);
      if (!r.error) {
        const after = await metrics();
        const delta = (name) => sum(after, name) - sum(before, name);
        const hits = delta('stowage_weight_cache_hits_total');
        const misses = delta('stowage_weight_cache_misses_total');
        Object.assign(r, { hitRate: hits / (hits + misses), missLoadMs: misses ? (1000 * delta('stowage_weight_cache_load_seconds_total')) / misses : NaN });
      }
      result.stowage.push({ fraction: Math.min(1, fraction), budgetBytes: Math.floor(catalogBytes * fraction), ...r });
      if (r.error) log(`density  stowage ${fraction}: failed: ${r.error}`);
      else show(`stowage, budget ${fmt(Math.min(1, fraction) * 100)}% of the catalog`, r);
    } finally {
      await server.stop();
    }
  }

  // ---- what the same budgets cost a server that loads and unloads explicitly (LRU, computed) ----
  for (const fraction of FRACTIONS.slice(1)) {
    const capacity = Math.floor((catalogBytes * fraction) / modelBytes);
    const resident = new Map(catalog.map((_, k) => [k, true]).slice(-capacity)); // after the warm-up: the last `capacity`
    let misses = 0;
    for (const k of sequence) {
      if (resident.has(k)) resident.delete(k);
      else {
        misses++;
        if (resident.size >= capacity) resident.delete(resident.keys().next().value);
      }
      resident.set(k, true);
    }
    result.lru.push({ fraction, capacity, missRate: misses / sequence.length });
  }

  // ---- the peers: everything resident, and a cold load ----
  const models = catalog.map((m) => ({
    name: m.name,
    file: path.join(repo, m.name, 'model.onnx'),
    inputs: [{ name: 'x', datatype: 'FP32', shape: [-1, SIZES[0]] }],
    outputs: [{ name: 'y', datatype: 'FP32', shape: [-1, SIZES.at(-1)] }],
    max_batch_size: 8,
    max_batch_time: 0.0005,
    model_config: '', // no perf_analyzer here: nothing asks for the ModelConfig RPC
  }));
  // Cold loads of the least popular models first in the file: the ones a budget evicts.
  const coldModels = [...models].reverse();
  const modelsFile = path.join(dir, 'density-models.json');
  writeFileSync(modelsFile, JSON.stringify(models));
  const coldFile = path.join(dir, 'density-cold-models.json');
  writeFileSync(coldFile, JSON.stringify(coldModels));
  const env = { PEER_ORT_THREADS: String(threads) };
  const x = [{ name: 'x', datatype: 'FP32', shape: [1, SIZES[0]], data: new Float32Array(SIZES[0]).fill(0.5) }];

  if (servers.includes('mlserver')) {
    const peer = { resident: null, coldLoad: null };
    result.peers.mlserver = peer;
    const t0 = performance.now();
    const server = await startPeer('mlserver', 'mlserver', 'mlserver_serve.py', (port, http) => [modelsFile, path.join(dir, 'density-mlserver'), String(port), String(http)], { modelNames: models.map((m) => m.name), env, readyWithinMs: 600_000 })
      .catch(failure);
    if (server.error) {
      peer.error = server.error;
      log(`density  mlserver failed to start: ${server.error}`);
    } else {
      peer.readySeconds = (performance.now() - t0) / 1000;
      try {
        peer.resident = await point(server.address, server.pid).catch(failure);
        if (peer.resident.error) log(`density  mlserver, all resident: failed: ${peer.resident.error}`);
        else show(`mlserver, all ${MODELS} resident`, peer.resident);
        // Cold load: unload, then load and the first inference, timed.
        const client = new InferenceClient(server.address);
        const loadMs = [];
        const firstInferMs = [];
        try {
          for (const m of coldModels.slice(0, COLD_LOADS)) {
            await client.call('RepositoryModelUnload', { model_name: m.name });
            const a = performance.now();
            await client.call('RepositoryModelLoad', { model_name: m.name });
            const b = performance.now();
            await client.infer(m.name, x);
            loadMs.push(b - a);
            firstInferMs.push(performance.now() - b);
          }
          peer.coldLoad = { loadMs, firstInferMs };
          log(`density  mlserver cold load (RepositoryModelLoad, then the first inference): ${loadMs.map((v, i) => `${fmt(v)} + ${fmt(firstInferMs[i])} ms`).join(', ')}`);
        } catch (err) {
          peer.coldLoad = { error: String(err.message).slice(0, 300) };
          log(`density  mlserver cold load failed: ${peer.coldLoad.error}`);
        } finally {
          client.close();
        }
      } finally {
        await server.stop();
      }
    }
  }

  if (servers.includes('triton')) {
    const peer = { resident: null, coldLoad: null };
    result.peers.triton = peer;
    try {
      const { stdout } = await run(path.join(PEERS, 'pytriton', 'bin', 'python'), [path.join(ROOT, 'bench', 'peers', 'pytriton_cold_load.py'), coldFile, String(await freePort()), String(await freePort()), String(COLD_LOADS)], {
        env: { ...process.env, ...env, PYTHONPATH: path.join(ROOT, 'bench', 'peers') },
        timeout: 300_000,
        maxBuffer: 16 * 2 ** 20,
      });
      const { load_ms: loadMs, first_infer_ms: firstInferMs } = JSON.parse(stdout.trim().split('\n').at(-1));
      peer.coldLoad = { loadMs, firstInferMs };
      log(`density  triton cold load (PyTriton bind, then the first inference): ${loadMs.map((v, i) => `${fmt(v)} + ${fmt(firstInferMs[i])} ms`).join(', ')}`);
    } catch (err) {
      peer.coldLoad = { error: String(err.stderr || err.message).trim().split('\n').slice(-3).join(' ').slice(0, 300) };
      log(`density  triton cold load failed: ${peer.coldLoad.error}`);
    }
    if (tritonResident) {
      const t0 = performance.now();
      const server = await startPeer('triton', 'pytriton', 'pytriton_serve.py', (port, http) => [modelsFile, String(port), String(http)], { modelNames: models.map((m) => m.name), env, readyWithinMs: 1_800_000 })
        .catch(failure);
      if (server.error) peer.resident = { error: server.error };
      else {
        peer.readySeconds = (performance.now() - t0) / 1000;
        try {
          peer.resident = await point(server.address, server.pid).catch(failure);
        } finally {
          await server.stop();
        }
      }
      if (peer.resident.error) log(`density  triton, all resident: failed: ${peer.resident.error}`);
      else show(`triton, all ${MODELS} resident`, peer.resident);
    }
  }
  return result;
}

/** The smallest of a peer's measured cold loads (load and first inference), ms; NaN when none. */
function coldLoadMs(peer) {
  const c = peer?.coldLoad;
  return c?.loadMs?.length ? Math.min(...c.loadMs.map((v, i) => v + c.firstInferMs[i])) : NaN;
}

/** The density section of the report (markdown lines), from densityWorkload's result. */
export function densityReport(d, date) {
  const fmt = (x, digits = 0) => (Number.isFinite(x) ? x.toFixed(digits) : '-');
  const pct = (x) => `${fmt(x * 100, x < 0.01 ? 1 : 0)}%`;
  const mb = (bytes) => fmt(bytes / 1e6);
  const ms = (us) => fmt(us / 1000, 2);
  const peerNames = { mlserver: 'MLServer', triton: 'Triton (PyTriton)' };
  const lines = [`## density: ${d.models} models under Zipf traffic`, '',
    `${d.models} MLPs (${d.sizes.join('-')}, ${fmt(d.modelBytes / 1e6, 1)} MB of weights each, ${fmt(d.catalogBytes / 1e6)} MB in all), called by one Zipf(1.0) sequence of ${d.requests} requests (seeded; the model of rank k with probability ∝ 1/k), sent by ghz at ${d.rate} req/s from ${d.concurrency} workers, one row per request, after one request to every model. Stowage's device budget (\`cpu_device_memory_bytes\`, all of it for weights) is a fraction of the catalog's weights; it loads a model's weights on a miss and evicts the least recently used. The peers keep every model resident or load and unload explicitly: their cold load is measured (MLServer: RepositoryModelUnload, then RepositoryModelLoad; Triton: PyTriton's bind after the server runs, since a PyTriton model cannot be reloaded through Triton's repository API), each followed by the first inference. On this machine the device is the CPU, so the device's memory is host memory too: Stowage's RSS holds every model's weights in host RAM (as it does beside a GPU) and the budget's arena on top; beside a GPU, the budget is what the GPU's memory must hold and the peers' resident weights are all on the GPU. bench/peers/density.js says more.`, '',
    `![density](${date}-density.png)`, '',
    '| server | budget | req/s | p50 ms | p99 ms | weight-cache hits | a miss loads in (ms) | server RSS (MB) | others (cores) |', '| --- | --- | --- | --- | --- | --- | --- | --- | --- |'];
  for (const r of d.stowage) {
    if (r.error) lines.push(`| Stowage | ${pct(r.fraction)} | failed: ${r.error.replace(/\|/g, '/')} | | | | | | |`);
    else lines.push(`| Stowage | ${pct(r.fraction)} | ${fmt(r.rps)} | ${ms(r.p50)} | ${ms(r.p99)} | ${pct(r.hitRate)} | ${fmt(r.missLoadMs, 1)} | ${mb(r.rssBytes)} | ${fmt(r.otherCpu, 2)} |`);
  }
  for (const [name, peer] of Object.entries(d.peers)) {
    const r = peer.resident;
    const label = `${peerNames[name]}, all resident`;
    if (!r) lines.push(`| ${label} | 100% | not measured by default: PyTriton starts a Python stub process per model; with this catalog, measured once on 2026-11-25 on a 2-core machine, it took 513 s to become ready and 11 GB of RAM (\`--triton-resident\` measures it) | | | | | | |`);
    else if (r.error) lines.push(`| ${label} | 100% | failed: ${r.error.replace(/\|/g, '/')} | | | | | | |`);
    else lines.push(`| ${label} (ready ${fmt(peer.readySeconds)} s after start) | 100% | ${fmt(r.rps)} | ${ms(r.p50)} | ${ms(r.p99)} | | | ${mb(r.rssBytes)} | ${fmt(r.otherCpu, 2)} |`);
  }
  lines.push('', 'Cold loads (the least popular models, one after another):', '', '| server | how | load ms | first inference ms |', '| --- | --- | --- | --- |');
  const how = { mlserver: 'RepositoryModelLoad after RepositoryModelUnload', triton: 'PyTriton bind (model entry, Triton load, Python stub, onnxruntime session)' };
  for (const [name, peer] of Object.entries(d.peers)) {
    const c = peer.coldLoad;
    if (!c || c.error) lines.push(`| ${peerNames[name]} | ${how[name]} | failed: ${(c?.error ?? 'not measured').replace(/\|/g, '/')} | |`);
    else lines.push(`| ${peerNames[name]} | ${how[name]} | ${c.loadMs.map((v) => fmt(v)).join(', ')} | ${c.firstInferMs.map((v) => fmt(v, 1)).join(', ')} |`);
  }
  const stowageAt = (fraction) => d.stowage.find((r) => Math.abs(r.fraction - fraction) < 1e-9);
  lines.push('', 'What the same budget costs a server that loads and unloads explicitly (computed, not measured: the same sequence through an LRU holding as many models as the budget fits gives the share of requests that wait for a cold load; when 1% or more do, the p99 is at least the fastest cold load measured above):', '',
    `| budget | models that fit | requests that miss (LRU) | Stowage p99 ms (measured) | ${Object.keys(d.peers).map((n) => `${peerNames[n]} p99 ms, at least`).join(' | ')} |`,
    `| --- | --- | --- | --- |${Object.keys(d.peers).map(() => ' --- |').join('')}`);
  for (const l of d.lru) {
    const bound = (peer) => (l.missRate >= 0.01 ? fmt(coldLoadMs(peer)) : '(under 1% miss: no bound)');
    lines.push(`| ${pct(l.fraction)} | ${l.capacity} | ${pct(l.missRate)} | ${ms(stowageAt(l.fraction)?.p99)} | ${Object.values(d.peers).map(bound).join(' | ')} |`);
  }
  lines.push('');
  return lines;
}
