/**
 * Warm-up before ready: each executable of a model runs once at its batch size, on the bundle's
 * warm-up data where its manifest names some (warmup.data: one row per input, repeated) and on
 * zeros otherwise, before
 * the model reports READY, so that no client pays ONNX Runtime's first run at a batch size (on CUDA
 * 90-470 ms: kernel and cuDNN algorithm selection, memory planning; docs/gpu.md). On by
 * default on backend cuda, off on cpu, where a first run costs little (runtime.warmup, and per model
 * scheduler.models.<name>.warmup).
 */
import type { ModelSpec } from '../../shared/model-spec.js';
import type { WarmupOutcome } from '../../shared/channels/device.js';
import { dtypeInfo, tensorBytes } from '../../shared/dtypes.js';
import type { OrtTensor } from '../../native/ort.js';
import { plainRun, type Executable } from './sessions.js';

/**
 * `row` (one batch row of a tensor of `dims`, batch axis `batchDim`) repeated to `rows` rows: for
 * each index of the axes before the batch axis, its block of the row `rows` times over.
 */
export function repeatRow(row: Uint8Array, dims: readonly number[], batchDim: number, rows: number): Uint8Array {
  if (batchDim < 0) return row;
  const outer = dims.slice(0, batchDim).reduce((a, b) => a * b, 1);
  const block = row.length / outer;
  const out = new Uint8Array(row.length * rows);
  for (let o = 0; o < outer; o++) {
    const from = row.subarray(o * block, (o + 1) * block);
    for (let r = 0; r < rows; r++) out.set(from, (o * rows + r) * block); // copy: the warm-up row repeated to the batch
  }
  return out;
}

/**
 * Inputs for one run at batch `rows`: the bundle's data where it has some, zeros elsewhere; or why there can be none.
 */
function warmupInputs(spec: ModelSpec, rows: number): OrtTensor[] | string {
  const inputs: OrtTensor[] = [];
  for (const t of spec.inputs) {
    const dims = t.shape.map((d, i) => (i === t.batchDim ? rows : d));
    if (dims.some((d) => d < 0)) return `input ${t.name} has a free axis (${t.axes}): zeros have no shape`;
    const info = dtypeInfo(t.datatype);
    const sample = spec.warmupData[t.name];
    if (sample) {
      inputs.push({ name: t.name, type: info.onnxType, dims, data: repeatRow(sample, dims, t.batchDim, rows) });
      continue;
    }
    const elements = dims.reduce((a, b) => a * b, 1);
    // BYTES travel length-prefixed (4 bytes each): zeros are that many empty strings.
    const bytes = elements * (t.datatype === 'BYTES' ? 4 : info.elementBytes);
    inputs.push({ name: t.name, type: info.onnxType, dims, data: new Uint8Array(bytes) });
  }
  return inputs;
}

/** Runs through a CUDA graph at warm-up: ONNX Runtime's plain run, its capture, and a replay. */
const GRAPH_WARMUP_RUNS = 3;

/**
 * Plain runs per batch size at warm-up on CUDA. One was not enough: after it, the first client call
 * at each size still ran 96-156 ms against 2-6 ms warm (ResNet-50, H200, bench/gpu-first-call.js:
 * whatever the cuDNN search or thread settings), and the second was warm. Graph warm-ups, which
 * run three times, left no such first call. Two runs have not been measured on a GPU yet:
 * test/gpu's warm-up test checks that the first client call's run is a warm one.
 */
const CUDA_PLAIN_WARMUP_RUNS = 2;

/**
 * Host buffers for the outputs of one run at `batch` rows, as executions bind them; an output of
 * unknown size (BYTES, a free axis) by name, for ONNX Runtime to allocate.
 */
function hostTargets(spec: ModelSpec, batch: number): (string | OrtTensor)[] {
  return spec.outputs.map((t) => {
    const dims = t.shape.map((d, i) => (i === t.batchDim ? batch : d));
    const bytes = tensorBytes(t.datatype, dims);
    return bytes === null ? t.name : { name: t.name, type: dtypeInfo(t.datatype).onnxType, dims, data: new Uint8Array(bytes) };
  });
}

/**
 * Run every executable at each of its batch sizes (through its CUDA graph, capturing it, where it
 * has one). `bind` opens an executable's session (if the budget closed it) and binds its weights
 * first (the model is resident); `epoch` is their
 * residency epoch; `cuda`: backend cuda, where runs go on this thread (runSync) and each plain size
 * runs twice, the second time into host buffers as executions do; else once, on a libuv thread.
 * A failed run is an error for the caller (a model that cannot run on zeros says why).
 */
export async function warmUp(spec: ModelSpec, executables: ReadonlyMap<number, Executable>, bind: (e: Executable) => void | Promise<void>, cuda: boolean, epoch: (e: Executable) => number = () => 0): Promise<WarmupOutcome> {
  const started = performance.now();
  let runs = 0;
  let skipped: string | null = null;
  for (const [batchSize, executable] of executables) {
    // A dynamic batch axis (batchSize 0): each compiled batch size is a first run of its own.
    const sizes = batchSize > 0 ? [batchSize] : spec.compiledBatchSizes.length > 0 ? spec.compiledBatchSizes : [1];
    for (const rows of sizes) {
      const inputs = warmupInputs(spec, spec.batchAxis === null ? 1 : rows);
      if (typeof inputs === 'string') {
        skipped = inputs;
        continue;
      }
      await bind(executable);
      const batch = spec.batchAxis === null ? 0 : rows;
      const graphs = executable.graphs;
      if (graphs?.usable(batch)) {
        // CUDA graphs: ONNX Runtime runs plainly, then captures, then replays: all before READY.
        // A graph that fails here is turned off, and the executable warms up plainly below.
        // Graphs refuse outputs of unknown size (graphRefusal): every target is a buffer.
        const targets = hostTargets(spec, batch) as OrtTensor[];
        let ran = true;
        try {
          for (let i = 0; i < GRAPH_WARMUP_RUNS && ran; i++) ran = graphs.run(inputs, targets, batch, epoch(executable)) !== null;
        } catch (err) {
          graphs.turnOff(`its graph failed at warm-up: ${(err as Error).message}`);
        }
        if (ran && graphs.usable(batch)) {
          runs++;
          continue;
        }
      }
      const outputs = executable.pooled.outputs.map((o) => o.name);
      const runner = executable.runs;
      // On CUDA on this thread, where every run of the device goes (worker.ts): a run on another
      // thread would leave that thread's cuBLAS and cuDNN state on the GPU for good.
      if (cuda) {
        runner.runSync(inputs, outputs, plainRun(executable));
        for (let i = 1; i < CUDA_PLAIN_WARMUP_RUNS; i++) runner.runSync(inputs, hostTargets(spec, batch), plainRun(executable));
      } else {
        await runner.run(inputs, outputs, plainRun(executable));
      }
      runs++;
    }
  }
  return { runs, ms: performance.now() - started, skipped, fromBundle: spec.inputs.filter((t) => spec.warmupData[t.name]).map((t) => t.name) };
}
