/**
 * CUDA graphs in the server (runtime.cuda.graphs): a warm run replays one captured graph of the
 * whole model instead of launching its kernels one by one (ResNet-50 at batch 1 went from 1.35 to
 * 0.92 ms on an H100, docs/gpu.md).
 *
 * A captured graph reads and writes fixed addresses, so for each batch size the executable runs at
 * with a graph (its compiled sizes) it gets one block of GPU memory holding its inputs and outputs:
 * a run copies the batch's inputs in, runs the graph (ONNX Runtime's gpu_graph_id: it runs plainly,
 * captures, then replays), and copies the outputs out into the buffers the execution gave: host
 * memory, or a CUDA shared-memory region (GPU to GPU).
 *
 * The weights are bound from the weight arena, where they move when the model is evicted and
 * comes back, or when the arena is compacted (the residency epoch changes). A graph captured over
 * the old addresses would read whatever is there now, so a new epoch gets a new graph id, and
 * ONNX Runtime keeps the old graph until the session goes. A model whose weights keep moving stops
 * using graphs after MAX_RECAPTURES (said in its status) rather than piling up graphs: graphs pay
 * off for the models that stay on the GPU, which are the busy ones.
 *
 * Only where the executable allows it: ONNX Runtime refuses enable_cuda_graph at session creation
 * when some node runs on the CPU, and every input and output needs a shape known before the run
 * (no free axis, no BYTES). Otherwise the model runs as before, and its status says why.
 */
import { allocateDeviceMemory, isDeviceSlice, type DeviceMemory, type DeviceName, type OrtOutput, type OrtRunOptions, type OrtTensor } from '../../native/ort.js';
import { dtypeInfo, tensorBytes } from '../../shared/dtypes.js';
import type { TensorSpec } from '../../shared/model-spec.js';

/** New graphs for new weight addresses, per batch size, before graphs are given up for the executable. */
export const MAX_RECAPTURES = 2;
/** Each tensor in a graph's block starts at this alignment (cudaMalloc's own is 256). */
const ALIGNMENT = 256;

interface Slot {
  memory: DeviceMemory;
  /** Byte offset of each input, then each output, in the spec's order. */
  inputs: { name: string; type: number; dims: number[]; offset: number; bytes: number }[];
  outputs: { name: string; type: number; dims: number[]; offset: number; bytes: number }[];
  graphId: number;
  /** The weights' residency epoch the graph was captured over. */
  epoch: number;
  recaptures: number;
}

const align = (n: number) => Math.ceil(n / ALIGNMENT) * ALIGNMENT;

/** Why `inputs` and `outputs` cannot run in a graph, or null when they can. */
export function graphRefusal(inputs: readonly TensorSpec[], outputs: readonly TensorSpec[], shapedOutputs: ReadonlySet<string>): string | null {
  for (const t of [...inputs, ...outputs]) {
    if (t.datatype === 'BYTES') return `${t.name} is BYTES, which ONNX Runtime keeps on the CPU`;
    if (dtypeInfo(t.datatype).elementBytes === 0) return `${t.name} has no fixed element size`;
  }
  const free = outputs.find((t) => !shapedOutputs.has(t.name));
  return free ? `output ${free.name} has an axis the graph leaves free, so its size is not known before the run` : null;
}

/** One executable's graphs as its model's status says them. */
export interface GraphSummary {
  off: string | null;
  sizes: number[];
  runs: number;
  graphs: number;
}

/**
 * A model's graphs in one line: on for which batch sizes (over all its executables: a session per
 * batch size has one each), with its runs and graphs summed; then each distinct reason some are off.
 */
export function graphStatus(summaries: readonly GraphSummary[]): string {
  const on = summaries.filter((g) => g.off === null);
  const said: string[] = [];
  if (on.length > 0) {
    const sizes = [...new Set(on.flatMap((g) => g.sizes))].sort((a, b) => a - b);
    const runs = on.reduce((n, g) => n + g.runs, 0);
    const graphs = on.reduce((n, g) => n + g.graphs, 0);
    said.push(`on for batch ${sizes.join(', ') || 'none'} (${runs} runs through ${graphs} graph${graphs === 1 ? '' : 's'})`);
  }
  for (const why of new Set(summaries.flatMap((g) => (g.off === null ? [] : [g.off])))) said.push(`off: ${why}`);
  return said.join('; ');
}

