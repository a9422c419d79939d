// Backend cuda on a real NVIDIA GPU: the binding's CUDA device memory, pinned copies, the CUDA
// provider and its options, weights bound from GPU memory, CUDA graphs; then the real server with
// backend cuda, its weight cache in GPU memory, evicting under a small budget, every answer checked
// against the model's own weights. Skipped, saying why, where no GPU and CUDA provider are (CI):
// `npm run test:gpu` on a GPU machine after `npm run cuda:install`.
import { allocateDeviceMemory, CUDA_ERROR_MEMORY_ALLOCATION, hostOutput, isOutOfMemory, OrtSession } from '../../dist/native/ort.js';
import { gpuReport, pinHost } from '../../dist/native/cuda.js';
import { relativeL2 } from '../helpers/checks.js';
import { gpuTest, moveDown } from '../helpers/gpu.js';
import { inferAndCheck, mlpLayers, mlpModel, mlpWeightBytes, random, writeCatalog } from '../helpers/mlp-catalog.js';
import { metric, scrapeMetrics, startServer, tempDir } from '../helpers/server.js';

const FLOAT = 1;

const CPU = { intraOpThreads: 1, allowSpinning: false, logSeverityLevel: 3 };
/** @param {Record<string, string>} options */
const onGpu = (options = {}) => ({ logSeverityLevel: 3, cuda: { deviceId: 0, options } });


/** @param {import('../../dist/native/ort.js').OrtOutput} out */
const floats = (out) => {
  const d = hostOutput(out).data;
  return new Float32Array(d.buffer, d.byteOffset, d.byteLength / 4);
};

gpuTest('the GPUs are found and described: name, memory, driver, CUDA and cuDNN versions', (t) => {
  const report = gpuReport();
  t.log(JSON.stringify(report));
  t.true(report.gpus.length >= 1);
  const [g] = report.gpus;
  t.regex(g.name, /NVIDIA/);
  t.regex(g.uuid, /^GPU-/);
  t.true(g.memoryTotalBytes > 2 ** 30, `${g.memoryTotalBytes} bytes`);
  t.true(g.memoryUsedBytes >= 0 && g.memoryUsedBytes < g.memoryTotalBytes);
  t.regex(report.driverVersion, /^\d+\.\d+/);
  t.regex(report.runtimeCuda, /^13\./);
  t.regex(report.cudnn, /^9\./);
});

gpuTest('GPU memory: copies both ways from pageable and pinned memory, moves within it, overlapping either way', (t) => {
  const bytes = 64 * 2 ** 20;
  const memory = allocateDeviceMemory(bytes, 'cuda:0');
  t.teardown(() => memory.release());
  t.is(memory.device, 'cuda:0');
  const next = random(5);
  const src = Uint8Array.from({ length: bytes }, () => Math.floor(next() * 256));
  const back = new Uint8Array(bytes);
  memory.copyFromHost(src);
  memory.copyToHost(back);
  t.true(Buffer.compare(src, back) === 0, 'what went in came back');
  // Pinned: the same bytes at the bus's speed.
  const pinnedSrc = new Uint8Array(new SharedArrayBuffer(bytes));
  pinnedSrc.set(src);
  const pin = pinHost(pinnedSrc);
  t.is(pin.bytes, bytes);
  const time = (/** @type {() => void} */ f) => {
    f();
    const t0 = performance.now();
    for (let i = 0; i < 5; i++) f();
    return (performance.now() - t0) / 5;
  };
  const pageableMs = time(() => memory.copyFromHost(src));
  const pinnedMs = time(() => memory.copyFromHost(pinnedSrc));
  t.log(`64 MiB host->device: pageable ${pageableMs.toFixed(2)} ms (${(bytes / pageableMs / 1e6).toFixed(1)} GB/s), pinned ${pinnedMs.toFixed(2)} ms (${(bytes / pinnedMs / 1e6).toFixed(1)} GB/s)`);
  t.true(pinnedMs < pageableMs, 'pinned copies are faster');
  pin.release();
  t.is(pin.bytes, 0);
  // moveWithin, overlapping forward and backward, against the same moves in host memory.
  const mirror = Uint8Array.from(src);
  for (const [to, from, length] of [[0, 1000, 5_000_000], [3000, 64, 9_000_000], [bytes - 100, 0, 100], [17, 17, 10]]) {
    memory.moveWithin(to, from, length);
    mirror.copyWithin(to, from, from + length);
  }
  memory.copyToHost(back);
  t.true(Buffer.compare(mirror, back) === 0, 'moves within GPU memory land as memmove would');
  t.throws(() => memory.moveWithin(bytes - 10, 0, 11), { code: 'ERR_ORT_ARGUMENT', message: /do not fit/ });
  t.like(t.throws(() => allocateDeviceMemory(16, 'cuda:99'), { message: /cuda:99/, code: 'ERR_CUDA' }), { origin: 'cuda' });
  // More than the GPU has: CUDA's cudaErrorMemoryAllocation, read by its number.
  const tooMuch = t.throws(() => allocateDeviceMemory(2 ** 48, 'cuda:0'));
  t.like(tooMuch, { code: 'ERR_CUDA', origin: 'cuda', cudaError: CUDA_ERROR_MEMORY_ALLOCATION, outOfMemory: true });
  t.true(isOutOfMemory(tooMuch));
  // A detached buffer is refused by pinHost as by every call that takes a buffer.
  const moved = new ArrayBuffer(1024);
  structuredClone(moved, { transfer: [moved] });
  t.throws(() => pinHost(moved), { code: 'ERR_ORT_ARGUMENT', message: /detached/ });
});

