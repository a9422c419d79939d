// Stowage's ONNX Runtime binding (src/native/ort.cc) on the real library onnxruntime-node installs:
// outputs written into the buffers given, inputs bound once and kept, BYTES in KServe's layout,
// runs that resolve on a libuv thread and can be terminated, typed errors, and a fuzz of every
// entry point that must end with the process alive and every bad call refused with a code.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { MessageChannel } from 'node:worker_threads';
import test from 'ava';
import { allocateDeviceMemory, cpuArenaStats, CUDA_ERROR_MEMORY_ALLOCATION, heapBytesInUse, hostOutput, initOrt, isOutOfMemory, ortAddon, OrtSession, registerCpuArena } from '../../../dist/native/ort.js';
import { pinHost } from '../../../dist/native/cuda.js';
import { byOnnxType } from '../../../dist/shared/dtypes.js';
import { joinBytesElements, splitBytesElements } from '../../../dist/shared/bytes-elements.js';
import { EXTERNAL_WEIGHTS_FILE, mlpExpected, mlpLayers, mlpModel, random } from '../../helpers/mlp-catalog.js';
import { FIXTURES, tempDir } from '../../helpers/server.js';

const FLOAT = 1;
const MODELS = path.join(FIXTURES, 'models');
const opts = { intraOpThreads: 1, allowSpinning: false, logSeverityLevel: 3 };
/**
 * The error a call rejected with, as the binding's: a real Error carrying a string code.
 * @param {unknown} err
 * @returns {import('../../../dist/native/ort.js').OrtError}
 */
const ortError = (err) => {
  if (!(err instanceof Error) || typeof (/** @type {{ code?: unknown }} */ (err).code) !== 'string') throw new Error(`not a binding error: ${err}`);
  return /** @type {import('../../../dist/native/ort.js').OrtError} */ (err);
};

test('the binding loads onnxruntime-node\'s library and reads a session\'s inputs and outputs', (t) => {
  t.regex(initOrt(), /^1\.\d+\.\d+$/);
  const s = OrtSession.open(path.join(MODELS, 'double', 'model.onnx'), opts);
  t.deepEqual(s.inputs, [{ name: 'x', isTensor: true, type: FLOAT, dims: ['n', 1024] }]);
  t.deepEqual(s.inputMetadata, [{ name: 'x', isTensor: true, type: 'float32', shape: ['n', 1024] }]);
  s.release();
});

