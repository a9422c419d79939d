// One request carrying a 64 MiB FP32 input, inline (in the gRPC message) versus through system
// shared memory (the region already holds the tensor, as when a local producer writes it there),
// against a model that only sums it. Prints median times of both and the ratio.
//
//   npm run build && node bench/shared-memory.js [repetitions, default 7]
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { createRegion, destroyRegion, writeRegion } from '../dist/client/shared-memory.js';
import { ROOT, makeRepository, startServer, tempDir } from '../test/helpers/server.js';

const reps = Number(process.argv[2] ?? 7);
const ELEMENTS = 16 * 1024 * 1024;
const temp = tempDir('stowage-bench-');
const python = existsSync(path.join(ROOT, '.venv', 'bin', 'python')) ? path.join(ROOT, '.venv', 'bin', 'python') : 'python3';
execFileSync(python, [path.join(ROOT, 'tools', 'make_bench_models.py'), path.join(temp.dir, 'generated')], { stdio: 'inherit' });
const repo = makeRepository(temp.dir, { sum64: path.join(temp.dir, 'generated', 'sum64') });
const server = await startServer({ model_repo: repo }, { root: temp.dir });
const { client } = server;

const x = new Float32Array(ELEMENTS).fill(1);
const key = `/stowage_bench_${process.pid}`;
createRegion(key, x.byteLength);
writeRegion(key, 0, x);
await client.registerSystemSharedMemory('bench', key, x.byteLength);

const inline = () => client.infer('sum64', [{ name: 'x', datatype: 'FP32', shape: [1, ELEMENTS], data: x }]);
const shared = () => client.infer('sum64', [{ name: 'x', datatype: 'FP32', shape: [1, ELEMENTS], sharedMemory: { region: 'bench', byteSize: x.byteLength } }]);

async function median(fn) {
  const times = [];
  for (let i = 0; i < reps; i++) {
    const t0 = performance.now();
    const { outputs } = await fn();
    times.push(performance.now() - t0);
    if (outputs[0].data[0] !== ELEMENTS) throw new Error(`wrong sum ${outputs[0].data[0]}`);
  }
  return times.sort((a, b) => a - b)[Math.floor(times.length / 2)];
}

await inline();
await shared(); // warm up both paths
const inlineMs = await median(inline);
const sharedMs = await median(shared);
await client.unregisterSystemSharedMemory('bench');
destroyRegion(key);
await server.stop();
temp.cleanup();

console.log(`\nnode ${process.version}, one 64 MiB FP32 input, median of ${reps}`);
console.log(`inline (in the gRPC message)   ${inlineMs.toFixed(1).padStart(8)} ms`);
console.log(`system shared memory           ${sharedMs.toFixed(1).padStart(8)} ms`);
console.log(`inline / shared memory         ${(inlineMs / sharedMs).toFixed(1).padStart(8)}x`);