gpuTest('the CUDA provider answers as the CPU does; TF32 off to float32 precision, on within TF32\'s; its options read back', async (t) => {
  const layers = mlpLayers(11, [256, 1024, 1024, 10]);
  const model = mlpModel(layers);
  const rows = 32;
  const next = random(2);
  const x = Float32Array.from({ length: rows * 256 }, () => next() * 2 - 1);
  const feeds = [{ name: 'x', type: FLOAT, dims: [rows, 256], data: x }];
  const cpu = OrtSession.open(model, CPU);
  const exact = OrtSession.open(model, onGpu({ use_tf32: '0' }));
  const tf32 = OrtSession.open(model, onGpu({ use_tf32: '1', cudnn_conv_algo_search: 'HEURISTIC' }));
  t.teardown(() => { cpu.release(); exact.release(); tf32.release(); });
  t.is(cpu.providerOptions, '');
  t.regex(exact.providerOptions, /(^|;)device_id=0(;|$)/);
  t.regex(exact.providerOptions, /(^|;)use_tf32=0(;|$)/);
  t.regex(tf32.providerOptions, /(^|;)use_tf32=1(;|$)/);
  t.regex(tf32.providerOptions, /cudnn_conv_algo_search=HEURISTIC/);
  const want = floats((await cpu.run(feeds, ['y']))[0]);
  const a = floats((await exact.run(feeds, ['y']))[0]);
  const b = floats((await tf32.run(feeds, ['y']))[0]);
  const exactErr = relativeL2(a, want);
  const tf32Err = relativeL2(b, want);
  t.log(`relative L2 against the CPU: TF32 off ${exactErr.toExponential(2)}, on ${tf32Err.toExponential(2)}`);
  t.true(exactErr < 1e-5, `TF32 off: ${exactErr}`);
  t.true(tf32Err < 5e-3, `TF32 on: ${tf32Err}`);
  // Outputs into a host buffer we give: ONNX Runtime writes there (the same object comes back).
  const y = new Float32Array(rows * 10);
  const [given] = exact.runSync(feeds, [{ name: 'y', type: FLOAT, dims: [rows, 10], data: y }]);
  t.is(given.data, y);
  t.deepEqual([...y], [...a]);
  // An option ONNX Runtime does not know is its error, with its message.
  t.throws(() => OrtSession.open(model, onGpu({ no_such_option: '1' })), { message: /no_such_option/ });
});

