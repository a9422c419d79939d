// One request carrying a 64 MiB FP32 input, inline (in the gRPC message) versus through system
// shared memory (the region already holds the tensor, as when a local producer writes it there),
// against a model that only sums it. Prints median times of both and the ratio. Then a 64 MiB
// output (a model that negates its input) into the region: at an aligned offset ONNX Runtime
// computes it there itself; at an offset misaligned for FP32 it is written after the run, one
// copy more (docs/performance.md).
//
//   npm run build && node bench/shared-memory.js [repetitions, default 7]
import path from 'node:path';
import { createRegion, destroyRegion, writeRegion } from '../dist/client/shared-memory.js';
import { makeRepository, startServer, tempDir } from '../test/helpers/server.js';
import { makeBenchModels } from './bench-models.js';

const reps = Number(process.argv[2] ?? 7);
const ELEMENTS = 16 * 1024 * 1024;
const temp = tempDir('stowage-bench-');
makeBenchModels(path.join(temp.dir, 'generated'));
const repo = makeRepository(temp.dir, { sum64: path.join(temp.dir, 'generated', 'sum64'), neg64: path.join(temp.dir, 'generated', 'neg64') });
const server = await startServer({ model_repo: repo }, { root: temp.dir });
const { client } = server;

const x = new Float32Array(ELEMENTS).fill(1);
const key = `/stowage_bench_${process.pid}`;
// The input, then room for an output at an aligned offset and at one 2 bytes further.
const regionBytes = 3 * x.byteLength + 8;
createRegion(key, regionBytes);
writeRegion(key, 0, x);
await client.registerSystemSharedMemory('bench', key, regionBytes);

const inline = () => client.infer('sum64', [{ name: 'x', datatype: 'FP32', shape: [1, ELEMENTS], data: x }]);
const shared = () => client.infer('sum64', [{ name: 'x', datatype: 'FP32', shape: [1, ELEMENTS], sharedMemory: { region: 'bench', byteSize: x.byteLength } }]);

const input = [{ name: 'x', datatype: 'FP32', shape: [1, ELEMENTS], sharedMemory: { region: 'bench', byteSize: x.byteLength } }];
const negatedAt = (offset) => () => client.infer('neg64', input, { outputs: [{ name: 'y', sharedMemory: { region: 'bench', byteSize: x.byteLength, offset } }] });
const direct = negatedAt(x.byteLength);
const copied = negatedAt(2 * x.byteLength + 2);

async function median(fn, check = (outputs) => outputs[0].data[0] === ELEMENTS) {
  const times = [];
  for (let i = 0; i < reps; i++) {
    const t0 = performance.now();
    const { outputs } = await fn();
    times.push(performance.now() - t0);
    if (!check(outputs)) throw new Error(`wrong answer ${outputs[0].data[0]}`);
  }
  return times.sort((a, b) => a - b)[Math.floor(times.length / 2)];
}

await inline();
await shared(); // warm up both paths
const inlineMs = await median(inline);
const sharedMs = await median(shared);
await direct();
await copied();
const inRegion = (outputs) => outputs[0].data.length === 0;
const directMs = await median(direct, inRegion);
const copiedMs = await median(copied, inRegion);
await client.unregisterSystemSharedMemory('bench');
destroyRegion(key);
await server.stop();
temp.cleanup();

console.log(`\nnode ${process.version}, one 64 MiB FP32 input, median of ${reps}`);
console.log(`inline (in the gRPC message)   ${inlineMs.toFixed(1).padStart(8)} ms`);
console.log(`system shared memory           ${sharedMs.toFixed(1).padStart(8)} ms`);
console.log(`inline / shared memory         ${(inlineMs / sharedMs).toFixed(1).padStart(8)}x`);
console.log(`\none 64 MiB FP32 output into the region (input there too), median of ${reps}`);
console.log(`computed into the region       ${directMs.toFixed(1).padStart(8)} ms`);
console.log(`copied in after the run        ${copiedMs.toFixed(1).padStart(8)} ms`);
