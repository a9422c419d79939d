/**
 * The ONNX Runtime sessions of one device, shared by graph and opened on demand, and what runs on
 * them: a bundle's ONNX files opened through Stowage's own binding (native/ort.ts), each an
 * `Executable`.
 *
 * With the weight cache on, each file was compiled once by the compiler (actors/compiler/) into a
 * weightless graph whose weights are graph inputs. Executables whose graphs are equal share one
 * session on this device; each has a binding of its own on it, where its weights are bound to
 * their bytes in the device's arena once per residency (not once per run). With the cache off
 * (`runtime.weight_cache_fraction: 0`), the file opens as it is, weights embedded, in a session of
 * its own, every model resident.
 *
 * What a loaded model pins beside its weights bounds how many models a device holds as much as
 * the weight budget does: each session keeps its graph, kernels and (unless activations are
 * shared) the most its runs ever took. So:
 *
 * - **One session per distinct graph.** Executables whose compiled weightless graphs are equal
 *   (the compile cache's SHA-256 of graph.onnx) and that open with equal options (optimisation
 *   level, provider options such as tf32, CUDA graphs on or off) share one session on this
 *   device. Each keeps a binding of its own on it (ONNX Runtime allows many IoBindings per
 *   session), its weights bound there once per residency, so it runs with its own weights.
 *   Runs of a session go one at a time by construction: the device runs one batch at a time,
 *   and a load's warm-up is a control call the dispatch loop answers between batches (inbox.ts).
 * - **Sessions on demand.** With a budget (runtime.session_budget_bytes), opening or reopening a
 *   session beyond it closes the least recently used idle sessions; a closed session reopens
 *   (from the compile cache) on its next call, its models READY throughout. Sessions of
 *   `residency: device` models are never closed.
 *
 * A session's bytes are measured when it opens (`measure`: on the CPU the C heap's growth across
 * the open; on a GPU its free memory's drop): what it holds beside weights and shared activations.
 */
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import type { ExecutableFile, InstanceKey, ModelSpec } from '../../shared/model-spec.js';
import { checkSignature } from '../../bundle/signature.js';
import { dtypeInfo } from '../../shared/dtypes.js';
import { errors } from '../../shared/errors.js';
import type { CompiledExecutable, WeightEntry } from '../../shared/channels/compiler.js';
import type { SessionCloseReason, SessionOpenReason, SessionsReport } from '../../shared/channels/device.js';
import { readTensorFile } from '../../shared/tensor-file.js';
import { compileExecutable, runtimeName } from '../compiler/compile-cache.js';
import {
  asGraphTensor, initOrt, isOutOfMemory, OrtSession, type DeviceSlice, type OrtBinding, type OrtRunOptions, type OrtSessionOptions, type OrtTensorInfo,
} from '../../native/ort.js';
import { CudaGraphs, graphRefusal } from './cuda-graphs.js';
import type { TensorSource } from './weight-cache.js';

/** What runs on a pooled session: one executable of a loaded model (`Executable`, below). */
export interface SessionUser {
  /** Its session closed, or it left the session: it lets go of its binding (made again at its next use). */
  onClose(): void;
  /** A `residency: device` model's session is never closed by the budget. */
  readonly pinned: boolean;
  /** The model, for messages. */
  readonly model: string;
}

/** Opens the session's graph from the compile cache; on a reopen, an entry gone is compiled again. */
export type SessionOpener = (reason: SessionOpenReason) => OrtSession | Promise<OrtSession>;

/** One session on this device: for one graph and one set of options, shared by its users. */
export class PooledSession {
  readonly key: string;
  /**
   * The graph's SHA-256 when it may be shared; null for a session of one executable's own (sharing off, saying why).
   */
  readonly graph: string | null;
  /** Why it is not shared (sharing off); null when it may be. */
  readonly unshared: string | null;
  session: OrtSession | null = null;
  readonly users = new Set<SessionUser>();
  /** What it held when it last opened, beside weights and shared activations. */
  bytes = 0;
  lastUsed = 0;
  /** Backend cuda with graphs: why its opener could not open it for graphs (it opened without). */
  graphsOff: string | null = null;
  /** Its inputs and outputs, read at its first open (known while it is closed). */
  inputs: readonly OrtTensorInfo[] = [];
  outputs: readonly OrtTensorInfo[] = [];
  readonly #opener: SessionOpener;