/** What a graph runs through: the executable's binding on its session (its weights bound there). */
export interface GraphRunner {
  runSync(inputs: OrtTensor[], outputs: (string | OrtTensor)[], options?: OrtRunOptions): OrtOutput[];
}

export class CudaGraphs {
  /** The runner as it is now: a session reopened (sessions.ts) gives the executable a new binding. */
  readonly #runner: () => GraphRunner;
  readonly #inputs: readonly TensorSpec[];
  readonly #outputs: readonly TensorSpec[];
  readonly #device: DeviceName;
  /** Batch sizes that run in a graph (0: an unbatched model). */
  readonly #sizes: ReadonlySet<number>;
  readonly #slots = new Map<number, Slot>();
  #nextId = 1; // ONNX Runtime's 0 is its default graph; ids here are this session's own
  #off: string | null = null;
  #runs = 0;

  /** `off`: why this executable cannot use graphs at all (its runs go on without). */
  constructor(runner: () => GraphRunner, inputs: readonly TensorSpec[], outputs: readonly TensorSpec[], device: DeviceName, sizes: readonly number[], off: string | null = null) {
    this.#runner = runner;
    this.#inputs = inputs;
    this.#outputs = outputs;
    this.#device = device;
    this.#sizes = new Set(sizes);
    this.#off = off;
  }

  /** Whether a run of `batch` rows goes through a graph. */
  usable(batch: number): boolean {
    return this.#off === null && this.#sizes.has(batch);
  }

  /** For the model's status: on for which batch sizes, or off and why. */
  get status(): string {
    return graphStatus([this.summary]);
  }

