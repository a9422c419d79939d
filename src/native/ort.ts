/**
 * Stowage's own ONNX Runtime binding (ort.cc, built into src/native/build by `npm install`) behind
 * typed functions. It runs the very libonnxruntime.so.1 that onnxruntime-node installs, through
 * ONNX Runtime's C API, and gives the device thread what onnxruntime-node's JavaScript API cannot:
 *
 * - tensors over memory the caller owns (staging, the weight arena, shared-memory mappings), read
 *   and written in place;
 * - runs with inputs and outputs bound: an output given a buffer is written there by ONNX Runtime
 *   (no copy after the run); an output of unknown shape comes back as an ArrayBuffer over ONNX
 *   Runtime's own memory (no copy either; such a buffer cannot be transferred to another thread);
 * - inputs bound once per session and kept across runs (a weightless session's weights);
 * - runs on a libuv thread: `run` returns a promise and the calling thread keeps taking messages;
 *   `terminate` stops the run in flight (`runSync` runs on the calling thread, for runs shorter
 *   than the hop);
 * - errors carrying where they came from and that origin's own number (`OrtError`: ONNX Runtime's
 *   code, CUDA's error number), and whether memory ran out, so callers decide by numbers, never by
 *   reading a message.
 *
 * Tensors travel as `{ name, type, dims, data }`: `type` is ONNX's element type number (dtypes.ts
 * `onnxType`), `data` any ArrayBuffer or view, aligned for the type; BYTES (strings) as KServe's
 * length-prefixed elements. A buffer handed to `run` or `bindInput` must not be transferred away
 * while a run may use it.
 */
import { createRequire } from 'node:module';
import { availableParallelism } from 'node:os';
import path from 'node:path';
import { byOnnxType } from '../shared/dtypes.js';
import type { GraphTensor } from '../shared/model-spec.js';

/** A tensor over the caller's memory: host memory, or a slice of device memory from `offset`. */
export interface OrtTensor {
  name: string;
  /** ONNX's element type number (TensorProto.DataType). */
  type: number;
  dims: readonly number[];
  data: ArrayBufferView | ArrayBuffer | DeviceSlice;
}

/** An output in host memory (every output a run writes for host tensors or names). */
export type HostOutput = OrtOutput & { data: ArrayBufferView };

/** `out`, which must be in host memory: a device slice is an error in the caller. */
export function hostOutput(out: OrtOutput): HostOutput {
  if (!ArrayBuffer.isView(out.data)) throw new Error(`output ${out.name} is in device memory; copy it to the host first`);
  return out as HostOutput;
}

/** A tensor over host memory: what the device actor hands the CPU today. */
export type HostTensor = OrtTensor & { data: ArrayBufferView | ArrayBuffer };

/** Where a tensor in device memory starts (its length is its shape's). */
export interface DeviceSlice {
  memory: DeviceMemory;
  offset: number;
}

/** Whether tensor data is a slice of device memory rather than host memory. */
export function isDeviceSlice(data: OrtTensor['data']): data is DeviceSlice {
  return 'memory' in data;
}

/** Where device memory lives: the CPU, or a CUDA device (once the CUDA libraries are loaded: cuda.ts). */
export type DeviceName = 'cpu' | `cuda:${number}`;

/**
 * Memory on a device, from ONNX Runtime's allocator for it, that JavaScript cannot read: filled and
 * read back by explicit copies (ONNX Runtime's data transfer for the device: a memcpy on the CPU, a
 * cudaMemcpy on a GPU). Tensors over it (`{ memory, offset }`) are bound and run like any other.
 * Freed by `release()`, which refuses while a session's tensor still views it, or when collected.
 */