  constructor(key: string, graph: string | null, unshared: string | null, opener: SessionOpener) {
    this.key = key;
    this.graph = graph;
    this.unshared = unshared;
    this.#opener = opener;
  }

  get open(): boolean {
    return this.session !== null;
  }

  get pinned(): boolean {
    for (const u of this.users) if (u.pinned) return true;
    return false;
  }

  /** @internal the pool's: open it with its opener. */
  async openWith(reason: SessionOpenReason): Promise<OrtSession> {
    return this.#opener(reason);
  }

  /** How its status says it: shared with how many, or why it is not. */
  describe(): string {
    const graph = this.graph ? ` (graph ${this.graph.slice(0, 12)})` : '';
    const closed = this.open ? '' : ', closed until its next call';
    if (this.unshared) return `own session: ${this.unshared}${closed}`;
    return this.users.size > 1 ? `shared with ${this.users.size} models${graph}${closed}` : `own session, no other loaded model has its graph${graph}${closed}`;
  }
}

export interface SessionPoolOptions {
  /** Bytes the open sessions may hold beside weights (runtime.session_budget_bytes); 0: no budget. */
  budgetBytes: number;
  /** What the device holds now, to measure an open by (CPU: the C heap; GPU: the memory in use). */
  measure: () => number;
  now?: () => number;
}

export class SessionPool {
  readonly #o: SessionPoolOptions;
  readonly #now: () => number;
  readonly #byKey = new Map<string, PooledSession>();
  #clock = 0;
  readonly #opens: Record<SessionOpenReason, number> = { load: 0, reopen: 0 };
  readonly #closes: Record<SessionCloseReason, number> = { unload: 0, budget: 0, memory: 0 };
  #reopenMs = 0;

  constructor(options: SessionPoolOptions) {
    this.#o = options;
    this.#now = options.now ?? (() => performance.now());
  }

  get budgetBytes(): number {
    return this.#o.budgetBytes;
  }

  /** The session for `key`, if one is pooled. */
  get(key: string): PooledSession | undefined {
    return this.#byKey.get(key);
  }

  /**
   * `user` joins the session of `key` (made with `make` when none is pooled), which is opened if it
   * is not open (a load's open). The session is then the most recently used: the budget closes others.
   */
  async join(key: string, user: SessionUser, make: () => PooledSession): Promise<PooledSession> {
    let pooled = this.#byKey.get(key);
    if (!pooled) {
      pooled = make();
      this.#byKey.set(key, pooled);
    }
    pooled.users.add(user);
    try {
      await this.#ensureOpen(pooled, 'load');
    } catch (err) {
      this.leave(user, pooled);
      throw err;
    }
    return pooled;
  }

  /** `user` leaves its session; the last to leave closes it. */
  leave(user: SessionUser, pooled: PooledSession): void {
    pooled.users.delete(user);
    user.onClose();
    if (pooled.users.size > 0) return;
    if (pooled.session) this.#close(pooled, 'unload');
    this.#byKey.delete(pooled.key);
  }

  /**
   * Before a run (or warm-up) on `pooled`: open it again if the budget closed it, mark it used, and
   * close others beyond the budget. Answers the milliseconds its open took (0 when it was open).
   */
  async use(pooled: PooledSession): Promise<number> {
    pooled.lastUsed = ++this.#clock;
    if (pooled.session) return 0;
    const started = this.#now();
    await this.#ensureOpen(pooled, 'reopen');
    const ms = this.#now() - started;
    this.#reopenMs += ms;
    return ms;
  }

  /** Whether `pooled` is open (a model's call then pays no open: the scheduler's resident check). */
  isOpen(pooled: PooledSession | undefined): boolean {
    return pooled?.session != null;
  }