  /** What its status says, for a model's executables' to be said as one (graphStatus). */
  get summary(): GraphSummary {
    return { off: this.#off, sizes: [...this.#sizes], runs: this.#runs, graphs: this.#nextId - 1 };
  }

  /** Stop using graphs for this executable, saying why (runs go on without). */
  turnOff(why: string): void {
    this.#off ??= why;
  }

  /**
   * Run `batch` rows through the graph for the weights' `epoch`: `inputs` (host tensors, or slices
   * of CUDA regions) copied in, outputs copied out into `outputs` (host buffers of the outputs' exact
   * size, or region slices). Null when this run cannot use a graph (the caller runs it plainly):
   * graphs off, the weights moved too often, or a tensor not of the slot's shape.
   */
  run(inputs: readonly OrtTensor[], outputs: readonly OrtTensor[], batch: number, epoch: number): OrtOutput[] | null {
    if (!this.usable(batch)) return null;
    const slot = this.#slot(batch, epoch);
    if (!slot) return null;
    // A graph reads and writes its own fixed buffers. Host tensors are copied in and out through
    // host memory; a tensor in GPU memory (CUDA shared memory) is copied GPU to GPU, so a request
    // whose tensors are in a region runs through the graph too (on 2026-11-30 such requests ran
    // plainly: 2.58 ms p50 against 2.08 with system shared memory through the graph, H200).
    // Every tensor is checked before any is copied: a copy issued and then abandoned (the run
    // going on plainly) could still be reading its staging memory when the plain run reuses it.
    const sources = slot.inputs.map((t) => {
      const input = inputs.find((x) => x.name === t.name);
      return input && fitsSlot(input, t, slot.memory) ? input.data : null;
    });
    // Not this slot's shape, or memory it cannot copy from: run plainly.
    if (sources.some((data) => data === null)) return null;
    const targets = slot.outputs.map((t) => outputs.find((o) => o.name === t.name));
    if (targets.some((o, k) => o !== undefined && isDeviceSlice(o.data) && !fitsSlot(o, slot.outputs[k]!, slot.memory))) return null;
    try {
      slot.inputs.forEach((t, i) => {
        const data = sources[i]!;
        // copy: an input into the graph's slot, GPU to GPU from its CUDA region (a plain run reads it in place)
        if (isDeviceSlice(data)) slot.memory.copyFromDevice(data.memory, data.offset, t.offset, t.bytes);
        // copy: an input into the graph's slot, host to GPU (in place of the copy ONNX Runtime makes on a plain run)
        else slot.memory.copyFromHost(data, t.offset, false);
      });
    } finally {
      // The copies issued are waited for, whether or not a later one failed.
      slot.memory.synchronize();
    }
    const onDevice = (t: Slot['inputs'][number]) => ({ name: t.name, type: t.type, dims: t.dims, data: { memory: slot.memory, offset: t.offset } });
    this.#runner().runSync(slot.inputs.map(onDevice), slot.outputs.map(onDevice), { graphId: slot.graphId });
    this.#runs++;
    return slot.outputs.map((t, k) => {
      const target = targets[k];
      if (target && isDeviceSlice(target.data)) {
        // copy: an output out of the graph's slot into its CUDA region, GPU to GPU (a plain run writes it there)
        target.data.memory.copyFromDevice(slot.memory, t.offset, target.data.offset, t.bytes);
        return { name: t.name, type: t.type, dims: t.dims, data: target.data };
      }
      const data = target && !isDeviceSlice(target.data) && target.data.byteLength === t.bytes ? target.data : new Uint8Array(t.bytes);
      // copy: an output out of the graph's slot, GPU to host (in place of ONNX Runtime's own on a plain run)
      slot.memory.copyToHost(data, t.offset);
      return { name: t.name, type: t.type, dims: t.dims, data: ArrayBuffer.isView(data) ? data : new Uint8Array(data) };
    });
  }

  /** The batch size's block and graph id for the weights' epoch; null once it has recaptured too often. */
  #slot(batch: number, epoch: number): Slot | null {
    const slot = this.#slots.get(batch);
    if (!slot) {
      const made = this.#layout(batch, epoch);
      this.#slots.set(batch, made);
      return made;
    }
    if (slot.epoch !== epoch) {
      // The weights moved under the captured graph: a graph of its own for their new addresses.
      if (slot.recaptures >= MAX_RECAPTURES) {
        this.turnOff(`its weights moved ${slot.recaptures + 1} times (evicted and loaded again, or compacted), and each move needs a graph of its own`);
        return null;
      }
      slot.recaptures++;
      slot.graphId = this.#nextId++;
      slot.epoch = epoch;
    }
    return slot;
  }

  #layout(batch: number, epoch: number): Slot {
    let at = 0;
    const place = (t: TensorSpec) => {
      const dims = t.shape.map((d, i) => (i === t.batchDim ? batch : d));
      const bytes = tensorBytes(t.datatype, dims) ?? 0; // graphRefusal keeps out what has no fixed size
      const offset = at;
      at += align(Math.max(bytes, 1));
      return { name: t.name, type: dtypeInfo(t.datatype).onnxType, dims, offset, bytes };
    };
    const inputs = this.#inputs.map(place);
    const outputs = this.#outputs.map(place);
    return { memory: allocateDeviceMemory(at, this.#device), inputs, outputs, graphId: this.#nextId++, epoch, recaptures: 0 };
  }

  /** Free the blocks (the session's graphs go with the session); after a reopen, graphs are captured anew. */
  release(): void {
    for (const slot of this.#slots.values()) slot.memory.release();
    this.#slots.clear();
  }
}

/**
 * Whether a tensor can go through a graph slot's place `t`: host bytes of exactly its size, or device
 * memory of the slot's kind (a CUDA region, on any GPU: copies cross over; the CPU device's memory
 * where the tests drive graphs over the CPU) holding its shape from its offset on.
 */
function fitsSlot(tensor: OrtTensor, t: { dims: number[]; bytes: number }, slot: DeviceMemory): boolean {
  const data = tensor.data;
  if (!isDeviceSlice(data)) return data.byteLength === t.bytes;
  const device = data.memory.device;
  return device !== null && (device === 'cpu') === (slot.device === 'cpu') && data.offset + t.bytes <= data.memory.bytes
    && tensor.dims.length === t.dims.length && tensor.dims.every((d, i) => d === t.dims[i]);
}