export interface DeviceMemory {
  readonly bytes: number;
  /** Null once released. */
  readonly device: DeviceName | null;
  /**
   * Copy `src` into the device memory at `offset` (bytes). With `wait` false (a GPU) the copy is only
   * issued: call `synchronize()` after the last one, and leave `src` alone until then.
   */
  copyFromHost(src: ArrayBufferView | ArrayBuffer, offset?: number, wait?: boolean): void;
  /** Copy the device memory from `offset` into all of `dst`. */
  copyToHost(dst: ArrayBufferView | ArrayBuffer, offset?: number): void;
  /** Move `length` bytes at `from` to `to` within this memory (ranges may overlap). */
  moveWithin(to: number, from: number, length: number): void;
  /** Wait for the copies `copyFromHost(src, offset, false)` issued (a no-op on the CPU). */
  synchronize(): void;
  /**
   * Copy `src` into the memory at `offset` on the memory's own upload stream (a GPU: issued only,
   * beside whatever else the GPU runs; the CPU: copied now). Leave `src` alone until its group landed.
   */
  uploadFromHost(src: ArrayBufferView | ArrayBuffer, offset: number): void;
  /** Copy `bytes` from another device memory (on this GPU or another) at `srcOffset` to `offset`, waited for. */
  copyFromDevice(src: DeviceMemory, srcOffset: number, offset: number, bytes: number): void;
  /** The CUDA IPC handle (64 bytes) another process opens this GPU memory with (Triton's CUDA shared memory). */
  ipcHandle(): Uint8Array;
  /** Of memory opened from a CUDA IPC handle, what the driver says of its allocation; null for memory of our own. */
  readonly ipcAllocation: IpcAllocation | null;
  /** Close the group of uploads issued since the last mark; its id. */
  markUpload(): number;
  /** Wait for a group's copies; the milliseconds they took (on a GPU, between its first and last copy). Once per id. */
  waitUpload(id: number): number;
  release(): void;
}

/**
 * What the driver says of an allocation opened from a CUDA IPC handle: the GPU it is on (-1 when it
 * cannot tell), the bytes from the handle's address to its end (0 when it cannot tell), and why it
 * could not tell either (null when it told both).
 */
export interface IpcAllocation {
  gpu: number;
  bytes: number;
  unmeasured: string | null;
}

/** `bytes` of memory on `device` (initOrt first). */
export function allocateDeviceMemory(bytes: number, device: DeviceName = 'cpu'): DeviceMemory {
  if (!addon) initOrt();
  return new addon!.DeviceMemory(bytes, device);
}

/**
 * Another process's GPU memory, `bytes` long, opened on `device` from its CUDA IPC handle (Triton's
 * CUDA shared memory): read and written like memory of our own; `release()` (or collection) closes
 * it. One GPU's device actors share the opening.
 */
export function openIpcMemory(handle: Uint8Array, bytes: number, device: `cuda:${number}`): DeviceMemory {
  if (!addon) initOrt();
  return new addon!.DeviceMemory(bytes, device, handle);
}

/** An output as a run answers it: `data` is the buffer (or device slice) it was given, or ONNX Runtime's. */
export interface OrtOutput {
  name: string;
  type: number;
  dims: number[];
  data: ArrayBufferView | DeviceSlice;
}

/** An input or output as the session declares it. */
export interface OrtTensorInfo {
  name: string;
  isTensor: boolean;
  type?: number;
  /** Fixed sizes as numbers; a symbolic dimension as its name, an unnamed free one as -1. */
  dims?: (number | string)[];
}

/** One run's options. */
export interface OrtRunOptions {
  /**
   * The CUDA graph this run captures (its first runs) or replays (after): ONNX Runtime's
   * `gpu_graph_id`, for a session opened with the CUDA provider's `enable_cuda_graph: '1'`, whose
   * inputs and outputs are bound to GPU memory at the same addresses on every run of the graph.
   * -1 runs without a graph. Absent: ONNX Runtime's one default graph (when enabled).
   */
  graphId?: number;
}

export interface OrtSessionOptions {
  /** ONNX Runtime intra-op threads; 0 lets it choose. */
  intraOpThreads?: number;
  interOpThreads?: number;
  /** Whether idle intra-op threads spin (fast wake-up, a core busy between runs). */
  allowSpinning?: boolean;
  graphOptimizationLevel?: 'disabled' | 'basic' | 'extended' | 'all';
  /** Where to save the optimised graph. */
  optimizedModelFilePath?: string;
  /**
   * Tensors over the caller's memory that ONNX Runtime uses in place of the model's initializers of
   * the same names (AddInitializer: not copied, constant so prepacked; the model must hold an
   * initializer of each name, e.g. one stored as external data). The session keeps them alive.
   */
  initializers?: OrtTensor[];
  /**
   * Tensors that replace initializers the model stores as external data (AddExternalInitializers):
   * copied into the session as it is made (same name, shape and type required).
   */
  externalInitializers?: OrtTensor[];
  /** Use the process-wide thread pool `initOrt` made instead of threads of its own. */
  useGlobalThreadPool?: boolean;
  /**
   * ONNX Runtime's memory patterns (on by default): after a run at a new shape, later runs at that
   * shape take all their activations as one block planned from it. Off: each activation is
   * allocated as the run needs it (from the same arena, reusing freed pieces).
   */
  memoryPattern?: boolean;
  /**
   * Take activations (and every other CPU buffer of its runs) from the CPU arena registered with
   * the environment (`registerCpuArena` first), not from an arena of its own.
   */
  useEnvAllocators?: boolean;
  /** 0 verbose .. 4 fatal. */
  logSeverityLevel?: number;
  /**
   * Profile every run (ONNX Runtime's per-node timings), written as `<prefix>_<date>.json` when the session is
   * released.
   */
  profilePrefix?: string;
  /**
   * Run on the CUDA execution provider of GPU `deviceId` (a CUDA ordinal), with ONNX Runtime's own
   * option names and string values (`use_tf32`, `cudnn_conv_algo_search`, `gpu_mem_limit`,
   * `enable_cuda_graph`, ...). The CUDA libraries must be loaded first (cuda.ts `loadCuda`).
   * `sharedArena`: activations from the GPU's one arena for the process (ONNX Runtime's allocator
   * registered with the environment on first use), not an arena of the session's own.
   */
  cuda?: { deviceId: number; options?: Record<string, string>; sharedArena?: boolean };
}

