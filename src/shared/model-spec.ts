/**
 * What a bundle becomes once its manifest is parsed: plain data, shared by the
 * main thread (codec, metadata) and the device actor (sessions, padding).
 * Structured-clone safe: it crosses threads in `load` messages.
 */
import type { Datatype } from './dtypes.js';

export interface TensorSpec {
  readonly name: string;
  readonly datatype: Datatype;
  /** Axis letters in ONNX order, as the manifest writes them, e.g. "nhw". */
  readonly axes: string;
  /** Dimensions in ONNX order; -1 on the batch axis. */
  readonly shape: readonly number[];
  /** Index of the batch axis in `shape`, or -1 for an unbatched tensor. */
  readonly batchDim: number;
}

/**
 * A tensor of an ONNX graph's signature as ONNX Runtime reports it (onnxruntime-node's
 * `inputMetadata` / `outputMetadata`, and native/ort.ts in the same shape): what a manifest is
 * checked against (bundle/signature.ts) and drafted from (cli/draft.ts).
 */
export interface GraphTensor {
  name: string;
  isTensor: boolean;
  type?: string;
  /** Numbers for fixed dimensions, strings (or -1) for symbolic ones. */
  shape?: ReadonlyArray<number | string>;
}

export interface ExecutableFile {
  /** The batch size this file was compiled for; null for a dynamic batch axis (model.onnx). */
  readonly batchSize: number | null;
  readonly path: string;
}

/** A bundle's model.js, as checked at load. */
export interface BundleHooks {
  readonly file: string;
  /** Changes when model.js changes, so that a reload imports the new code. */
  readonly version: string;
  readonly preprocess: boolean;
  readonly postprocess: boolean;
  /** A meta model's pipeline. */
  readonly run: boolean;
}

export interface ModelSpec {
  /** The model name: the bundle's directory name. */
  readonly name: string;
  readonly dir: string;
  /** The executable's tensors (executable_inputs / executable_outputs). */
  readonly inputs: readonly TensorSpec[];
  readonly outputs: readonly TensorSpec[];
  /** What clients send and receive: client_inputs / client_outputs, or the executable's when the manifest has none. */
  readonly clientInputs: readonly TensorSpec[];
  readonly clientOutputs: readonly TensorSpec[];
  /** The bundle's model.js hooks; null without one (set at load, once the pool has checked it). */
  readonly hooks: BundleHooks | null;
  /** `meta`: no executable; model.js `run` calls `subModels` through the scheduler. */
  readonly kind: 'model' | 'meta';
  readonly subModels: readonly string[];
  /** The batch axis letter ("n" unless the manifest names another); null when no tensor batches. */
  readonly batchAxis: string | null;
  /** Sorted ascending; empty for an unbatched model. */
  readonly compiledBatchSizes: readonly number[];
  /** Largest batch one request may carry; 0 for an unbatched model. */
  readonly maxBatchSize: number;
  /** model.onnx (dynamic batch) or one model.bN.onnx per compiled batch size. */
  readonly executables: readonly ExecutableFile[];
  /**
   * The bundle's warm-up data (manifest `warmup.data`): per executable input named there, the bytes
   * of one batch row (the whole tensor for an unbatched model), repeated to each batch size at
   * warm-up. Inputs not named warm up on zeros. Empty for most bundles.
   */
  readonly warmupData: Readonly<Record<string, Uint8Array>>;
  /**
   * The level of its requests that name no priority, as its manifest says (`scheduling.priority`);
   * absent: the node file's. The node file's scheduler.models.<name>.priority wins over it.
   */
  readonly priority?: number;
}

/**
 * One loaded version of a model, as every thread names it: the model's name and the repository's
 * load generation (`name#generation`). A reload loads a new instance beside the old, so requests
 * in flight finish on the version they started on. Built by `instanceKey` and read by `modelOf`,
 * nowhere else; the brand keeps a plain model name from being passed where an instance belongs.
 */
export type InstanceKey = string & { readonly __instance: true };

/** The instance of `model` loaded as the repository's `generation`th load. */
export function instanceKey(model: string, generation: number): InstanceKey {
  return `${model}#${generation}` as InstanceKey;
}

/** The model an instance is a version of. */
export function modelOf(instance: InstanceKey): string {
  return instance.slice(0, instance.search(/#\d+$/));
}
