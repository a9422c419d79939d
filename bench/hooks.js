// Hooks benchmark: throughput at 16 concurrent clients of a model without hooks and of the same
// model behind a cheap model.js preprocess hook, one request per image. Hooks run in the
// Piscina pool in parallel with the device, so the ratio should stay near 1 when the model does
// real work. Two pairs: the small ResNet-style fixture (3x32x32, the case the target is about)
// and the tiny digits MLP (10 µs of compute: the pool's two thread hops per request show).
// Compare rows of one run.
//
//   npm run build && node bench/hooks.js [seconds per row, default 4]
//   HOOK_THREADS=N node bench/hooks.js   sizes the hook pool (hooks.threads) instead of the default
import { cpSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { InferenceClient } from '../dist/client/client.js';
import { FIXTURES, ROOT, makeRepository, startServer, tempDir } from '../test/helpers/server.js';

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

async function throughput(model) {
  const clients = Array.from({ length: CLIENTS }, () => new InferenceClient(server.address));
  let done = 0;
  const end = performance.now() + seconds * 1000;
  const t0 = performance.now();
  await Promise.all(clients.map(async (c) => {
    while (performance.now() < end) {
      await c.infer(model, requests[model]());
      done++;
    }
  }));
  clients.forEach((c) => c.close());
  return done / ((performance.now() - t0) / 1000);
}

const pairs = [['convnet', 'convnet_hooked'], ['digits', 'digits_u8']];
const lines = [];
for (const [plainModel, hookedModel] of pairs) {
  await throughput(plainModel);
  await throughput(hookedModel); // warm up both
  let plain = 0;
  let hooked = 0;
  for (let round = 0; round < 2; round++) {
    plain = Math.max(plain, await throughput(plainModel));
    hooked = Math.max(hooked, await throughput(hookedModel));
  }
  lines.push(`${plainModel.padEnd(9)} ${plain.toFixed(0).padStart(8)} req/s   with a preprocess hook ${hooked.toFixed(0).padStart(8)} req/s   ratio ${(hooked / plain).toFixed(2)}`);
}
await server.stop();
temp.cleanup();
console.log(`\nnode ${process.version}, ${CLIENTS} clients, ${seconds} s per run, best of 2`);
for (const line of lines) console.log(line);