test('memory running out is recognised by its numbers: ONNX Runtime\'s CPU arena refusing a run\'s buffer, its allocator refusing device memory', async (t) => {
  // y = Expand(x, shape): a run asks ONNX Runtime's arena for 4 TiB.
  const s = OrtSession.open(path.join(FIXTURES, 'graphs', 'expand.onnx'), { ...opts, logSeverityLevel: 4 }); // the refusals are this test's, not news
  t.teardown(() => s.release());
  const inputs = (/** @type {number} */ n) => [
    { name: 'x', type: FLOAT, dims: [1], data: new Float32Array([3]) },
    { name: 'shape', type: 7, dims: [1], data: new BigInt64Array([BigInt(n)]) },
  ];
  const [small] = s.runSync(inputs(4), ['y']);
  t.deepEqual([...new Float32Array(hostOutput(small).data.buffer, hostOutput(small).data.byteOffset, 4)], [3, 3, 3, 3]);
  for (const failed of [await s.run(inputs(2 ** 40), ['y']).then(() => null, (e) => e), (() => { try { s.runSync(inputs(2 ** 40), ['y']); return null; } catch (e) { return e; } })()]) {
    const err = ortError(failed);
    t.like(err, { code: 'ORT_FAIL', origin: 'onnxruntime', ortCode: 1, outOfMemory: true });
    t.true(isOutOfMemory(err));
  }
  // The session is still good after it.
  t.is(s.runSync(inputs(2), ['y'])[0].dims[0], 2);
  // Device memory from ONNX Runtime's CPU allocator: refused with the binding's own code, not a crash.
  const refused = ortError(t.throws(() => allocateDeviceMemory(2 ** 50, 'cpu')));
  t.like(refused, { code: 'ERR_OUT_OF_MEMORY', origin: 'allocator', outOfMemory: true, memory: 'host' });
  t.regex(refused.message, /device cpu: ONNX Runtime's allocator cannot allocate 1125899906842624 bytes/);
  // Any other failure is not memory.
  const other = ortError(await s.run([inputs(1)[0]], ['y']).then(() => null, (e) => e));
  t.like(other, { code: 'ERR_ORT_ARGUMENT', origin: 'argument', outOfMemory: false });
  t.false(isOutOfMemory(other));
  t.false(isOutOfMemory(new Error('out of memory')), 'words alone are not the binding\'s verdict');
});

test('pinHost checks its buffer as every call that takes one does, before it needs CUDA', (t) => {
  const moved = new ArrayBuffer(1024);
  structuredClone(moved, { transfer: [moved] });
  for (const call of [() => pinHost(moved), () => allocateDeviceMemory(1024).copyFromHost(moved)]) t.throws(call, { code: 'ERR_ORT_ARGUMENT', message: /detached/ });
  t.throws(() => pinHost(/** @type {any} */ ('bytes')), { code: 'ERR_ORT_ARGUMENT', message: /data must be an ArrayBuffer or a view of one/ });
  t.throws(() => pinHost(new Uint8Array(8)), { code: 'ERR_ORT_ARGUMENT', message: /the CUDA runtime is not loaded/ });
});

test('a GPU\'s failures inside ONNX Runtime\'s statuses are read into numbers: CUDA\'s error, a library\'s status, out of memory', (t) => {
  initOrt();
  const read = (/** @type {string} */ message) => ortAddon().ortFailure(1, message);
  t.like(read('Non-zero status code returned while running Conv node. Name:\'c\' Status Message: CUDA failure 2: out of memory ; GPU=0 ; hostname=h ; file=cuda_allocator.cc ; line=51 ; expr=cudaMalloc((void**)&p, size);'),
    { code: 'ORT_FAIL', origin: 'onnxruntime', ortCode: 1, library: 'CUDA', libraryStatus: CUDA_ERROR_MEMORY_ALLOCATION, cudaError: CUDA_ERROR_MEMORY_ALLOCATION, outOfMemory: true, memory: 'gpu' });
  t.like(read('CUBLAS failure 3: CUBLAS_STATUS_ALLOC_FAILED ; GPU=0 ; expr=cublasCreate(&handle);'), { library: 'CUBLAS', libraryStatus: 3, outOfMemory: true });
  t.like(read('CUDNN failure 2000: CUDNN_STATUS_ALLOC_FAILED ; GPU=1'), { library: 'CUDNN', libraryStatus: 2000, outOfMemory: true, memory: 'gpu' });
  // cuDNN 9 names the memory: the GPU's, or the host's.
  t.like(read('CUDNN failure 4004: CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED ; GPU=0 ; expr=cudnnConvolutionForward(...);'), { library: 'CUDNN', libraryStatus: 4004, outOfMemory: true, memory: 'gpu' });
  t.like(read('CUDNN failure 4003: CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ; GPU=0'), { library: 'CUDNN', libraryStatus: 4003, outOfMemory: true, memory: 'host' });
  // ONNX Runtime's arena: the same words over any device's memory.
  t.like(read('Available memory of 65536 is smaller than requested bytes of 131072'), { outOfMemory: true, memory: 'arena' });
  t.like(read('bfc_arena.cc:376 void* onnxruntime::BFCArena::AllocateRawInternal(size_t, bool, onnxruntime::Stream*) Failed to allocate memory for requested buffer of size 4096'), { outOfMemory: true, memory: 'arena' });
  t.like(read('Failed to allocate memory for requested buffer of size 4096 (CUDA)'), { outOfMemory: true, memory: 'gpu' });
  t.like(read('std::bad_alloc'), { outOfMemory: true, memory: 'host' });
  // A sticky fault is a CUDA error too, but not memory.
  const illegal = read('CUDA failure 700: an illegal memory access was encountered ; GPU=0 ; expr=cudaStreamSynchronize(stream);');
  t.like(illegal, { library: 'CUDA', cudaError: 700, outOfMemory: false });
  for (const message of ['Got invalid dimensions for input: x', 'delta in Range operator can not be zero!', 'a failure 12 without a library', 'CUDA failure x: no number']) {
    const err = read(message);
    t.false(err.outOfMemory, message);
    t.is(err.cudaError, undefined, message);
  }
  t.is(ortAddon().ortFailure(6, 'x').code, 'ORT_RUNTIME_EXCEPTION');
  t.is(ortAddon().ortFailure(99, 'x').code, 'ORT_ERROR');
});

test('an output given a buffer is written there, in place: the same object comes back', async (t) => {
  const s = OrtSession.open(path.join(MODELS, 'double', 'model.onnx'), opts);
  t.teardown(() => s.release());
  const x = Float32Array.from({ length: 3 * 1024 }, (_, i) => i - 7);
  const y = new Float32Array(3 * 1024);
  const [out] = await s.run([{ name: 'x', type: FLOAT, dims: [3, 1024], data: x }], [{ name: 'y', type: FLOAT, dims: [3, 1024], data: y }]);
  t.is(out.data, y, 'no copy after the run: the answer is the caller\'s buffer');
  t.deepEqual(out.dims, [3, 1024]);
  t.true(y.every((v, i) => v === 2 * x[i]));
  // runSync: the same, on this thread, for runs shorter than the hop to a libuv thread.
  const z = new Float32Array(3 * 1024);
  const [inline] = s.runSync([{ name: 'x', type: FLOAT, dims: [3, 1024], data: x }], [{ name: 'y', type: FLOAT, dims: [3, 1024], data: z }]);
  t.is(inline.data, z);
  t.true(z.every((v, i) => v === 2 * x[i]));
  // Named only: ONNX Runtime allocates it, and it comes back over ONNX Runtime's memory, which
  // cannot be transferred to another thread.
  const [own] = await s.run([{ name: 'x', type: FLOAT, dims: [3, 1024], data: x }], ['y']);
  const values = new Float32Array(hostOutput(own).data.buffer, hostOutput(own).data.byteOffset, 3 * 1024);
  t.true(values.every((v, i) => v === 2 * x[i]));
  const channel = new MessageChannel();
  t.teardown(() => channel.port1.close());
  t.throws(() => channel.port1.postMessage(own.data, [/** @type {ArrayBuffer} */ (hostOutput(own).data.buffer)]));
});

test('inputs bound once are read by every later run, and must be given again only after unbindInputs', async (t) => {
  // A weightless MLP: its weights are graph inputs, bound once like the device's arena views.
  const layers = mlpLayers(3, [8, 16, 4]);
  const full = mlpModel(layers);
  const s = OrtSession.open(full, opts);
  t.teardown(() => s.release());
  const rows = 2;
  const next = random(1);
  const x = Float32Array.from({ length: rows * 8 }, () => next() * 2 - 1);
  const [a] = await s.run([{ name: 'x', type: FLOAT, dims: [rows, 8], data: x }], ['y']);
  const want = [...mlpExpected(layers, x.subarray(0, 8)), ...mlpExpected(layers, x.subarray(8, 16))];
  const got = [...new Float32Array(hostOutput(a).data.buffer, hostOutput(a).data.byteOffset, rows * 4)];
  t.true(got.every((v, i) => Math.abs(v - want[i]) < 1e-4), 'the embedded model answers as computed here');
  // x bound for good: a run without it reads the bound one.
  s.bindInput({ name: 'x', type: FLOAT, dims: [rows, 8], data: x });
  const [b] = await s.run([], ['y']);
  t.deepEqual([...new Float32Array(hostOutput(b).data.buffer, hostOutput(b).data.byteOffset, rows * 4)], got);
  const err = ortError(await t.throwsAsync(s.run([{ name: 'x', type: FLOAT, dims: [rows, 8], data: x }], ['y'])));
  t.is(err.code, 'ERR_ORT_ARGUMENT');
  t.regex(err.message, /input x is bound with bindInput/);
  s.unbindInputs();
  const missing = ortError(await t.throwsAsync(s.run([], ['y'])));
  t.regex(missing.message, /input x is missing/);
});

test('bindings of their own on one session: each model of a graph runs with its weights, bound once, released apart', async (t) => {
  // One weightless MLP graph, three models' weights: each bound in a binding of its own on one session.
  const sizes = [8, 16, 4];
  const models = [3, 4, 5].map((seed) => mlpLayers(seed, sizes));
  const s = OrtSession.open(mlpModel(models[0], { weightsAsInputs: true }), opts);
  t.teardown(() => s.release());
  const bindings = models.map((layers) => {
    const b = s.createBinding();
    layers.forEach((l, i) => {
      b.bindInput({ name: `w${i}`, type: FLOAT, dims: [l.inputs, l.outputs], data: l.w });
      b.bindInput({ name: `b${i}`, type: FLOAT, dims: [l.outputs], data: l.b });
    });
    return b;
  });
  const next = random(2);
  const x = Float32Array.from({ length: 8 }, () => next() * 2 - 1);
  const answer = (/** @type {import('../../../dist/native/ort.js').OrtOutput} */ out) => [...new Float32Array(hostOutput(out).data.buffer, hostOutput(out).data.byteOffset, 4)];
  const close = (/** @type {number[]} */ got, /** @type {number[]} */ want) => got.every((v, i) => Math.abs(v - want[i]) < 1e-4);
  // In turns, on a libuv thread and on this one: every answer its own model's.
  for (let round = 0; round < 3; round++) {
    for (const [k, b] of bindings.entries()) {
      const [y] = round === 1 ? b.runSync([{ name: 'x', type: FLOAT, dims: [1, 8], data: x }], ['y']) : await b.run([{ name: 'x', type: FLOAT, dims: [1, 8], data: x }], ['y']);
      t.true(close(answer(y), [...mlpExpected(models[k], x)]), `round ${round}, model ${k}`);
    }
  }
  // The session's own binding has no weights: a run there must give them all.
  t.regex(ortError(await t.throwsAsync(s.run([{ name: 'x', type: FLOAT, dims: [1, 8], data: x }], ['y']))).message, /input w0 is missing/);
  // Runs of one session go one at a time, whatever binding they use.
  const first = bindings[0].run([{ name: 'x', type: FLOAT, dims: [1, 8], data: x }], ['y']);
  t.regex(ortError(await t.throwsAsync(bindings[1].run([{ name: 'x', type: FLOAT, dims: [1, 8], data: x }], ['y']))).message, /already in flight/);
  await first;
  // One released: the others run on; it refuses.
  bindings[1].release();
  t.regex(ortError(await t.throwsAsync(bindings[1].run([{ name: 'x', type: FLOAT, dims: [1, 8], data: x }], ['y']))).message, /binding has been released/);
  const [y2] = await bindings[2].run([{ name: 'x', type: FLOAT, dims: [1, 8], data: x }], ['y']);
  t.true(close(answer(y2), [...mlpExpected(models[2], x)]));
  // The session released: every binding of it refuses, and nothing crashes.
  s.release();
  t.regex(ortError(await t.throwsAsync(bindings[0].run([{ name: 'x', type: FLOAT, dims: [1, 8], data: x }], ['y']))).message, /session has been released/);
  t.throws(() => bindings[2].bindInput({ name: 'x', type: FLOAT, dims: [1, 8], data: x }), { message: /session has been released/ });
});

test('a session counts the input shapes its runs went through: each one\'s first run is the one that holds a GPU\'s capture lock', async (t) => {
  const layers = mlpLayers(8, [8, 16, 4]);
  const s = OrtSession.open(mlpModel(layers, { weightsAsInputs: true }), opts);
  t.teardown(() => s.release());
  const b = s.createBinding();
  layers.forEach((l, i) => {
    b.bindInput({ name: `w${i}`, type: FLOAT, dims: [l.inputs, l.outputs], data: l.w });
    b.bindInput({ name: `b${i}`, type: FLOAT, dims: [l.outputs], data: l.b });
  });
  const x = (/** @type {number} */ rows) => [{ name: 'x', type: FLOAT, dims: [rows, 8], data: new Float32Array(rows * 8) }];
  t.is(s.shapesRun, 0);
  await b.run(x(1), ['y']);
  b.runSync(x(1), ['y']);
  t.is(s.shapesRun, 1, 'batch 1 twice: one shape (the weights bound are not the run\'s own)');
  await b.run(x(4), ['y']);
  t.is(s.shapesRun, 2, 'a new batch size is a new shape');
  // A run refused before it ran leaves the count as it was: its shape is still to be run first.
  await t.throwsAsync(b.run([{ name: 'x', type: FLOAT, dims: [3, 8], data: new Float32Array(5) }], ['y']));
  t.is(s.shapesRun, 2);
});

test('one CPU arena for the process: registered once, sessions opened on it take their runs\' activations from it, memory patterns on or off', async (t) => {
  // Registered once per process (ava may have run another test file's registration in this worker first).
  registerCpuArena();
  t.false(registerCpuArena(), 'a second registration is a no-op');
  const layers = mlpLayers(6, [64, 512, 512, 8]);
  const before = cpuArenaStats();
  t.truthy(before);
  for (const memoryPattern of [true, false]) {
    const s = OrtSession.open(mlpModel(layers), { ...opts, useEnvAllocators: true, memoryPattern });
    const allocs = cpuArenaStats()?.NumAllocs ?? 0;
    const x = new Float32Array(32 * 64).fill(0.5);
    for (let i = 0; i < 3; i++) await s.run([{ name: 'x', type: FLOAT, dims: [32, 64], data: x }], [{ name: 'y', type: FLOAT, dims: [32, 8], data: new Float32Array(32 * 8) }]);
    const after = /** @type {Record<string, number>} */ (cpuArenaStats());
    t.true(after.NumAllocs > allocs, `memoryPattern ${memoryPattern}: the session's runs allocated from the shared arena (${allocs} -> ${after.NumAllocs})`);
    t.true(after.MaxInUse >= 32 * 512 * 4, `memoryPattern ${memoryPattern}: a batch's hidden activations were in it at once (${after.MaxInUse} bytes)`);
    t.true(after.TotalAllocated >= after.InUse);
    s.release();
  }
  const other = OrtSession.open(mlpModel(layers), opts);
  const allocs = cpuArenaStats()?.NumAllocs;
  await other.run([{ name: 'x', type: FLOAT, dims: [4, 64], data: new Float32Array(4 * 64) }], ['y']);
  t.is(cpuArenaStats()?.NumAllocs, allocs, 'a session without useEnvAllocators keeps to an arena of its own');
  other.release();
  t.true(heapBytesInUse() > 0);
});

test('initializers over our memory: in place with initializers, copied in with externalInitializers', (t) => {
  // A model whose weights are external data (the file beside it is empty): each session is handed them.
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const layers = mlpLayers(3, [16, 32, 4]);
  const file = path.join(temp.dir, 'model.onnx');
  writeFileSync(file, mlpModel(layers, { externalWeights: true }));
  writeFileSync(path.join(temp.dir, EXTERNAL_WEIGHTS_FILE), '');
  /** @param {Float32Array} b the last layer's bias, our memory */
  const weights = (b) => layers.flatMap((l, i) => [
    { name: `w${i}`, type: FLOAT, dims: [l.inputs, l.outputs], data: l.w },
    { name: `b${i}`, type: FLOAT, dims: [l.outputs], data: i === layers.length - 1 ? b : l.b },
  ]);
  const inPlaceBias = Float32Array.from(layers[1].b);
  const copiedBias = Float32Array.from(layers[1].b);
  const inPlace = OrtSession.open(file, { ...opts, graphOptimizationLevel: 'disabled', initializers: weights(inPlaceBias) });
  const copied = OrtSession.open(file, { ...opts, graphOptimizationLevel: 'disabled', externalInitializers: weights(copiedBias) });
  t.teardown(() => { inPlace.release(); copied.release(); });
  const x = Float32Array.from({ length: 16 }, (_, i) => Math.cos(i));
  const run = (/** @type {OrtSession} */ s) => {
    const [y] = s.runSync([{ name: 'x', type: FLOAT, dims: [1, 16], data: x }], [{ name: 'y', type: FLOAT, dims: [1, 4], data: new Float32Array(4) }]);
    return /** @type {Float32Array} */ (y.data);
  };
  const want = mlpExpected(layers, x);
  for (const s of [inPlace, copied]) t.true(run(s).every((v, k) => Math.abs(v - want[k]) < 1e-4), 'both answer what the weights give');
  // Our memory changes under the session given it in place, not under the one that copied it.
  inPlaceBias.fill(100);
  copiedBias.fill(100);
  t.true(run(inPlace).every((v, k) => Math.abs(v - (want[k] - layers[1].b[k] + 100)) < 1e-3), 'in place: the new bias is read');
  t.true(run(copied).every((v, k) => Math.abs(v - want[k]) < 1e-4), 'copied: the old bias stays');
  // A name the model does not hold, or without the empty file beside it, is ONNX Runtime's error.
  const stray = ortError(t.throws(() => OrtSession.open(file, { ...opts, externalInitializers: [{ name: 'nope', type: FLOAT, dims: [1], data: new Float32Array(1) }] })));
  t.regex(stray.code, /^ORT_/);
  t.regex(t.throws(() => OrtSession.open(file, { ...opts, initializers: [{ name: 'w0', type: FLOAT, dims: [16, 32], data: new Float32Array(8) }] }))?.message ?? '', /w0/);
});

test('device memory: filled and read by explicit copies, bound and written by runs in place, freed only when nothing views it', async (t) => {
  // On the CPU device the copies are memcpys; the same calls take the CUDA device's memory next.
  const s = OrtSession.open(path.join(MODELS, 'double', 'model.onnx'), opts);
  t.teardown(() => s.release());
  const x = Float32Array.from({ length: 2 * 1024 }, (_, i) => i / 3 - 100);
  const memory = allocateDeviceMemory(64 + 2 * x.byteLength);
  t.is(memory.device, 'cpu');
  t.is(memory.bytes, 64 + 2 * x.byteLength);
  memory.copyFromHost(x, 64);
  const input = { name: 'x', type: FLOAT, dims: [2, 1024], data: { memory, offset: 64 } };
  const output = { memory, offset: 64 + x.byteLength };
  // Async and inline runs, input and output both in device memory: the output slice comes back as given.
  for (const run of [() => s.run([input], [{ name: 'y', type: FLOAT, dims: [2, 1024], data: output }]), async () => s.runSync([input], [{ name: 'y', type: FLOAT, dims: [2, 1024], data: output }])]) {
    const back = new Float32Array(2 * 1024);
    memory.copyFromHost(new Float32Array(2 * 1024), output.offset); // zeros, so the answer is the run's
    const [y] = await run();
    t.is(y.data, output);
    memory.copyToHost(back, output.offset);
    t.true(back.every((v, i) => v === 2 * x[i]));
  }
  // Bound once (a weight's route): later runs read what the device memory holds now.
  s.bindInput(input);
  memory.copyFromHost(new Float32Array(2 * 1024).fill(5), 64);
  const [y] = await s.run([], ['y']);
  t.true(new Float32Array(hostOutput(y).data.buffer, hostOutput(y).data.byteOffset, 2 * 1024).every((v) => v === 10));
  // Not freed while a session views it; freed once unbound, and then refused everywhere.
  t.throws(() => memory.release(), { code: 'ERR_ORT_ARGUMENT', message: /still viewed by 1 tensor/ });
  s.unbindInputs();
  memory.release();
  t.is(memory.device, null);
  t.throws(() => memory.copyToHost(new Uint8Array(4)), { code: 'ERR_ORT_ARGUMENT', message: /released/ });
  t.throws(() => s.runSync([input], ['y']), { code: 'ERR_ORT_ARGUMENT', message: /released/ });
  // What does not fit, or is misaligned, or has no device: said, with the numbers.
  const small = allocateDeviceMemory(4096);
  t.teardown(() => small.release());
  t.throws(() => small.copyFromHost(new Uint8Array(100), 4000), { code: 'ERR_ORT_ARGUMENT', message: /100 bytes at offset 4000 do not fit in the device memory's 4096/ });
  t.throws(() => s.runSync([{ name: 'x', type: FLOAT, dims: [1, 1024], data: { memory: small, offset: 4 } }], ['y']), { code: 'ERR_ORT_ARGUMENT', message: /the device memory has 4092 bytes from offset 4/ });
  t.throws(() => s.runSync([{ name: 'x', type: FLOAT, dims: [1, 2], data: { memory: small, offset: 2 } }], ['y']), { code: 'ERR_ORT_ARGUMENT', message: /offset 2 is not aligned/ });
  t.throws(() => allocateDeviceMemory(16, 'cuda:0'), { code: 'ERR_ORT_ARGUMENT', message: /cuda:0: no allocator for it in this process/ });
  t.throws(() => allocateDeviceMemory(-1), { code: 'ERR_ORT_ARGUMENT', message: /bytes must be a whole number/ });
});

test('BYTES travel in KServe\'s length-prefixed layout both ways', async (t) => {
  const s = OrtSession.open(path.join(MODELS, 'dtypes', 'model.onnx'), opts);
  t.teardown(() => s.release());
  const strings = ['', 'a', 'nul\0inside', 'ünï', 'x'.repeat(300), '7'];
  const inputs = s.inputs.map((i) => {
    const type = /** @type {number} */ (i.type);
    if (i.name === 'in_bytes') return { name: i.name, type, dims: [2, 3], data: joinBytesElements(strings.map((v) => new TextEncoder().encode(v))) };
    return { name: i.name, type, dims: [2, 3], data: new Uint8Array(6 * (byOnnxType(type)?.elementBytes ?? 1)) };
  });
  const out = await s.run(inputs, ['out_bytes']);
  t.deepEqual(out[0].dims, [2, 3]);
  const elements = (splitBytesElements(new Uint8Array(hostOutput(out[0]).data.buffer, hostOutput(out[0]).data.byteOffset, hostOutput(out[0]).data.byteLength)) ?? []).map((e) => new TextDecoder().decode(e));
  t.deepEqual(elements, strings);
});

test('a run goes on a libuv thread, is terminated on request, and a session released mid-run is freed after it', async (t) => {
  // Heavy enough to last a while on any machine: 8 layers of 1024x1024 over 512 rows.
  const layers = mlpLayers(5, [1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024]);
  const s = OrtSession.open(mlpModel(layers), opts);
  const x = new Float32Array(512 * 1024).fill(0.01);
  let ticks = 0;
  const timer = setInterval(() => { ticks++; }, 1);
  const started = performance.now();
  const [done] = await s.run([{ name: 'x', type: FLOAT, dims: [512, 1024], data: x }], ['y']);
  const tookMs = performance.now() - started;
  clearInterval(timer);
  t.deepEqual(done.dims, [512, 1024]);
  t.true(ticks > 0, `this thread ran its timers during a ${tookMs.toFixed(0)} ms run`);
  // Terminated: it rejects, sooner than a whole run.
  const running = s.run([{ name: 'x', type: FLOAT, dims: [512, 1024], data: x }], ['y']);
  t.true(s.terminate());
  const err = ortError(await t.throwsAsync(running));
  t.regex(err.code, /^ORT_/);
  t.regex(err.message, /terminat/i);
  t.false(s.terminate(), 'nothing left to terminate');
  // Released while running: the run still answers; the session is gone after it.
  const last = s.run([{ name: 'x', type: FLOAT, dims: [512, 1024], data: x }], ['y']);
  s.release();
  t.deepEqual((await last)[0].dims, [512, 1024]);
  const gone = ortError(await t.throwsAsync(s.run([{ name: 'x', type: FLOAT, dims: [512, 1024], data: x }], ['y'])));
  t.regex(gone.message, /released/);
});

test('run options: a CUDA graph id travels to ONNX Runtime (ignored on the CPU), and a bad one is refused', async (t) => {
  const s = OrtSession.open(path.join(MODELS, 'double', 'model.onnx'), opts);
  t.teardown(() => s.release());
  const x = [{ name: 'x', type: FLOAT, dims: [1, 1024], data: new Float32Array(1024).fill(3) }];
  for (const options of [undefined, { graphId: -1 }, { graphId: 5 }, {}]) {
    const y = new Float32Array(1024);
    s.runSync(x, [{ name: 'y', type: FLOAT, dims: [1, 1024], data: y }], options);
    t.true(y.every((v) => v === 6), JSON.stringify(options));
    const z = new Float32Array(1024);
    await s.run(x, [{ name: 'y', type: FLOAT, dims: [1, 1024], data: z }], options);
    t.true(z.every((v) => v === 6));
  }
  for (const bad of [{ graphId: 1.5 }, { graphId: -2 }, { graphId: '3' }, 'graph']) {
    t.regex(ortError(t.throws(() => s.runSync(x, ['y'], /** @type {any} */ (bad)))).message, /run options|options must be an object/, JSON.stringify(bad));
  }
});

test('a second run on a session in flight is refused; bad models are ONNX Runtime errors with its code', async (t) => {
  const s = OrtSession.open(path.join(MODELS, 'double', 'model.onnx'), opts);
  t.teardown(() => s.release());
  const x = new Float32Array(1024);
  const first = s.run([{ name: 'x', type: FLOAT, dims: [1, 1024], data: x }], ['y']);
  const second = ortError(await t.throwsAsync(s.run([{ name: 'x', type: FLOAT, dims: [1, 1024], data: x }], ['y'])));
  t.regex(second.message, /one at a time/);
  await first;
  const bad = ortError(t.throws(() => OrtSession.open(new Uint8Array([1, 2, 3, 4]), opts)));
  t.regex(bad.code, /^ORT_/);
  const missing = ortError(t.throws(() => OrtSession.open('/nowhere/model.onnx', opts)));
  t.regex(missing.code, /^ORT_/);
});

test('fuzz: 3000 calls with bad shapes, types, sizes, names, buffers and sessions end with the process alive, each refused with a code', async (t) => {
  const r = random(2026);
  const int = (/** @type {number} */ n) => Math.floor(r() * n);
  /** @template T @param {T[]} list @returns {T} */
  const pick = (list) => list[int(list.length)];
  const sessions = [OrtSession.open(path.join(MODELS, 'double', 'model.onnx'), opts), OrtSession.open(path.join(MODELS, 'dtypes', 'model.onnx'), opts)];
  // Device memory: one always alive, one released at some point in the run (then every use is refused).
  const memories = [allocateDeviceMemory(8192), allocateDeviceMemory(4096)];
  const detached = () => {
    const view = new Float32Array(1024);
    const channel = new MessageChannel();
    channel.port1.postMessage(view.buffer, [view.buffer]);
    channel.port1.close();
    return view;
  };
  const data = () => pick([
    () => new Float32Array(int(3) * 1024),
    () => new Uint8Array(int(9000)),
    () => new Uint8Array(new ArrayBuffer(4097), 1, 4096), // misaligned for FP32
    () => detached(),
    () => new ArrayBuffer(8),
    () => 'not bytes',
    () => null,
    () => joinBytesElements([new Uint8Array(5)]),
    () => Uint8Array.from([255, 255, 255, 255, 1]), // a BYTES length that lies
    () => ({ memory: pick(memories), offset: pick([0, 4, 3, 4096, 8192, -4, 1.5, 2 ** 60, undefined, 'x']) }),
    () => ({ memory: pick([{}, null, new Float32Array(4)]), offset: 0 }),
  ])();
  const dims = () => pick([[1, 1024], [2, 1024], [], [0, 1024], [-1, 1024], [1.5, 3], [2 ** 60, 2 ** 60], Array(70).fill(1), ['a'], [2, 3]]);
  const tensor = () => ({ name: pick(['x', 'y', 'in_f32', 'in_bytes', '', 'ghost']), type: pick([1, 7, 8, 16, 0, 99, -1, 2, '1']), dims: dims(), data: data() });
  const codes = new Map();
  let resolved = 0;
  for (let i = 0; i < 3000; i++) {
    const s = pick(sessions);
    try {
      switch (int(8)) {
        case 6: // a good call between bad ones: what a refusal leaves behind must not break it
        case 7: {
          const y = new Float32Array(1024);
          await sessions[0].run([{ name: 'x', type: FLOAT, dims: [1, 1024], data: new Float32Array(1024).fill(i) }], [{ name: 'y', type: FLOAT, dims: [1, 1024], data: y }]);
          if (!y.every((v) => v === 2 * i)) t.fail(`call ${i}: a good run answered wrong after refusals`);
          resolved++;
          break;
        }
        case 0: s.bindInput(/** @type {any} */ (tensor())); s.unbindInputs(); break;
        case 2:
          if (r() < 0.5) {
            const m = pick(memories);
            const view = /** @type {any} */ (data());
            const offset = /** @type {any} */ (pick([0, 8, 4095, 8192, -1, 0.5, 'x', undefined]));
            if (r() < 0.5) m.copyFromHost(view, offset); else m.copyToHost(view, offset);
          } else if (i > 1500) {
            memories[1].release();
          } else {
            allocateDeviceMemory(/** @type {any} */ (pick([-1, 1.5, 'x', 2 ** 70, 16])), /** @type {any} */ (pick(['cpu', 'cuda:0', 'tpu', 7]))).release();
          }
          break;
        case 1: OrtSession.open(/** @type {any} */ (pick([new Uint8Array(int(64)), '', 42, '/dev/null'])), /** @type {any} */ (pick([opts, { intraOpThreads: -1 }, { graphOptimizationLevel: 'max' }, { initializers: [tensor()] }, { externalInitializers: [tensor()] }, { initializers: 7 }, null]))).release(); break;
        default: {
          const inputs = Array.from({ length: int(3) }, tensor);
          const outputs = Array.from({ length: int(3) }, () => (r() < 0.5 ? pick(['y', 'out_bytes', 'ghost', '']) : tensor()));
          const runOptions = pick([undefined, undefined, { graphId: pick([-1, 1, 0.5, 'x', 2 ** 40, -2, undefined]) }, 7, null]);
          await s.run(/** @type {any} */ (inputs), /** @type {any} */ (outputs), /** @type {any} */ (runOptions));
          resolved++;
        }
      }
    } catch (err) {
      const code = ortError(err).code ?? 'none';
      codes.set(code, (codes.get(code) ?? 0) + 1);
    }
  }
  t.log(`3000 calls: ${resolved} ran, refused ${JSON.stringify(Object.fromEntries(codes))}`);
  t.false(codes.has('none'), 'every refusal carries a code');
  t.true([...codes.keys()].every((c) => /^(ORT_[A-Z_]+|ERR_ORT_ARGUMENT|ERR_ORT_BINDING|ERR_OUT_OF_MEMORY)$/.test(c)), [...codes.keys()].join());
  // Closed mid-run, then used: refused, never a crash.
  const s = sessions[0];
  const pending = s.run([{ name: 'x', type: FLOAT, dims: [1, 1024], data: new Float32Array(1024) }], ['y']);
  for (const session of sessions) session.release();
  await pending;
  await t.throwsAsync(s.run([{ name: 'x', type: FLOAT, dims: [1, 1024], data: new Float32Array(1024) }], ['y']), { message: /released/ });
  // And the binding still works.
  const fresh = OrtSession.open(path.join(MODELS, 'double', 'model.onnx'), opts);
  const y = new Float32Array(1024);
  await fresh.run([{ name: 'x', type: FLOAT, dims: [1, 1024], data: new Float32Array(1024).fill(1) }], [{ name: 'y', type: FLOAT, dims: [1, 1024], data: y }]);
  fresh.release();
  t.true(y.every((v) => v === 2));
});

test('profilePrefix: ONNX Runtime\'s per-node timings of every run, written when the session is released', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const { readdirSync, readFileSync } = await import('node:fs');
  const s = OrtSession.open(mlpModel(mlpLayers(2, [8, 16, 4])), { ...opts, profilePrefix: path.join(temp.dir, 'mlp') });
  await s.run([{ name: 'x', type: FLOAT, dims: [2, 8], data: new Float32Array(16) }], ['y']);
  s.release();
  const files = readdirSync(temp.dir);
  t.is(files.length, 1);
  t.regex(files[0], /^mlp_.*\.json$/);
  const events = JSON.parse(readFileSync(path.join(temp.dir, files[0]), 'utf8'));
  t.true(events.some((/** @type {{ cat: string, name: string }} */ e) => e.cat === 'Node' && /MatMul/.test(e.name)), 'a MatMul node\'s timing');
});

test('compaction\'s move on a GPU, planned through a scratch buffer: equal to memmove, in a handful of copies however short the distance', (t) => {
  const MiB = 2 ** 20;
  const source = new Uint8Array(256 * MiB);
  for (let i = 0; i < source.length; i += 4096) source[i] = (i / 4096) % 251;
  crypto.getRandomValues(source.subarray(0, 65536));
  const cases = [
    { what: '256 MiB down by 64 bytes', to: 0, from: 64, length: 256 * MiB - 64, scratch: 64 * MiB },
    { what: '256 MiB up by 64 bytes', to: 64, from: 0, length: 256 * MiB - 64, scratch: 64 * MiB },
    { what: 'a distance past the scratch: pieces of the distance', to: 0, from: 96 * MiB, length: 160 * MiB, scratch: 64 * MiB },
    { what: 'no overlap: one copy', to: 0, from: 128 * MiB, length: 100 * MiB, scratch: 64 * MiB },
    { what: 'a scratch larger than the move', to: 10, from: 3, length: 1000, scratch: 64 * MiB },
  ];
  for (const c of cases) {
    const mine = source.slice();
    const started = performance.now();
    const copies = ortAddon().movePlanHost(mine, c.to, c.from, c.length, c.scratch);
    const ms = performance.now() - started;
    const expected = source.slice();
    expected.copyWithin(c.to, c.from, c.from + c.length); // memmove
    t.true(Buffer.compare(mine, expected) === 0, `${c.what}: bytes as memmove leaves them`);
    const distance = Math.abs(c.to - c.from);
    const bound = distance >= c.length ? 1 : distance >= c.scratch ? Math.ceil(c.length / distance) : 2 * Math.ceil(c.length / c.scratch);
    t.true(copies <= bound, `${c.what}: ${copies} copies (at most ${bound})`);
    t.log(`${c.what}: ${copies} copies, ${ms.toFixed(0)} ms on the CPU`);
  }
  t.is(ortAddon().movePlanHost(source.slice(0, 16), 4, 4, 8, 2), 0, 'nowhere to move');
  t.throws(() => ortAddon().movePlanHost(source.subarray(0, 16), 0, 8, 16, 4), { code: 'ERR_ORT_ARGUMENT' });
});

test('compaction\'s scratch buffer: asked from the whole move (at most 64 MiB) down by halves to a MiB; a refusal of a large one does not end the search', (t) => {
  const MiB = 2 ** 20;
  const { got, asked } = ortAddon().scratchChoiceHost(48 * MiB, 64 * MiB, MiB, 8 * MiB);
  t.is(got, 6 * MiB, 'the first size the device gives');
  t.deepEqual(asked.map((b) => b / MiB), [48, 24, 12, 6]);
  t.deepEqual(ortAddon().scratchChoiceHost(256 * MiB, 64 * MiB, MiB, 256 * MiB), { got: 64 * MiB, asked: [64 * MiB] }, 'at most 64 MiB');
  const none = ortAddon().scratchChoiceHost(3 * MiB, 64 * MiB, MiB, 0);
  t.deepEqual(none, { got: 0, asked: [3 * MiB, 1.5 * MiB, MiB] }, 'down to a MiB, then none');
  t.deepEqual(ortAddon().scratchChoiceHost(4096, 64 * MiB, MiB, 0), { got: 0, asked: [4096] }, 'a move under a MiB asks its own length only');
  t.deepEqual(ortAddon().scratchChoiceHost(0, 64 * MiB, MiB, 1e9), { got: 0, asked: [] });
});
