/**
 * Opening a bundle's ONNX files as ONNX Runtime sessions, in the device actor, through Stowage's
 * own binding (native/ort.ts).
 *
 * With the weight cache on, each file was compiled once by the compiler (actors/compiler/) and
 * opens here as a weightless session whose weights are graph inputs, bound to their bytes in the
 * device's arena once per residency (not once per run). With it off
 * (`runtime.weight_cache_fraction: 0`), the file opens as it is, weights embedded, every model
 * resident.
 */
import path from 'node:path';
import type { ExecutableFile, ModelSpec } from '../../shared/model-spec.js';
import { checkSignature } from '../../bundle/signature.js';
import { dtypeInfo } from '../../shared/dtypes.js';
import { errors } from '../../shared/errors.js';
import type { CompiledExecutable, WeightEntry } from '../../shared/channels/compiler.js';
import { readTensorFile } from '../../shared/tensor-file.js';
import { OrtSession, type DeviceSlice, type OrtRunOptions, type OrtSessionOptions } from '../../native/ort.js';
import { CudaGraphs, graphRefusal } from './cuda-graphs.js';
import type { TensorSource } from './weight-cache.js';

export interface Executable {
  session: OrtSession;
  /** The weights it is fed (empty when they are embedded). */
  weights: readonly WeightEntry[];
  /** Whether the compiled form came from the cache directory. */
  cacheHit: boolean;
  /** The residency epoch the session's weights are bound for: they are bound again when it changes (weights moved). */
  boundEpoch?: number;
  /**
   * The outputs whose every axis but the batch one the graph fixes: their shape is known before a
   * run, so ONNX Runtime can write them into memory given to it (a shared-memory slice). An axis the
   * graph leaves symbolic has only the manifest's word for its size, which nothing checks.
   */
  shapedOutputs: ReadonlySet<string>;
  /** Backend cuda with runtime.cuda.graphs: its CUDA graphs (on, or off saying why); null otherwise. */
  graphs: CudaGraphs | null;
}

/**
 * The options of a run that does not go through a graph. A session opened for CUDA graphs would
 * capture ONNX Runtime's default graph on such a run: -1 says it runs without one.
 */
export function plainRun(executable: Executable): OrtRunOptions | undefined {
  return executable.graphs ? { graphId: -1 } : undefined;
}

export interface OpenOptions {
  intraOpThreads: number;
  /** Share the process's intra-op pool (runtime.thread_pool: process) instead of a pool of its own. */
  sharedThreadPool: boolean;
  /** Backend cuda: the CUDA provider on this device with these options (and the GPU's shared arena or not); null on the CPU. */
  cuda: { deviceId: number; options: Record<string, string>; sharedArena?: boolean } | null;
  /** Backend cuda: open for CUDA graphs (runtime.cuda.graphs). */
  graphs?: boolean;
}

function sessionOptions(options: OpenOptions, level: 'basic' | 'all'): OrtSessionOptions {
  return {
    ...(options.cuda ? { cuda: options.cuda } : {}),
    graphOptimizationLevel: level,
    ...(options.sharedThreadPool ? { useGlobalThreadPool: true } : { intraOpThreads: Math.max(0, options.intraOpThreads) }),
    // Spinning threads burn an idle core between requests (measured 471 ms vs 60 ms of CPU on an idle loop).
    allowSpinning: false,
    logSeverityLevel: 3,
  };
}

/**
 * STOWAGE_ORT_PROFILE=DIR: every session profiles its runs into DIR (ONNX Runtime's per-node
 * timings, one JSON per session, written when it is released), for finding where a run's time goes.
 */
const PROFILE_DIR = process.env.STOWAGE_ORT_PROFILE;

/** STOWAGE_ORT_PROFILE's prefix for one file's session, or nothing. */
function profiled(spec: ModelSpec, file: ExecutableFile, options: OrtSessionOptions): OrtSessionOptions {
  return PROFILE_DIR ? { ...options, profilePrefix: path.join(PROFILE_DIR, `${spec.name}-${path.basename(file.path, '.onnx')}`) } : options;
}

function createSession(spec: ModelSpec, file: ExecutableFile, source: string, options: OrtSessionOptions): OrtSession {
  try {
    return OrtSession.open(source, profiled(spec, file, options));
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
  // On the CPU the compiled graph is optimised already: 'basic' only folds what the split left
  // constant, in about a millisecond. For CUDA the compiler stopped at the provider-neutral level:
  // 'all' here makes the CUDA provider's own fusions. Without the weight cache the file opens as it is.
  const source = compiled === null ? file.path : compiled.graphPath;
  const level = compiled === null || options.cuda ? 'all' : 'basic';
  let session: OrtSession | undefined;
  // CUDA graphs: ONNX Runtime refuses enable_cuda_graph at creation when a node of the graph runs
  // on the CPU; such a model opens without it and runs as before, saying why.
  let graphsOff: string | null = null;
  if (options.cuda && options.graphs) {
    try {
      // With an arena of its own: a graph replays into the addresses it captured (config-schema.ts shared_arena).
      session = OrtSession.open(source, profiled(spec, file, sessionOptions({ ...options, cuda: { ...options.cuda, sharedArena: false, options: { ...options.cuda.options, enable_cuda_graph: '1' } } }, level)));
    } catch (err) {
      graphsOff = `ONNX Runtime cannot capture it: ${(err as Error).message}`;
    }
  }
  session ??= createSession(spec, file, source, sessionOptions(options, level));
  const executable: Executable = compiled === null
    ? { session, weights: [], cacheHit: false, shapedOutputs: new Set(), graphs: null }
    : { session, weights: compiled.weights, cacheHit: compiled.hit, shapedOutputs: new Set(), graphs: null };
  const weightNames = new Set(executable.weights.map((w) => w.name));
  try {
    const inputs = executable.session.inputMetadata.filter((t) => !weightNames.has(t.name));
    const outputs = executable.session.outputMetadata;
    checkSignature(spec, file, inputs, outputs);
    executable.shapedOutputs = new Set(spec.outputs.filter((t) => {
      const shape = outputs.find((g) => g.name === t.name)?.shape ?? [];
      return shape.every((d, i) => i === t.batchDim || (typeof d === 'number' && d >= 0));
    }).map((t) => t.name));
    if (options.cuda && options.graphs) {
      // The batch sizes it runs at: its own (a per-size file), the compiled ones (dynamic), or 0 (unbatched).
      const sizes = file.batchSize !== null ? [file.batchSize] : spec.batchAxis === null ? [0] : spec.compiledBatchSizes;
      const off = graphsOff ?? graphRefusal(spec.inputs, spec.outputs, executable.shapedOutputs);
      executable.graphs = new CudaGraphs(session, spec.inputs, spec.outputs, `cuda:${options.cuda.deviceId}`, sizes, off);
    }
  } catch (err) {
    executable.session.release();
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

/**
 * Bind a weightless session's weights to their bytes on the device (`view` gives a tensor's bytes
 * in the arena), once per residency: a later run reads them there, and they are bound again only
 * when the model's epoch says they moved.
 */
export function bindWeights(executable: Executable, epoch: number, view: (key: string) => Uint8Array | DeviceSlice): void {
  if (executable.boundEpoch === epoch) return;
  executable.session.unbindInputs();
  for (const w of executable.weights) {
    executable.session.bindInput({ name: w.name, type: dtypeInfo(w.datatype).onnxType, dims: w.dims, data: view(w.key) });
  }
  executable.boundEpoch = epoch;
}
