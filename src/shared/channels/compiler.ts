/**
 * The channel between the main thread and the compiler (a Piscina thread that
 * compiles bundles' ONNX files into the compile cache, off every device's
 * dispatch loop): the task and its result, typed here and nowhere else.
 *
 * Ownership: the result's host buffers are SharedArrayBuffers; posting them
 * shares them, nothing is copied. The main thread's HostWeights keeps them
 * for as long as a loaded model holds them in host RAM.
 */
import type { Datatype } from '../dtypes.js';
import type { ErrorData } from '../errors.js';

/** One weight tensor of a compiled executable. */
export interface WeightEntry {
  /** The graph input it feeds. */
  name: string;
  datatype: Datatype;
  dims: number[];
  byteLength: number;
  /** Content key: SHA-256 of datatype, dims and bytes. Equal keys mean interchangeable tensors. */
  key: string;
  /** The file holding its bytes (shared by every entry with a tensor of that key). */
  path: string;
}

/** One ONNX file of a bundle, compiled: a weightless graph and the weights split off it. */
export interface CompiledExecutable {
  /** The cache entry's directory. */
  dir: string;
  graphPath: string;
  /**
   * SHA-256 of the weightless graph (graph.onnx): models whose executables compiled to equal
   * graphs share one session per device (actors/device/sessions.ts).
   */
  graph: string;
  weights: WeightEntry[];
  /** Whether the entry was found (true) or compiled now (false). */
  hit: boolean;
  /** What was wrong with the entry the cache held, when it was damaged and compiled again. */
  damaged?: string;
}

export interface CompileTask {
  type: 'compile';
  /** The model, for messages. */
  model: string;
  /** The bundle's ONNX files, in the manifest's order. */
  files: string[];
  cacheDir: string;
  /** Tensor keys the process holds in host RAM already: not read again. */
  inHostRam: string[];
  /** The devices' backend: the graph is optimised for it (cuda: only the provider-neutral level). */
  backend: 'cpu' | 'cuda';
}

/**
 * Answered as soon as the compiler thread has loaded (onnxruntime-node included): the handle waits
 * for it before ending the thread, since ending a thread while onnxruntime-node's addon registers
 * aborts the whole process (its module init throws a C++ exception when its environment goes).
 */
export interface ReadyTask {
  type: 'ready';
}

export type CompileResult =
  | { type: 'ready' }
  | {
    type: 'compiled';
    /** One per file of the task, in its order. */
    executables: CompiledExecutable[];
    /** The model's weight tensors that were not in host RAM, read from the cache: key -> bytes. */
    host: Record<string, SharedArrayBuffer>;
    /** Damaged cache entries and tensor files found, each compiled again: what was wrong, for the log. */
    repaired: string[];
  }
  | { type: 'compileFailed'; error: ErrorData };

/** A model's compiled form as it travels to the device actors with its load. */
export interface CompiledModel {
  /** Aligned with the spec's executables. */
  executables: CompiledExecutable[];
  /** Host copies read by the compiler that the process did not hold yet. */
  host: Record<string, SharedArrayBuffer>;
}
