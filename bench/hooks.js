// Hooks benchmark: throughput at 16 concurrent clients of a model without hooks and of the same
// model behind a cheap model.js preprocess hook, one request per image. Hooks run in the
// Piscina pool in parallel with the device, so the ratio should stay near 1 when the model does
// real work. Two pairs: the small ResNet-style fixture (3x32x32, the case the target is about)
// and the tiny digits MLP (10 µs of compute: the pool's thread hops per request show). It prints
// the server's CPU per request too, which compares better than requests/s on a noisy machine.
// Compare rows of one run.
//
//   npm run build && node bench/hooks.js [seconds per row, default 4]
//   HOOK_THREADS=N node bench/hooks.js   sizes the hook pool (hooks.threads) instead of the default
import { cpSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { InferenceClient } from '../dist/client/client.js';
import { FIXTURES, ROOT, makeRepository, startServer, tempDir } from '../test/helpers/server.js';
import { cpuUs } from './proc-cpu.js';

const seconds = Number(process.argv[2] ?? 4);
const CLIENTS = 16;
const temp = tempDir('stowage-bench-');
const repo = makeRepository(temp.dir, {
  convnet: path.join(FIXTURES, 'models', 'convnet'),
  convnet_hooked: path.join(FIXTURES, 'models', 'convnet'),
  digits: path.join(ROOT, 'bundles', 'digits'),
  digits_u8: path.join(ROOT, 'bundles', 'digits_u8'),
});
// A cheap preprocess: centre the pixels (one pass over 3x32x32 floats).
writeFileSync(path.join(repo, 'convnet_hooked', 'model.js'), `export function preprocess({ image }) {
  const data = new Float32Array(image.data.length);
  for (let i = 0; i < data.length; i++) data[i] = image.data[i] - 0.5;
  return { image: { datatype: 'FP32', shape: image.shape, data } };
}
`);
const server = await startServer({ model_repo: repo }, { root: temp.dir, env: process.env.HOOK_THREADS ? { INFERENCE_SERVER_HOOKS_THREADS: process.env.HOOK_THREADS } : {} });
const requests = {
  convnet: () => [{ name: 'image', datatype: 'FP32', shape: [1, 3, 32, 32], data: new Float32Array(3 * 32 * 32).fill(0.7) }],
  digits: () => [{ name: 'image', datatype: 'FP32', shape: [1, 8, 8], data: new Float32Array(64).fill(8) }],
  digits_u8: () => [{ name: 'image', datatype: 'UINT8', shape: [1, 8, 8], data: new Uint8Array(64).fill(128) }],
};
requests.convnet_hooked = requests.convnet;

/** Inferences and executions of `model` so far (ModelStatistics). */
async function counts(model) {
  const [stats] = (await server.client.call('ModelStatistics', { name: model })).model_stats;
  return { inferences: Number(stats.inference_count), executions: Number(stats.execution_count) };
}

/**
 * Requests/s of `model` at CLIENTS concurrent clients, the server's CPU µs per request (main
 * thread, whole process), and rows per execution (how well its requests were batched).
 */
async function throughput(model) {
  const clients = Array.from({ length: CLIENTS }, () => new InferenceClient(server.address));
  let done = 0;
  const end = performance.now() + seconds * 1000;
  const cpu0 = cpuUs(server.child.pid);
  const counts0 = await counts(model);
  const t0 = performance.now();
  await Promise.all(clients.map(async (c) => {
    while (performance.now() < end) {
      await c.infer(model, requests[model]());
      done++;
    }
  }));
  const rps = done / ((performance.now() - t0) / 1000);
  const cpu = cpuUs(server.child.pid);
  const counts1 = await counts(model);
  clients.forEach((c) => c.close());
  const rows = (counts1.inferences - counts0.inferences) / (counts1.executions - counts0.executions);
  return { rps, main: (cpu.main - cpu0.main) / done, all: (cpu.process - cpu0.process) / done, rows };
}

const pairs = [['convnet', 'convnet_hooked'], ['digits', 'digits_u8']];
const lines = [];
for (const [plainModel, hookedModel] of pairs) {
  await throughput(plainModel);
  await throughput(hookedModel); // warm up both
  // Best of two rounds: requests/s at its highest, CPU per request at its lowest (the least disturbed).
  const best = (a, b) => ({ rps: Math.max(a.rps, b.rps), main: Math.min(a.main, b.main), all: Math.min(a.all, b.all), rows: a.rps > b.rps ? a.rows : b.rows });
  let plain = { rps: 0, main: Infinity, all: Infinity, rows: NaN };
  let hooked = { rps: 0, main: Infinity, all: Infinity, rows: NaN };
  for (let round = 0; round < 2; round++) {
    plain = best(plain, await throughput(plainModel));
    hooked = best(hooked, await throughput(hookedModel));
  }
  const row = (r) => `${r.rps.toFixed(0).padStart(6)} req/s, cpu ${r.main.toFixed(0).padStart(4)}/${r.all.toFixed(0).padEnd(4)} µs, ${r.rows.toFixed(1)} rows/exec`;
  lines.push(`${plainModel.padEnd(9)} ${row(plain)}   with a preprocess hook ${row(hooked)}   ratio ${(hooked.rps / plain.rps).toFixed(2)}`);
}
await server.stop();
temp.cleanup();
console.log(`\nnode ${process.version}, ${CLIENTS} clients, ${seconds} s per run, best of 2; cpu: the server's main thread / whole process per request; rows/exec: requests batched per execution`);
for (const line of lines) console.log(line);
