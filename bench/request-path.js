// Request-path benchmark: the real server (node main.js) on free ports, driven by our client over
// real gRPC on loopback. Prints p50/p99 latency and throughput for a tiny request (the digits
// model, one image) and a 600 KiB one (the echo fixture, 150 x 1024 FP32), at concurrency 1 and 16.
// The machine is shared and noisy: compare rows of one run, not runs of different days.
//
//   npm run build && node bench/request-path.js [seconds per row, default 3]
import path from 'node:path';
import { FIXTURES, ROOT, makeRepository, startServer, tempDir } from '../test/helpers/server.js';

const seconds = Number(process.argv[2] ?? 3);
const temp = tempDir('stowage-bench-');
const repo = makeRepository(temp.dir, { digits: path.join(ROOT, 'bundles', 'digits'), echo: path.join(FIXTURES, 'models', 'echo') });
const server = await startServer({ model_repo: repo, global: { logging: { level: 'info' } } }, { root: temp.dir });

const cases = {
  'digits, 1 image (256 B)': ['digits', () => [{ name: 'image', datatype: 'FP32', shape: [1, 8, 8], data: new Float32Array(64) }], ['label']],
  'echo, 150x1024 FP32 (600 KiB)': ['echo', () => [{ name: 'x', datatype: 'FP32', shape: [150, 1024], data: new Float32Array(150 * 1024) }], ['y']],
};

async function measure(model, makeInputs, outputs, concurrency) {
  const latenciesMs = [];
  const end = performance.now() + seconds * 1000;
  const worker = async () => {
    while (performance.now() < end) {
      const t0 = performance.now();
      await server.client.infer(model, makeInputs(), { outputs });
      latenciesMs.push(performance.now() - t0);
    }
  };
  const t0 = performance.now();
  await Promise.all(Array.from({ length: concurrency }, worker));
  const elapsed = (performance.now() - t0) / 1000;
  latenciesMs.sort((a, b) => a - b);
  const pct = (p) => latenciesMs[Math.min(latenciesMs.length - 1, Math.floor(p * latenciesMs.length))];
  return { rps: latenciesMs.length / elapsed, p50: pct(0.5), p99: pct(0.99), n: latenciesMs.length };
}

console.log(`node ${process.version}, ${seconds} s per row`);
console.log('case                                  conc   req/s   p50 ms   p99 ms');
for (const [name, [model, makeInputs, outputs]] of Object.entries(cases)) {
  await measure(model, makeInputs, outputs, 4); // warm up
  for (const concurrency of [1, 16]) {
    const r = await measure(model, makeInputs, outputs, concurrency);
    console.log(`${name.padEnd(36)} ${String(concurrency).padStart(5)} ${r.rps.toFixed(0).padStart(7)} ${r.p50.toFixed(2).padStart(8)} ${r.p99.toFixed(2).padStart(8)}`);
  }
}
await server.stop();
temp.cleanup();