  report(): SessionsReport {
    let open = 0;
    let users = 0;
    let bytes = 0;
    for (const p of this.#byKey.values()) {
      users += p.users.size;
      if (p.session) {
        open++;
        bytes += p.bytes;
      }
    }
    return { open, sessions: this.#byKey.size, users, bytes, budgetBytes: this.#o.budgetBytes, opens: { ...this.#opens }, closes: { ...this.#closes }, reopenMs: this.#reopenMs };
  }

  /** Bytes the open sessions hold. */
  get openBytes(): number {
    let bytes = 0;
    for (const p of this.#byKey.values()) if (p.session) bytes += p.bytes;
    return bytes;
  }

  /**
   * Open `pooled` unless it is open, measuring what it holds, then close others beyond the budget.
   * An open that runs out of memory closes the least recently used idle session and tries once more.
   */
  async #ensureOpen(pooled: PooledSession, reason: SessionOpenReason): Promise<void> {
    pooled.lastUsed = ++this.#clock;
    if (pooled.session) return;
    const before = this.#o.measure();
    let session: OrtSession;
    try {
      session = await pooled.openWith(reason);
    } catch (err) {
      if (!isOutOfMemory(err) || !this.#closeOne(pooled, 'memory')) throw err;
      session = await pooled.openWith(reason);
    }
    pooled.session = session;
    pooled.bytes = Math.max(0, this.#o.measure() - before);
    if (pooled.inputs.length === 0 && pooled.outputs.length === 0) {
      pooled.inputs = session.inputs;
      pooled.outputs = session.outputs;
    }
    this.#opens[reason]++;
    this.#fitBudget(pooled);
  }

  /** Close idle sessions, least recently used first, until the open ones fit the budget (`keep` stays). */
  #fitBudget(keep: PooledSession): void {
    if (this.#o.budgetBytes <= 0) return;
    while (this.openBytes > this.#o.budgetBytes) {
      if (!this.#closeOne(keep, 'budget')) return; // what is left is pinned or in use: over budget it stays
    }
  }

  /**
   * Close the least recently used open session other than `keep` that no `residency: device` model pins; false when
   * there is none.
   */
  #closeOne(keep: PooledSession, reason: SessionCloseReason): boolean {
    let victim: PooledSession | undefined;
    for (const p of this.#byKey.values()) {
      if (p === keep || !p.session || p.pinned) continue;
      if (!victim || p.lastUsed < victim.lastUsed) victim = p;
    }
    if (!victim) return false;
    this.#close(victim, reason);
    return true;
  }

  #close(pooled: PooledSession, reason: SessionCloseReason): void {
    for (const u of pooled.users) u.onClose();
    pooled.session!.release();
    pooled.session = null;
    this.#closes[reason]++;
  }
}

/** The error for a session that cannot open again on a call, when memory is what ran out. */
export function reopenExhausted(model: string, err: unknown): Error {
  return isOutOfMemory(err)
    ? errors.deviceMemoryExhausted(model, `its session was closed under runtime.session_budget_bytes and could not open again: memory ran out even after closing another idle session (${(err as Error).message}); the model stays READY and its next call tries again`)
    : (err as Error);
}

/** One ONNX file of a loaded model as it runs here: the session of its graph, and its own binding on it. */
export class Executable implements SessionUser {
  readonly model: string;
  readonly instance: InstanceKey;
  readonly file: ExecutableFile;
  /** Its compile cache entry; null when the weight cache is off (the file opens as it is). */
  readonly compiled: CompiledExecutable | null;
  /** The weights it is fed (empty when they are embedded). */
  readonly weights: readonly WeightEntry[];
  /** Whether the compiled form came from the cache directory. */
  readonly cacheHit: boolean;
  /** The session it runs on, shared with the other executables of its graph; set when it joins. */
  pooled!: PooledSession;
  /** Its binding on the session while the session is open (made at its first use after an open). */
  binding: OrtBinding | null = null;
  /**
   * The residency epoch its weights are bound for: bound again when it changes (weights moved), or in a new binding.
   */
  boundEpoch?: number;
  /**
   * The outputs whose every axis but the batch one the graph fixes: their shape is known before a
   * run, so ONNX Runtime can write them into memory given to it (a shared-memory slice). An axis the
   * graph leaves symbolic has only the manifest's word for its size, which nothing checks.
   */
  shapedOutputs: ReadonlySet<string> = new Set();
  /** Backend cuda with runtime.cuda.graphs: its CUDA graphs (on, or off saying why); null otherwise. */
  graphs: CudaGraphs | null = null;
  /**
   * The one batch size its session runs at, a dynamic file opened per size (runtime.session_per_batch_size); null
   * otherwise.
   */
  runSize: number | null = null;
  readonly #pinned: () => boolean;

  constructor(spec: ModelSpec, instance: InstanceKey, file: ExecutableFile, compiled: CompiledExecutable | null, pinned: () => boolean) {
    this.model = spec.name;
    this.instance = instance;
    this.file = file;
    this.compiled = compiled;
    this.weights = compiled?.weights ?? [];
    this.cacheHit = compiled?.hit ?? false;
    this.#pinned = pinned;
  }

  get pinned(): boolean {
    return this.#pinned();
  }

  /** Its session closed (the budget, or it left): its binding goes, and its graphs' buffers. */
  onClose(): void {
    this.binding?.release();
    this.binding = null;
    this.boundEpoch = undefined;
    this.graphs?.release();
  }

  /** What runs it: its binding on its open session (pool.use first). */
  get runs(): OrtBinding {
    const session = this.pooled.session;
    if (!session) throw errors.internal(`model ${this.model}: its session is closed (it must be opened before a run)`);
    this.binding ??= session.createBinding();
    return this.binding;
  }

  /** Its session, open (pool.use first): to terminate its run. */
  get session(): OrtSession {
    const session = this.pooled.session;
    if (!session) throw errors.internal(`model ${this.model}: its session is closed`);
    return session;
  }
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
  /**
   * Backend cuda: the CUDA provider on this device with these options (and the GPU's shared arena or not); null on the
   * CPU.
   */
  cuda: { deviceId: number; options: Record<string, string>; sharedArena?: boolean } | null;
  /** Backend cuda: open for CUDA graphs (runtime.cuda.graphs). */
  graphs?: boolean;
  /** Backend cpu: activations from the process's one CPU arena, memory patterns off (runtime.share_activations). */
  sharedActivations: boolean;
  /** The device's sessions. */
  sessions: SessionPool;
  /** Why sessions are not shared on this device (runtime.share_sessions false); null when they may be. */
  sharingOff: string | null;
  /** The compile cache directory, to compile a file again when its entry is gone at a reopen. */
  cacheDir: string | null;
}

function sessionOptions(options: OpenOptions, level: 'basic' | 'all'): OrtSessionOptions {
  return {
    ...(options.cuda ? { cuda: options.cuda } : {}),
    graphOptimizationLevel: level,
    ...(options.sharedThreadPool ? { useGlobalThreadPool: true } : { intraOpThreads: Math.max(0, options.intraOpThreads) }),
    // One arena for every session's activations: with memory patterns on, a session's runs at a
    // shape it has run before take one block planned for them, which the shared arena cannot carve
    // from the pieces other runs freed (ResNet-50 at batch 32: 483 MB reserved against 303 MB
    // without, at the same speed: docs/weight-cache.md).
    ...(options.sharedActivations ? { useEnvAllocators: true, memoryPattern: false } : {}),
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

/** Why this file's session is its own, or null when it may be shared. */
function unsharedBecause(compiled: CompiledExecutable | null, options: OpenOptions): string | null {
  if (compiled === null) return 'sharing off: the weight cache is off (runtime.weight_cache_fraction: 0), so its weights are in its session';
  if (PROFILE_DIR) return 'sharing off: profiling (STOWAGE_ORT_PROFILE) writes one profile per model';
  return options.sharingOff;
}

/**
 * What makes two executables' sessions interchangeable: the weightless graph's SHA-256, the
 * optimisation level, every provider option (per-model ones such as tf32 included), CUDA graphs
 * on or off, and the one batch size a session per batch size runs at (null: every size). The
 * device's own settings (threads, backend, shared activations) are the same for all.
 */
export function sharingKey(graph: string, level: string, options: Pick<OpenOptions, 'cuda' | 'graphs'>, runSize: number | null = null): string {
  const cuda = options.cuda ? Object.entries(options.cuda.options).sort(([a], [b]) => a.localeCompare(b)) : null;
  return createHash('sha256').update(JSON.stringify({ graph, level, cuda, sharedArena: options.cuda?.sharedArena ?? false, graphs: options.graphs ?? false, runSize })).digest('hex');
}

const sha256 = (bytes: Uint8Array) => createHash('sha256').update(bytes).digest('hex');

/**
 * ONNX Runtime's 'all' optimisation of `source` saved to `target`, through this thread's binding (the compiler's work,
 * done here).
 */
function optimiseHere(cuda: boolean) {
  return async (source: string, target: string): Promise<void> => {
    const session = OrtSession.open(source, { graphOptimizationLevel: cuda ? 'basic' : 'all', optimizedModelFilePath: target, intraOpThreads: 1, allowSpinning: false, logSeverityLevel: 3 });
    session.release();
  };
}

/**
 * Where the graph of `pooled` opens from: the first of its executables' compile cache entries whose
 * graph.onnx is still there and still hashes to the graph. When none is (the cache was cleared
 * while the session was closed), a reopen compiles the first executable's file again, here; a load
 * opens the new executable's entry as it is (and fails as before: loads compile on the compiler).
 */
async function graphSource(pooled: PooledSession, users: readonly Executable[], options: OpenOptions, reason: SessionOpenReason, own: string): Promise<string> {
  for (const e of users) {
    const p = e.compiled?.graphPath;
    if (p && existsSync(p) && (pooled.graph === null || sha256(readFileSync(p)) === pooled.graph)) return p;
  }
  const first = users[0];
  if (reason === 'load' || !first?.compiled || !options.cacheDir) return own;
  let again: CompiledExecutable;
  try {
    again = await compileExecutable(first.file.path, { cacheDir: options.cacheDir, runtime: runtimeName(initOrt(), options.cuda ? 'cuda' : 'cpu'), optimise: optimiseHere(options.cuda !== null) });
  } catch (err) {
    throw errors.modelNotReady(first.model, 'UNAVAILABLE', `its session was closed and its compile cache entry is gone; compiling ${first.file.path} again failed: ${(err as Error).message}`);
  }
  const sameWeights = again.weights.length === first.weights.length && again.weights.every((w, i) => w.key === first.weights[i].key && w.name === first.weights[i].name);
  if ((pooled.graph !== null && again.graph !== pooled.graph) || !sameWeights) {
    throw errors.modelNotReady(first.model, 'UNAVAILABLE', `its session was closed and its compile cache entry is gone; compiling ${first.file.path} again gave another graph or other weights (has the file changed?): load the model again`);
  }
  return again.graphPath;
}

/**
 * Open one ONNX file of a bundle on its session (shared with the loaded executables of the same
 * graph and options, or opened now) and check it against the manifest. `compiled` is the file's
 * entry in the compile cache (the compiler made it, off this thread): its weightless graph opens in
 * about a millisecond. Null when the weight cache is off: the file opens as it is, weights
 * embedded, at full optimisation. `pinned` says whether the model's residency is `device` now.
 */
export async function openExecutable(spec: ModelSpec, instance: InstanceKey, file: ExecutableFile, compiled: CompiledExecutable | null, options: OpenOptions, pinned: () => boolean,
  runSize: number | null = null): Promise<Executable> {
  // On the CPU the compiled graph is optimised already: 'basic' only folds what the split left
  // constant, in about a millisecond. For CUDA the compiler stopped at the provider-neutral level:
  // 'all' here makes the CUDA provider's own fusions. Without the weight cache the file opens as it is.
  const level = compiled === null || options.cuda ? 'all' : 'basic';
  const unshared = unsharedBecause(compiled, options);
  // A dynamic file opened for one batch size (runSize: runtime.session_per_batch_size) has a session
  // of its own for that size, shared only with other models' sessions of its graph at that size.
  const key = unshared !== null ? `own ${instance} ${file.path}${runSize === null ? '' : ` b${runSize}`}` : sharingKey(compiled!.graph, level, options, runSize);
  const executable = new Executable(spec, instance, file, compiled, pinned);
  executable.runSize = runSize;
  const make = () => {
    const pooled: PooledSession = new PooledSession(key, unshared === null ? compiled!.graph : null, unshared, async (reason) => {
      const users = [...pooled.users] as Executable[];
      const source = compiled === null ? file.path : await graphSource(pooled, users, options, reason, compiled.graphPath);
      // CUDA graphs: ONNX Runtime refuses enable_cuda_graph at creation when a node of the graph
      // runs on the CPU; such a model opens without it and runs as before, saying why.
      if (options.cuda && options.graphs) {
        try {
          // With an arena of its own: a graph replays into the addresses it captured (config-schema.ts shared_arena).
          return OrtSession.open(source, profiled(spec, file, sessionOptions({ ...options, cuda: { ...options.cuda, sharedArena: false, options: { ...options.cuda.options, enable_cuda_graph: '1' } } }, level)));
        } catch (err) {
          pooled.graphsOff = `ONNX Runtime cannot capture it: ${(err as Error).message}`;
        }
      }
      return createSession(spec, file, source, sessionOptions(options, level));
    });
    return pooled;
  };
  const pooled = await options.sessions.join(key, executable, make);
  executable.pooled = pooled;
  try {
    const weightNames = new Set(executable.weights.map((w) => w.name));
    const inputs = pooled.inputs.map(asGraphTensor).filter((t) => !weightNames.has(t.name));
    const outputs = pooled.outputs.map(asGraphTensor);
    checkSignature(spec, file, inputs, outputs);
    executable.shapedOutputs = new Set(spec.outputs.filter((t) => {
      const shape = outputs.find((g) => g.name === t.name)?.shape ?? [];
      return shape.every((d, i) => i === t.batchDim || (typeof d === 'number' && d >= 0));
    }).map((t) => t.name));
    if (options.cuda && options.graphs) {
      // The batch sizes it runs at: its own (a per-size file, or the one its session is for), the
      // compiled ones (dynamic), or 0 (unbatched).
      const own = file.batchSize ?? runSize;
      const sizes = own !== null ? [own] : spec.batchAxis === null ? [0] : spec.compiledBatchSizes;
      const off = pooled.graphsOff ?? graphRefusal(spec.inputs, spec.outputs, executable.shapedOutputs);
      // Its session is its own: with graphs on, sessions are not shared (models.ts sharingOff).
      executable.graphs = new CudaGraphs(() => executable.runs, spec.inputs, spec.outputs, `cuda:${options.cuda.deviceId}`, sizes, off);
    }
  } catch (err) {
    options.sessions.leave(executable, pooled);
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
 * Bind a weightless executable's weights to their bytes on the device (`view` gives a tensor's
 * bytes in the arena) in its own binding, once per residency: a later run reads them there, and
 * they are bound again only when the model's epoch says they moved, or its session was reopened.
 */
export function bindWeights(executable: Executable, epoch: number, view: (key: string) => Uint8Array | DeviceSlice): void {
  const runs = executable.runs;
  if (executable.boundEpoch === epoch) return;
  runs.unbindInputs();
  for (const w of executable.weights) {
    runs.bindInput({ name: w.name, type: dtypeInfo(w.datatype).onnxType, dims: w.dims, data: view(w.key) });
  }
  executable.boundEpoch = epoch;
}
