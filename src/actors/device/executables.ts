/**
 * Opening a bundle's ONNX files as ONNX Runtime sessions, in the device actor.
 *
 * With the weight cache on, each file was compiled once by the compiler
 * (actors/compiler/) and opens here as a weightless session whose weights are graph inputs, fed from the
 * device's arena on every run. With it off (`runtime.weight_cache_fraction:
 * 0`), the file opens as it is, weights embedded, every model resident.
 */
import path from 'node:path';
import * as ort from 'onnxruntime-node';
import type { ExecutableFile, ModelSpec } from '../../shared/model-spec.js';
import { checkSignature, type GraphTensor } from '../../bundle/signature.js';
import { dtypeInfo } from '../../shared/dtypes.js';
import { errors } from '../../shared/errors.js';
import type { CompiledExecutable, WeightEntry } from '../../shared/channels/compiler.js';
import { readTensorFile } from '../../shared/tensor-file.js';
import type { TensorSource } from './weight-cache.js';

export interface Executable {
  session: ort.InferenceSession;
  /** The weights it is fed on every run (empty when they are embedded). */
  weights: readonly WeightEntry[];
  /** Whether the compiled form came from the cache directory. */
  cacheHit: boolean;
  /** Weight feeds over the arena, valid while the model's residency epoch is unchanged. */
  feeds?: { epoch: number; tensors: Record<string, ort.Tensor> };
  /**
   * The outputs whose every axis but the batch one the graph fixes: their shape is known before a
   * run, so ONNX Runtime can write them into memory given to it (a shared-memory slice). An axis the
   * graph leaves symbolic has only the manifest's word for its size, which nothing checks.
   */
  shapedOutputs: ReadonlySet<string>;
}

export interface OpenOptions {
  intraOpThreads: number;
}

function sessionOptions(options: OpenOptions, level: 'basic' | 'all'): ort.InferenceSession.SessionOptions {
  return {
    graphOptimizationLevel: level,
    executionProviders: ['cpu'],
    ...(options.intraOpThreads > 0 ? { intraOpNumThreads: options.intraOpThreads } : {}),
    // Spinning threads burn an idle core between requests (measured 471 ms vs 60 ms of CPU on an idle loop).
    extra: { session: { 'intra_op.allow_spinning': '0' } },
  };
}

async function createSession(spec: ModelSpec, file: ExecutableFile, source: string, options: ort.InferenceSession.SessionOptions): Promise<ort.InferenceSession> {
  try {
    return await ort.InferenceSession.create(source, options);
  } catch (err) {
    throw errors.bundleInvalid(spec.name, path.basename(file.path), `ONNX Runtime cannot load it: ${(err as Error).message}`);
  }
}

/**
 * Open one ONNX file of a bundle and check it against the manifest. `compiled` is the file's
 * entry in the compile cache (the compiler made it, off this thread): its weightless graph opens
 * in about a millisecond. Null when the weight cache is off: the file opens as it is, weights
 * embedded, at full optimisation.
 */
export async function openExecutable(spec: ModelSpec, file: ExecutableFile, compiled: CompiledExecutable | null, options: OpenOptions): Promise<Executable> {
  let executable: Executable;
  if (compiled === null) {
    executable = { session: await createSession(spec, file, file.path, sessionOptions(options, 'all')), weights: [], cacheHit: false, shapedOutputs: new Set() };
  } else {
    // The graph is optimised already: 'basic' only folds what the split left constant, in about a millisecond.
    const session = await createSession(spec, file, compiled.graphPath, sessionOptions(options, 'basic'));
    executable = { session, weights: compiled.weights, cacheHit: compiled.hit, shapedOutputs: new Set() };
  }
  const weightNames = new Set(executable.weights.map((w) => w.name));
  try {
    const inputs = (executable.session.inputMetadata as readonly GraphTensor[]).filter((t) => !weightNames.has(t.name));
    const outputs = executable.session.outputMetadata as readonly GraphTensor[];
    checkSignature(spec, file, inputs, outputs);
    executable.shapedOutputs = new Set(spec.outputs.filter((t) => {
      const shape = outputs.find((g) => g.name === t.name)?.shape ?? [];
      return shape.every((d, i) => i === t.batchDim || (typeof d === 'number' && d >= 0));
    }).map((t) => t.name));
  } catch (err) {
    await executable.session.release();
    throw err;
  }
  return executable;
}

/** The distinct tensors of a model's executables, as the weight cache tracks them. */
export function tensorSources(executables: Iterable<Executable>): TensorSource[] {
  const sources = new Map<string, TensorSource>();
  for (const e of executables) {
    for (const w of e.weights) if (!sources.has(w.key)) sources.set(w.key, { key: w.key, byteLength: w.byteLength, file: w.path });
  }
  return [...sources.values()];
}

/** Read a tensor's bytes from the compile cache straight into `into` (host memory or the arena). */
export function readTensor(source: TensorSource, into: Uint8Array): void {
  readTensorFile(source.file, source.byteLength, into);
}

/** ORT tensors over the weights' device bytes; `view` gives a tensor's bytes in the arena. */
export function weightFeeds(executable: Executable, view: (key: string) => Uint8Array): Record<string, ort.Tensor> {
  const feeds: Record<string, ort.Tensor> = {};
  for (const w of executable.weights) {
    const info = dtypeInfo(w.datatype);
    const bytes = view(w.key);
    const TypedArray = info.typedArray as NonNullable<typeof info.typedArray>;
    const data = new TypedArray(bytes.buffer as ArrayBuffer, bytes.byteOffset, bytes.byteLength / info.elementBytes);
    feeds[w.name] = new ort.Tensor(info.ortType as ort.Tensor.Type, data as ort.Tensor.DataType, w.dims);
  }
  return feeds;
}
