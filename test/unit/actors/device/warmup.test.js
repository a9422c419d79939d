// Warm-up: its data (one batch row of a tensor repeated to a batch, whichever axis is the batch
// axis), and the runs it makes at each batch size, on a real ONNX Runtime session.
import path from 'node:path';
import test from 'ava';
import { repeatRow, warmUp } from '../../../../dist/actors/device/warmup.js';
import { OrtSession } from '../../../../dist/native/ort.js';
import { FIXTURES } from '../../../helpers/server.js';
import { modelSpec, tensorSpec } from '../../../helpers/specs.js';

const x = tensorSpec('x', 'FP32', 'nk', [-1, 1024], 0);
const y = tensorSpec('y', 'FP32', 'nk', [-1, 1024], 0);

test('a row repeats along a leading batch axis as whole copies', (t) => {
  const row = Uint8Array.of(1, 2, 3);
  t.deepEqual(Array.from(repeatRow(row, [3, 3], 0, 3)), [1, 2, 3, 1, 2, 3, 1, 2, 3]);
  t.is(repeatRow(row, [3], -1, 1), row, 'an unbatched tensor is its row');
});

test('a row repeats along an inner batch axis block by block', (t) => {
  // dims [2, rows, 2] of one-byte elements, batch axis 1: the row is [[a, b], [c, d]].
  const row = Uint8Array.of(10, 11, 20, 21);
  t.deepEqual(Array.from(repeatRow(row, [2, 3, 2], 1, 3)), [10, 11, 10, 11, 10, 11, 20, 21, 20, 21, 20, 21]);
  // The batch axis last: each element repeated in place.
  t.deepEqual(Array.from(repeatRow(Uint8Array.of(1, 2), [2, 2], 1, 2)), [1, 1, 2, 2]);
});

/** The double fixture (y = 2x on f32[n, 1024]) as a dynamic-batch executable whose runs are recorded. */
function recorded(/** @type {import('ava').ExecutionContext} */ t) {
  const session = OrtSession.open(path.join(FIXTURES, 'models', 'double', 'model.onnx'), { intraOpThreads: 1, allowSpinning: false, logSeverityLevel: 3 });
  t.teardown(() => session.release());
  /** @type {{ sync: boolean, rows: number, outputs: ('name' | 'buffer')[], y: Float32Array | null }[]} */
  const runs = [];
  /** @param {boolean} sync */
  const record = (sync, /** @type {any[]} */ inputs, /** @type {any[]} */ outputs, /** @type {any[]} */ got) => {
    const y = got.find((o) => o.name === 'y');
    runs.push({ sync, rows: inputs[0].dims[0], outputs: outputs.map((o) => (typeof o === 'string' ? 'name' : 'buffer')), y: y ? new Float32Array(y.data.buffer, y.data.byteOffset, y.data.byteLength / 4) : null });
    return got;
  };
  const spy = /** @type {import('../../../../dist/native/ort.js').OrtBinding} */ (/** @type {unknown} */ ({
    runSync: (/** @type {any[]} */ i, /** @type {any[]} */ o, /** @type {any} */ r) => record(true, i, o, session.runSync(i, o, r)),
    run: async (/** @type {any[]} */ i, /** @type {any[]} */ o, /** @type {any} */ r) => record(false, i, o, await session.run(i, o, r)),
  }));
  const spec = modelSpec({ inputs: [x], outputs: [y], batchAxis: 'n', compiledBatchSizes: [1, 4] });
  const executables = new Map([[0, /** @type {import('../../../../dist/actors/device/sessions.js').Executable} */ (/** @type {unknown} */ ({ runs: spy, pooled: { outputs: session.outputs }, weights: [], cacheHit: false, shapedOutputs: new Set(['y']), graphs: null }))]]);
  return { spec, executables, runs };
}

test('on CUDA each batch size runs twice on this thread, the second time into host buffers as executions do; on the CPU once, off it', async (t) => {
  const cuda = recorded(t);
  const outcome = await warmUp(cuda.spec, cuda.executables, () => {}, true);
  t.is(outcome.runs, 2, 'two batch sizes warmed');
  t.deepEqual(cuda.runs.map((r) => [r.sync, r.rows, r.outputs.join()]), [[true, 1, 'name'], [true, 1, 'buffer'], [true, 4, 'name'], [true, 4, 'buffer']]);
  t.true(cuda.runs.every((r) => r.y !== null && r.y.length === r.rows * 1024 && r.y.every((v) => v === 0)), 'each ran on zeros, and wrote every output row');
  const cpu = recorded(t);
  t.is((await warmUp(cpu.spec, cpu.executables, () => {}, false)).runs, 2);
  t.deepEqual(cpu.runs.map((r) => [r.sync, r.rows, r.outputs.join()]), [[false, 1, 'name'], [false, 4, 'name']]);
});
