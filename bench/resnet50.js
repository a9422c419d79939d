// A ResNet-50-class convnet (tools/make_bench_models.py resnet50: 97 MiB of weights, batch norm
// folded) on the CPU backend through the server against raw ONNX Runtime in process, at batch 1,
// 8 and 32, one request at a time, interleaved point by point:
//   - raw: onnxruntime-node, the model's own file, level all, one intra-op thread per core, with
//     ONNX Runtime's default spinning and with spinning off (the server's setting);
//   - server: `node main.js` over its bundle (weight cache on: a weightless graph whose weights
//     are bound once per residency), called over gRPC by our client; its end-to-end median and its
//     own compute time per execution (ModelStatistics' compute_infer).
// Prints each median and the ratio to raw. Issue 34's goal: within 1.15x of raw at batch 8 and 32.
//
//   npm run build && node bench/resnet50.js [--rounds 2]
import { readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import * as ort from 'onnxruntime-node';
import { image, median, timed } from './timing.js';
import { makeRepository, startServer, tempDir } from '../test/helpers/server.js';
import { makeBenchModels } from './bench-models.js';

const { values: args } = parseArgs({ options: { rounds: { type: 'string', default: '2' } } });
const BATCHES = [1, 8, 32];
/** Calls per point: enough for a median, bounded in time (batch 32 is seconds per call on 2 cores). */
const CALLS = { 1: 20, 8: 6, 32: 3 };

const temp = tempDir('stowage-bench-r50-');
makeBenchModels(path.join(temp.dir, 'generated'), ['resnet50']);
const bundle = path.join(temp.dir, 'generated', 'resnet50');
const repo = makeRepository(temp.dir, { resnet50: bundle });


const model = readFileSync(path.join(bundle, 'model.onnx'));
const raw = {
  spinning: await ort.InferenceSession.create(model, { graphOptimizationLevel: 'all' }),
  still: await ort.InferenceSession.create(model, { graphOptimizationLevel: 'all', extra: { session: { 'intra_op.allow_spinning': '0' } } }),
};
const server = await startServer({ model_repo: repo, cache_dir: path.join(temp.dir, 'cache'), global: { runtime: { intra_op_threads: 0, cpu_device_memory_bytes: 1024 * 2 ** 20 } } }, { root: temp.dir });
const stats = async () => (await server.client.call('ModelStatistics', { name: 'resnet50' })).model_stats[0].inference_stats.compute_infer;

/** @type {Record<number, { spinning: number[], still: number[], server: number[], compute: number[] }>} */
const points = Object.fromEntries(BATCHES.map((b) => [b, { spinning: [], still: [], server: [], compute: [] }]));
try {
  for (let round = 0; round < Number(args.rounds); round++) {
    for (const b of BATCHES) {
      const x = image(b);
      const feeds = { image: new ort.Tensor('float32', x, [b, 3, 224, 224]) };
      points[b].spinning.push(await timed(CALLS[b], () => raw.spinning.run(feeds), { warmups: 1 }));
      points[b].still.push(await timed(CALLS[b], () => raw.still.run(feeds), { warmups: 1 }));
      const infer = () => server.client.infer('resnet50', [{ name: 'image', datatype: 'FP32', shape: [b, 3, 224, 224], data: x }]);
      // The warm-up call before the statistics are read: compute is a mean over the counted calls,
      // and a first run at a batch size (ONNX Runtime's planning) would weigh in it.
      await infer();
      const before = await stats();
      points[b].server.push(await timed(CALLS[b], infer, { warmups: 0 }));
      const after = await stats();
      points[b].compute.push((Number(after.ns) - Number(before.ns)) / (Number(after.count) - Number(before.count)) / 1e6);
    }
  }
} finally {
  await server.stop();
  for (const s of Object.values(raw)) await s.release();
  temp.cleanup();
}

console.log(`${new Date().toISOString().slice(0, 10)}, ${os.availableParallelism()} cores (${os.cpus()[0]?.model ?? '?'}), Node ${process.versions.node}, ${args.rounds} rounds, medians of the rounds' medians\n`);
console.log('| batch | raw, spinning (ms) | raw, not spinning (ms) | server end to end (ms) | server compute (ms) | server / raw spinning | server / raw not spinning |');
console.log('| --- | --- | --- | --- | --- | --- | --- |');
for (const b of BATCHES) {
  const p = Object.fromEntries(Object.entries(points[b]).map(([k, v]) => [k, median(v)]));
  console.log(`| ${b} | ${p.spinning.toFixed(1)} | ${p.still.toFixed(1)} | ${p.server.toFixed(1)} | ${p.compute.toFixed(1)} | ${(p.server / p.spinning).toFixed(2)} | ${(p.server / p.still).toFixed(2)} |`);
}