gpuTest('weights bound from GPU memory answer as embedded ones, are read in place, and inputs and outputs can live on the GPU too', async (t) => {
  const layers = mlpLayers(12, [128, 512, 64]);
  const rows = 8;
  const next = random(3);
  const x = Float32Array.from({ length: rows * 128 }, () => next() * 2 - 1);
  const embedded = OrtSession.open(mlpModel(layers), onGpu({ use_tf32: '0' }));
  const weightless = OrtSession.open(mlpModel(layers, { weightsAsInputs: true }), onGpu({ use_tf32: '0' }));
  /** @type {import('../../dist/native/ort.js').DeviceMemory[]} */
  const memories = [];
  // Sessions first: their bound weights keep the memory from being released.
  t.teardown(() => { embedded.release(); weightless.release(); for (const m of memories) m.release(); });
  // The weights in one GPU allocation (the arena's shape), each at a 256-byte aligned offset.
  const tensors = layers.flatMap((l, i) => [{ name: `w${i}`, dims: [l.inputs, l.outputs], data: l.w }, { name: `b${i}`, dims: [l.outputs], data: l.b }]);
  let at = 0;
  const placed = tensors.map((w) => {
    const offset = at;
    at += Math.ceil(w.data.byteLength / 256) * 256;
    return { ...w, offset };
  });
  const arena = allocateDeviceMemory(at, 'cuda:0');
  memories.push(arena);
  for (const w of placed) arena.copyFromHost(w.data, w.offset);
  for (const w of placed) weightless.bindInput({ name: w.name, type: FLOAT, dims: w.dims, data: { memory: arena, offset: w.offset } });
  const feeds = [{ name: 'x', type: FLOAT, dims: [rows, 128], data: x }];
  const want = floats((await embedded.run(feeds, ['y']))[0]);
  const got = floats((await weightless.run(feeds, ['y']))[0]);
  const same = want.every((v, i) => v === got[i]);
  t.log(`bound from GPU memory vs embedded: ${same ? 'bitwise equal' : `relative L2 ${relativeL2(got, want).toExponential(2)}`}`);
  t.true(relativeL2(got, want) < 1e-6);
  t.throws(() => arena.release(), { message: /still viewed/ }, 'the bound weights keep the memory');
  // ONNX Runtime reads our memory on every run: the last layer's bias changed on the GPU shows.
  const bias = placed.find((w) => w.name === 'b1');
  if (!bias) throw new Error('no b1');
  arena.copyFromHost(new Float32Array(64).fill(1000), bias.offset);
  const moved = floats((await weightless.run(feeds, ['y']))[0]);
  t.true(moved.every((v, i) => Math.abs(v - (got[i] - layers[1].b[i % 64] + 1000)) < 1e-2), 'the new bias is what the run read');
  arena.copyFromHost(layers[1].b, bias.offset);
  // Input and output in GPU memory: nothing crosses the bus until we copy the answer back.
  const io = allocateDeviceMemory(rows * 128 * 4 + rows * 64 * 4, 'cuda:0');
  memories.push(io);
  io.copyFromHost(x, 0);
  const [out] = await weightless.run([{ name: 'x', type: FLOAT, dims: [rows, 128], data: { memory: io, offset: 0 } }], [{ name: 'y', type: FLOAT, dims: [rows, 64], data: { memory: io, offset: rows * 128 * 4 } }]);
  t.false(ArrayBuffer.isView(out.data), 'the output stayed on the GPU');
  const y = new Float32Array(rows * 64);
  io.copyToHost(y, rows * 128 * 4);
  t.deepEqual([...y], [...got]);
});

gpuTest('CUDA graphs: captured over fixed GPU addresses, replayed reading the buffers\' current contents', async (t) => {
  const layers = mlpLayers(13, [64, 256, 16]);
  const rows = 4;
  const graph = OrtSession.open(mlpModel(layers), onGpu({ use_tf32: '0', enable_cuda_graph: '1' }));
  const plain = OrtSession.open(mlpModel(layers), onGpu({ use_tf32: '0' }));
  const io = allocateDeviceMemory(rows * 64 * 4 + rows * 16 * 4, 'cuda:0');
  t.teardown(() => { graph.release(); plain.release(); io.release(); });
  const input = { name: 'x', type: FLOAT, dims: [rows, 64], data: { memory: io, offset: 0 } };
  const output = { name: 'y', type: FLOAT, dims: [rows, 16], data: { memory: io, offset: rows * 64 * 4 } };
  const next = random(4);
  for (let call = 0; call < 4; call++) {
    const x = Float32Array.from({ length: rows * 64 }, () => next() * 2 - 1);
    io.copyFromHost(x, 0);
    // On this thread, as the device actor runs every CUDA run (worker.ts): the first runs capture
    // under the capture lock, the later ones replay.
    graph.runSync([input], [output]);
    const y = new Float32Array(rows * 16);
    io.copyToHost(y, rows * 64 * 4);
    const want = floats(plain.runSync([{ name: 'x', type: FLOAT, dims: [rows, 64], data: x }], ['y'])[0]);
    t.true(relativeL2(y, want) < 1e-6, `call ${call}: the replay read the new input`);
  }
  const t0 = performance.now();
  for (let i = 0; i < 200; i++) graph.runSync([input], [output]);
  const replayUs = ((performance.now() - t0) / 200) * 1000;
  const t1 = performance.now();
  for (let i = 0; i < 200; i++) plain.runSync([input], [output]);
  const plainUs = ((performance.now() - t1) / 200) * 1000;
  t.log(`per run: CUDA graph ${replayUs.toFixed(0)} us, without ${plainUs.toFixed(0)} us`);
});