/** What a run with bound inputs does, on a session's own binding or on one of several (NativeBinding). */
interface NativeRuns {
  bindInput(tensor: OrtTensor): void;
  unbindInputs(): void;
  run(inputs: OrtTensor[], outputs: (string | OrtTensor)[], options?: OrtRunOptions): Promise<OrtOutput[]>;
  runSync(inputs: OrtTensor[], outputs: (string | OrtTensor)[], options?: OrtRunOptions): OrtOutput[];
}

interface NativeBinding extends NativeRuns {
  release(): void;
}

interface NativeSession extends NativeRuns {
  inputs(): OrtTensorInfo[];
  outputs(): OrtTensorInfo[];
  terminate(): boolean;
  shapesRun(): number;
  release(): void;
  providerOptions(): string;
}

export interface Addon {
  init(libraryPath: string, options?: { globalIntraOpThreads?: number; globalInterOpThreads?: number; globalAllowSpinning?: boolean }): string;
  apiVersion: number;
  Session: new (model: string | Uint8Array, options: OrtSessionOptions) => NativeSession;
  Binding: new (session: NativeSession) => NativeBinding;
  registerCpuArena(): boolean;
  cpuArenaStats(): ArenaStats | null;
  heapBytesInUse(): number;
  DeviceMemory: new (bytes: number, device: string, ipcHandle?: Uint8Array) => DeviceMemory;
  cudaLoad(dirs: string[]): { loaded: string[]; missing: string[] };
  cudaDevices(): NativeCudaDevices;
  cudaMemoryInfo(ordinal: number): { freeBytes: number; totalBytes: number };
  PinnedHost: new (view: ArrayBufferView | ArrayBuffer) => PinnedHost;
  /**
   * The error the binding raises when ONNX Runtime answers status `ortCode` with `message` (its reading of a GPU's
   * failures, testable anywhere).
   */
  ortFailure(ortCode: number, message: string): OrtError;
  /**
   * The plan of a GPU memory's moveWithin (src/native/move-plan.h) over host memory, for tests without a GPU: the
   * copies it made.
   */
  movePlanHost(buffer: Uint8Array, to: number, from: number, length: number, scratchBytes: number): number;
  /**
   * Compaction's choice of scratch buffer (move-plan.h chooseScratch) against a device giving at most `largestGiven`
   * bytes at once: the bytes got, and every size asked.
   */
  scratchChoiceHost(length: number, most: number, least: number, largestGiven: number): { got: number; asked: number[] };
  cudaProbe(ordinal: number): { error: number; message: string };
}

/** The GPUs as the binding reads them (cuda.ts words them). */
export interface NativeCudaDevices {
  error?: string;
  runtimeVersion: number;
  driverCudaVersion: number;
  cudnnVersion: number;
  driverVersion?: string;
  nvmlError?: string;
  devices: {
    ordinal: number;
    pciBusId?: string;
    name?: string;
    uuid?: string;
    memoryTotalBytes?: number;
    memoryUsedBytes?: number;
    memoryFreeBytes?: number;
    utilization?: number;
    powerWatts?: number;
    powerLimitWatts?: number;
    energyJoules?: number;
  }[];
}

/** Host memory registered with CUDA (page-locked) until `release()`. */
export interface PinnedHost {
  readonly bytes: number;
  release(): void;
}

let addon: Addon | undefined;

/** The loaded binding (initOrt first): for cuda.ts. */
export function ortAddon(): Addon {
  if (!addon) initOrt();
  return addon!;
}

