// The server's CUDA graph path (cuda-graphs.ts) with everything but the capture itself: fixed
// buffers per batch size, inputs copied in and outputs copied out into the execution's buffers, a
// new graph id when the weights move, graphs given up when they keep moving. Driven here over a
// CPU session and CPU device memory (ONNX Runtime ignores the graph id there); test/gpu runs the
// same path on a GPU, capture and replay included.
import path from 'node:path';
import test from 'ava';
import { CudaGraphs, graphRefusal, graphStatus, MAX_RECAPTURES } from '../../../../dist/actors/device/cuda-graphs.js';
import { allocateDeviceMemory, OrtSession } from '../../../../dist/native/ort.js';
import { FIXTURES } from '../../../helpers/server.js';
import { tensorSpec } from '../../../helpers/specs.js';

const FLOAT = 1;
const x = tensorSpec('x', 'FP32', 'nk', [-1, 1024], 0);
const y = tensorSpec('y', 'FP32', 'nk', [-1, 1024], 0);

/** The double fixture (y = 2x on f32[n, 1024]) with graphs for batch 1 and 4. */
function doubled(/** @type {import('ava').ExecutionContext} */ t) {
  const session = OrtSession.open(path.join(FIXTURES, 'models', 'double', 'model.onnx'), { intraOpThreads: 1, allowSpinning: false, logSeverityLevel: 3 });
  const graphs = new CudaGraphs(() => session, [x], [y], 'cpu', [1, 4]);
  t.teardown(() => { graphs.release(); session.release(); });
  return graphs;
}

const input = (/** @type {number} */ rows, /** @type {number} */ v) => [{ name: 'x', type: FLOAT, dims: [rows, 1024], data: new Float32Array(rows * 1024).fill(v) }];
const output = (/** @type {number} */ rows) => [{ name: 'y', type: FLOAT, dims: [rows, 1024], data: new Float32Array(rows * 1024) }];

test('a batch size with a graph runs through its fixed buffers: inputs copied in, outputs into the buffers given', (t) => {
  const graphs = doubled(t);
  t.true(graphs.usable(1) && graphs.usable(4));
  t.false(graphs.usable(2), 'not a compiled size: runs plainly');
  for (const v of [1, 5, -3]) {
    const out = output(4);
    const ran = graphs.run(input(4, v), out, 4, 0);
    t.truthy(ran);
    t.is(ran?.[0].data, out[0].data, 'written into the buffer the execution gave');
    t.deepEqual(ran?.[0].dims, [4, 1024]);
    t.true(/** @type {Float32Array} */ (out[0].data).every((e) => e === 2 * v), `each run reads its own input (${v})`);
  }
  t.is(graphs.status, 'on for batch 1, 4 (3 runs through 1 graph)');
  t.is(graphs.run(input(2, 1), output(2), 4, 0), null, 'an input of another shape is not this slot\'s: run plainly');
});

test('tensors in device memory (CUDA shared memory) go through the graph too, copied device to device; a slice of another shape or past its memory runs plainly', (t) => {
  const graphs = doubled(t);
  const memory = allocateDeviceMemory(3 * 4096, 'cpu'); // x at 0, y at 4096; 8192.. for the checks
  t.teardown(() => memory.release());
  for (const v of [3, -7]) {
    memory.copyFromHost(new Float32Array(1024).fill(v), 0);
    const inDevice = [{ name: 'x', type: FLOAT, dims: [1, 1024], data: { memory, offset: 0 } }];
    const outDevice = [{ name: 'y', type: FLOAT, dims: [1, 1024], data: { memory, offset: 4096 } }];
    const ran = graphs.run(inDevice, outDevice, 1, 0);
    t.truthy(ran, 'through the graph');
    t.is(ran?.[0].data, outDevice[0].data, 'answered as the region slice it was written into');
    const back = new Float32Array(1024);
    memory.copyToHost(back, 4096);
    t.true(back.every((e) => e === 2 * v), `the output written into device memory (${v})`);
    const mixed = output(1);
    t.truthy(graphs.run(inDevice, mixed, 1, 0), 'an input in device memory, an output to the host');
    t.true(/** @type {Float32Array} */ (mixed[0].data).every((e) => e === 2 * v));
  }
  const wrongShape = [{ name: 'x', type: FLOAT, dims: [2, 512], data: { memory, offset: 0 } }];
  t.is(graphs.run(wrongShape, output(1), 1, 0), null, 'another shape of the same bytes: not this slot\'s');
  const pastEnd = [{ name: 'y', type: FLOAT, dims: [1, 1024], data: { memory, offset: 3 * 4096 - 8 } }];
  t.is(graphs.run(input(1, 1), pastEnd, 1, 0), null, 'an output slice running past its memory');
  t.is(graphs.status, 'on for batch 1, 4 (4 runs through 1 graph)', 'the refused runs never reached the graph');
});

test('weights that move get a graph of their own; weights that keep moving turn graphs off, saying so', (t) => {
  const graphs = doubled(t);
  let epoch = 0;
  t.truthy(graphs.run(input(1, 1), output(1), 1, epoch));
  for (let move = 1; move <= MAX_RECAPTURES; move++) t.truthy(graphs.run(input(1, 1), output(1), 1, ++epoch), `move ${move}: a new graph`);
  t.true(graphs.usable(1));
  t.is(graphs.run(input(1, 1), output(1), 1, ++epoch), null, 'one move too many');
  t.false(graphs.usable(1));
  t.false(graphs.usable(4), 'off for the executable');
  t.regex(graphs.status, /^off: its weights moved 3 times \(evicted and loaded again, or compacted\)/);
});

test('what cannot run in a graph is said: BYTES tensors, outputs of unknown size; a session refused at creation', (t) => {
  const s = tensorSpec('s', 'BYTES', 'n', [-1], 0);
  t.regex(graphRefusal([s], [y], new Set(['y'])) ?? '', /s is BYTES/);
  t.regex(graphRefusal([x], [y], new Set()) ?? '', /output y has an axis the graph leaves free/);
  t.is(graphRefusal([x], [y], new Set(['y'])), null);
  const session = OrtSession.open(path.join(FIXTURES, 'models', 'double', 'model.onnx'), { intraOpThreads: 1, logSeverityLevel: 3 });
  const off = new CudaGraphs(() => session, [x], [y], 'cpu', [1], 'ONNX Runtime cannot capture it: a node runs on the CPU');
  t.teardown(() => { off.release(); session.release(); });
  t.false(off.usable(1));
  t.is(off.run(input(1, 1), output(1), 1, 0), null);
  t.is(off.status, 'off: ONNX Runtime cannot capture it: a node runs on the CPU');
});

test('a model\'s graphs said as one line over its executables (a session per batch size has one each): sizes joined, runs and graphs summed, each reason for off once', (t) => {
  const on = (/** @type {number} */ size, /** @type {number} */ runs) => ({ off: null, sizes: [size], runs, graphs: 1 });
  t.is(graphStatus([on(8, 6), on(1, 6), on(32, 6)]), 'on for batch 1, 8, 32 (18 runs through 3 graphs)');
  t.is(graphStatus([on(1, 4), { off: 'its weights moved 3 times', sizes: [8], runs: 5, graphs: 3 }, { off: 'its weights moved 3 times', sizes: [32], runs: 5, graphs: 3 }]),
    'on for batch 1 (4 runs through 1 graph); off: its weights moved 3 times');
  t.is(graphStatus([{ off: 'ONNX Runtime cannot capture it: a node on the CPU', sizes: [1, 8], runs: 0, graphs: 0 }]), 'off: ONNX Runtime cannot capture it: a node on the CPU');
});