gpuTest('the server on backend cuda: a catalog five times the GPU weight budget answers right, evicting, the nv_gpu_* metrics reported', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const sizes = [64, 1024, 8];
  const count = 20;
  const weightBytes = mlpWeightBytes(sizes);
  const budget = Math.floor((count * weightBytes) / 5 / 64) * 64;
  const catalog = writeCatalog(`${temp.dir}/repo`, { count, sizes });
  const server = await startServer({
    model_repo: `${temp.dir}/repo`,
    global: { runtime: { backend: 'cuda', cuda: { tf32: false, weight_cache_bytes: budget } } },
  }, { root: temp.dir });
  t.teardown(() => server.stop());
  const found = server.logs.find((e) => e.msg === 'GPUs found');
  t.truthy(found, 'the GPUs are logged at start');
  t.log(JSON.stringify(found));
  const next = random(9);
  let wrong = 0;
  for (let round = 0; round < 3; round++) {
    for (const model of catalog) {
      const message = await inferAndCheck(server.client, model, 1 + Math.floor(next() * 4), next);
      if (message) {
        wrong++;
        t.log(message);
      }
    }
  }
  // Concurrent calls on different models: coalescing and evictions under load.
  const results = await Promise.all(Array.from({ length: 60 }, (_, i) => inferAndCheck(server.client, catalog[(i * 7) % count], 2, next)));
  wrong += results.filter((r) => r !== null).length;
  t.is(wrong, 0, 'every answer is the model\'s own');
  const m = await scrapeMetrics(server.adminPort);
  t.is(metric(m, 'stowage_weight_cache_budget_bytes', 'device="0"'), budget);
  t.true(metric(m, 'stowage_weight_cache_resident_bytes', 'device="0"') <= budget);
  const evictions = catalog.reduce((sum, { name }) => sum + metric(m, 'stowage_weight_cache_evictions_total', `model="${name}"`), 0);
  t.true(evictions > count, `${evictions} evictions`);
  const gpuSamples = Object.keys(m).filter((k) => k.startsWith('nv_gpu_'));
  t.log(gpuSamples.map((k) => `${k} ${m[k]}`).join('\n'));
  const total = Object.entries(m).find(([k]) => k.startsWith('nv_gpu_memory_total_bytes{gpu_uuid="GPU-'));
  t.truthy(total, 'nv_gpu_memory_total_bytes per GPU, labelled by its UUID');
  t.true((total?.[1] ?? 0) > 2 ** 30);
  t.truthy(Object.keys(m).find((k) => k.startsWith('nv_gpu_utilization{')));
  t.truthy(Object.keys(m).find((k) => k.startsWith('nv_gpu_power_usage{')));
});

gpuTest('compaction\'s move of 256 MiB by 64 bytes on the GPU: bit-exact, through the scratch buffer, in under a second', (t) => {
  const MiB = 2 ** 20;
  const memory = allocateDeviceMemory(256 * MiB, 'cuda:0');
  t.teardown(() => memory.release());
  const { same, ms } = moveDown(memory, 256 * MiB, 64);
  t.true(same, 'as memmove leaves the bytes');
  t.log(`256 MiB moved by 64 bytes in ${ms.toFixed(1)} ms`);
  t.true(ms < 1000, `${ms.toFixed(0)} ms (the old plan's ~4 million copies took tens of seconds)`);
});