/** The libonnxruntime.so.1 onnxruntime-node installed: the one ONNX Runtime of the process. */
export function ortLibraryPath(): string {
  const require = createRequire(import.meta.url);
  const root = path.dirname(require.resolve('onnxruntime-node/package.json'));
  return path.join(root, 'bin', 'napi-v6', process.platform, process.arch, 'libonnxruntime.so.1');
}

/**
 * Load the binding and ONNX Runtime (once per process; every thread shares them) and answer its
 * version. `globalThreads` makes one intra-op pool that sessions opened with
 * `useGlobalThreadPool` share, instead of a pool each.
 */
export function initOrt(globalThreads?: { intraOp: number; allowSpinning: boolean }): string {
  if (!addon) {
    const require = createRequire(import.meta.url);
    try {
      // dist/native/ort.js -> src/native/build/Release/stowage_ort.node
      addon = require('../../src/native/build/Release/stowage_ort.node') as Addon;
    } catch (err) {
      throw new Error(`the ONNX Runtime binding is not built (run npm run build:native): ${(err as Error).message}`);
    }
  }
  return addon.init(ortLibraryPath(), globalThreads ? { globalIntraOpThreads: globalThreads.intraOp, globalInterOpThreads: 1, globalAllowSpinning: globalThreads.allowSpinning } : {});
}

/**
 * What `initOrt` is given for runtime.thread_pool: nothing for a pool per session, or the
 * process-wide pool of `intraOpThreads` threads (0: one per core), never spinning.
 */
export function processThreadPool(threadPool: 'per_session' | 'process', intraOpThreads: number): { intraOp: number; allowSpinning: boolean } | undefined {
  return threadPool === 'process' ? { intraOp: intraOpThreads > 0 ? intraOpThreads : availableParallelism(), allowSpinning: false } : undefined;
}

/**
 * An ONNX Runtime arena's own counts (AllocatorGetStats), in bytes and calls: InUse (handed out
 * now), TotalAllocated (reserved from the system), MaxInUse, NumAllocs, NumReserves, ...
 */
export type ArenaStats = Record<string, number>;

/**
 * Register one CPU arena with ONNX Runtime's (process-wide) environment, once per process: sessions
 * opened with `useEnvAllocators` then take their activations from it. True when this call made it.
 */
export function registerCpuArena(): boolean {
  return ortAddon().registerCpuArena();
}

/** The registered CPU arena's counts; null when none is registered. */
export function cpuArenaStats(): ArenaStats | null {
  return ortAddon().cpuArenaStats();
}

/**
 * Bytes the process's C heap holds now, over every thread's arena (malloc_info): a session's open grows it by what the
 * session keeps.
 */
export function heapBytesInUse(): number {
  return ortAddon().heapBytesInUse();
}

/**
 * An error as the binding raises it (src/native/failure.h). `code` names it: ONNX Runtime's code
 * (`ORT_FAIL`, ...), `ERR_CUDA`, `ERR_OUT_OF_MEMORY`, `ERR_ORT_ARGUMENT` (refused before ONNX Runtime
 * or CUDA saw it) or `ERR_ORT_BINDING`; the numbers say the rest.
 */
export interface OrtError extends Error {
  code: string;
  origin: 'onnxruntime' | 'cuda' | 'allocator' | 'argument' | 'binding';
  /** ONNX Runtime's OrtErrorCode, when ONNX Runtime answered the failure. */
  ortCode?: number;
  /** The CUDA runtime's error number: of a call the binding made, or the one ONNX Runtime's CUDA provider reports. */
  cudaError?: number;
  /** Which CUDA library failed (CUDA, CUBLAS, CUDNN, ...), with its own status number. */
  library?: string;
  libraryStatus?: number;
  /**
   * Memory ran out: cudaErrorMemoryAllocation (CUDA_ERROR_MEMORY_ALLOCATION), a CUDA library's
   * *_ALLOC_FAILED status (cuDNN 9: *_ALLOCATION_FAILED), an allocation refused to the binding, or
   * ONNX Runtime's allocator (its arena, on any device) refusing a buffer.
   */
  outOfMemory: boolean;
  /**
   * With outOfMemory, which memory: the GPU's, the host's, or an ONNX Runtime arena's whose words
   * do not say which device it is over (the caller knows: session-memory.ts).
   */
  memory?: 'gpu' | 'host' | 'arena';
}

/** cudaErrorMemoryAllocation. */
export const CUDA_ERROR_MEMORY_ALLOCATION = 2;

/** Whether `err` came from the binding (it carries an origin). */
export function isOrtError(err: unknown): err is OrtError {
  return err instanceof Error && typeof (err as Partial<OrtError>).origin === 'string' && typeof (err as Partial<OrtError>).code === 'string';
}

/** Whether `err` is memory running out, as the binding classified it where it happened. */
export function isOutOfMemory(err: unknown): boolean {
  return isOrtError(err) && err.outOfMemory === true;
}

/**
 * Runs with inputs bound once and kept: a session's own binding (OrtSession), or one of several a
 * session shared by models of one graph keeps, one per model (OrtBinding).
 */
abstract class BoundRuns<N extends NativeRuns> {
  protected readonly native: N;

  protected constructor(native: N) {
    this.native = native;
  }

  /** Bind an input for every later run (until `unbindInputs`): a weightless session's weights. */
  bindInput(tensor: OrtTensor): void {
    this.native.bindInput(tensor);
  }

  unbindInputs(): void {
    this.native.unbindInputs();
  }

  /**
   * Run once. Inputs are read in place; each output is written into the buffer it is given, or
   * (named only) allocated by ONNX Runtime. One run at a time per session, whatever binding it uses.
   */
  run(inputs: OrtTensor[], outputs: (string | OrtTensor)[], options?: OrtRunOptions): Promise<OrtOutput[]> {
    try {
      return this.native.run(inputs, outputs, options);
    } catch (err) {
      return Promise.reject(err); // arguments refused before the run: a rejection all the same
    }
  }

  /**
   * Run once on the calling thread, blocking it: for runs shorter than the hop to a libuv thread
   * and back (tens of microseconds). Cannot be terminated.
   */
  runSync(inputs: OrtTensor[], outputs: (string | OrtTensor)[], options?: OrtRunOptions): OrtOutput[] {
    return this.native.runSync(inputs, outputs, options);
  }
}

/** One ONNX Runtime session, opened on the calling thread (and used only there). */
export class OrtSession extends BoundRuns<NativeSession> {
  readonly inputs: readonly OrtTensorInfo[];
  readonly outputs: readonly OrtTensorInfo[];

  private constructor(native: NativeSession) {
    super(native);
    this.inputs = native.inputs();
    this.outputs = native.outputs();
  }

  /** Open a model from a file or from its bytes. Throws an OrtError when ONNX Runtime cannot. */
  static open(model: string | Uint8Array, options: OrtSessionOptions = {}): OrtSession {
    initOrt();
    return new OrtSession(new addon!.Session(model, options));
  }

  /** The inputs and outputs in the shape bundle/signature.ts checks (ONNX Runtime's type names). */
  get inputMetadata(): GraphTensor[] {
    return this.inputs.map(asGraphTensor);
  }

  get outputMetadata(): GraphTensor[] {
    return this.outputs.map(asGraphTensor);
  }

  /**
   * A binding of its own on this session: inputs bound in it (one model's weights) stay apart from
   * the session's own and from other bindings', so models of one graph share one session, each
   * running with its weights. Runs of the session go one at a time, whatever binding they use.
   */
  createBinding(): OrtBinding {
    return new OrtBinding(new addon!.Binding(this.native));
  }

  /** Stop the run in flight (it rejects); false when none is. */
  terminate(): boolean {
    return this.native.terminate();
  }

  /**
   * How many distinct input shapes its runs have gone through. On a GPU each one's first run holds
   * the GPU's capture lock (cuDNN's algorithm search at a new shape frees memory, which would
   * invalidate another device actor's graph capture): warm-up's runs and a client's new batch size.
   */
  get shapesRun(): number {
    return this.native.shapesRun();
  }

  /** The CUDA provider's options as ONNX Runtime took them, `key=value;...` ("" on the CPU). */
  get providerOptions(): string {
    return this.native.providerOptions();
  }

  /** Free the session (after the run in flight, if any). */
  release(): void {
    this.native.release();
  }
}

/** Inputs bound apart on a shared session (OrtSession.createBinding), and runs made with them. */
export class OrtBinding extends BoundRuns<NativeBinding> {
  constructor(native: NativeBinding) {
    super(native);
  }

  /** Let go of its bound inputs now (after the run in flight with it, if any); the session stays open. */
  release(): void {
    this.native.release();
  }
}

/** An input or output as bundle/signature.ts checks it (ONNX Runtime's type names). */
export function asGraphTensor(t: OrtTensorInfo): GraphTensor {
  if (!t.isTensor || t.type === undefined) return { name: t.name, isTensor: false };
  // A type outside the table (float8, int4, ...) keeps a name that matches no manifest dtype.
  return { name: t.name, isTensor: true, type: byOnnxType(t.type)?.ortType ?? `onnx-type-${t.type}`, shape: t.dims ?? [] };
}
