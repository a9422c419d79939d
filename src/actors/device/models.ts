/**
 * The models loaded on one device, on the device thread: their executables (on
 * sessions shared by graph: sessions.ts), their scheduling policy and where their
 * weights live. Loads arrive compiled (the compiler thread did the slow part), so
 * a load here opens weightless sessions, about a millisecond each (none when a
 * loaded model has the same graph), and the dispatch loop barely pauses.
 *
 * Policy and residency belong to the main thread (node/model-policies.ts):
 * each load brings the model's policy as it stands, and a change reaches the
 * loaded instances as setPolicy / setResidency. Nothing here outlives a load.
 */
import type { DeviceCalls, DeviceInit, HostUpdate, InferCommand, InstanceStatus, SchedulingPolicy, WarmupOutcome, WeightLoad, WeightMemory } from '../../shared/channels/device.js';
import { nowMs } from '../../shared/timers.js';
import { errors } from '../../shared/errors.js';
import { modelOf, type InstanceKey, type ModelSpec } from '../../shared/model-spec.js';
import type { CostModel } from '../../shared/backlog.js';
import { bindWeights, openExecutable, tensorSources, type Executable, type OpenOptions, type SessionPool } from './sessions.js';
import { graphStatus } from './cuda-graphs.js';
import { warmUp } from './warmup.js';
import type { QueuePolicy, Scheduler } from './scheduler.js';
import type { HostBuffer, ResidencyOutcome, TensorSource, WeightCache } from './weight-cache.js';
import type { SessionMemory } from './session-memory.js';

export interface LoadedModel {
  spec: ModelSpec;
  /** Executables by compiled batch size; key 0 is the single dynamic-batch one. */
  executables: Map<number, Executable>;
  /** Position of the batch axis in each input and output tensor, by name (-1: none). */
  batchDims: Map<string, number>;
}

/**
 * Host RAM for one control call: the main thread's shared buffers on offer, and those this
 * device had to read from disk itself (reported back so the other devices can use them).
 */
class HostOffer {
  readonly created: Record<string, SharedArrayBuffer> = {};
  readonly #offered: Record<string, SharedArrayBuffer>;

  constructor(offered: Record<string, SharedArrayBuffer>) {
    this.#offered = offered;
  }

  readonly buffer: HostBuffer = (source: TensorSource) => {
    const offered = this.#offered[source.key];
    if (offered) return { bytes: new Uint8Array(offered), fresh: false };
    const buffer = new SharedArrayBuffer(source.byteLength);
    this.created[source.key] = buffer;
    return { bytes: new Uint8Array(buffer), fresh: true };
  };
}

/**
 * Why this device's sessions are each a model's own, or null when models of one graph share one.
 * With CUDA graphs on, sharing is off: a captured graph belongs to its session (ONNX Runtime frees
 * it only with the session) and replays the addresses of the weights bound when it was captured,
 * one model's. Turned off per shared session instead, as first built, every model of a catalog of
 * one graph ran without graphs (the GPU suite's graph tests, H200, 2026-11-28).
 */
export function sharingOff(init: Pick<DeviceInit, 'sessions' | 'cuda'>): string | null {
  if (!init.sessions.share) return 'sharing off: runtime.share_sessions is false';
  if (init.cuda?.graphs) return 'sharing off: runtime.cuda.graphs is on (a captured graph is its session\'s and replays one model\'s weights)';
  return null;
}

export class DeviceModels {
  /** Loaded model versions by instance key. */
  readonly #loaded = new Map<InstanceKey, LoadedModel>();
  readonly #init: DeviceInit;
  readonly #scheduler: Scheduler<InferCommand>;
  readonly #costs: CostModel;
  /** The device's weights; null when the cache is off. */
  readonly weightCache: WeightCache<InstanceKey> | null;
  readonly #warn: (message: string, fields: Record<string, number | string>) => void;
  /** Backend cuda: the GPU memory each model's sessions take; null on the CPU. */
  readonly sessionMemory: SessionMemory<InstanceKey> | null;
  /** The device's sessions, shared by graph and opened on demand. */
  readonly sessions: SessionPool;

  constructor(init: DeviceInit, scheduler: Scheduler<InferCommand>, costs: CostModel, weightCache: WeightCache<InstanceKey> | null, warn: (message: string, fields: Record<string, number | string>) => void, sessions: SessionPool, sessionMemory: SessionMemory<InstanceKey> | null = null) {
    this.#init = init;
    this.sessions = sessions;
    this.#scheduler = scheduler;
    this.#costs = costs;
    this.weightCache = weightCache;
    this.#warn = warn;
    this.sessionMemory = sessionMemory;
  }

  get(instance: InstanceKey): LoadedModel | undefined {
    return this.#loaded.get(instance);
  }

  /** The model's name, for messages (the scheduler knows instances; clients know names). */
  nameOf(instance: InstanceKey): string {
    return this.#loaded.get(instance)?.spec.name ?? modelOf(instance);
  }

  memory(): WeightMemory | null {
    const cache = this.weightCache;
    if (!cache) return null;
    return { residentBytes: cache.residentBytes, logicalBytes: cache.logicalResidentBytes, budgetBytes: cache.budget };
  }

  /** Its executables' CUDA graphs, as its status says them (batch sizes each); null without graphs. */
  static graphStatus(executables: Iterable<Executable>): string | null {
    const summaries = [...executables].flatMap((e) => (e.graphs ? [e.graphs.summary] : []));
    return summaries.length ? graphStatus(summaries) : null;
  }

  /** How the scheduler queues a model under `policy`. */
  static queuePolicy(spec: ModelSpec, policy: SchedulingPolicy): QueuePolicy {
    return {
      weight: policy.weight,
      // The node file's level for the model, else its manifest's, else the device's default (scheduler.ts).
      ...((policy.priority ?? spec.priority) === undefined ? {} : { priority: policy.priority ?? spec.priority }),
      // Most rows one execution may carry; 1 when there is no batch axis to concatenate along.
      maxBatchRows: spec.batchAxis === null ? 1 : Math.min(spec.maxBatchSize, policy.maxBatchSize ?? Infinity),
    };
  }

  /** The cache's outcome as the main thread reports it (instances become model names); thrash is warned of. */
  weightLoad(outcome: ResidencyOutcome<InstanceKey>): WeightLoad {
    if (outcome.thrash) {
      const t = outcome.thrash;
      const device = this.#init.deviceId;
      this.#warn(
        `weight cache thrashing on device ${device}: the ${t.models} models used in the last ${t.windowSeconds} s need ${t.bytes} bytes of weights, more than the budget of ${t.budget}; raise runtime.cpu_device_memory_bytes or spread the models over more devices`,
        { device, models: t.models, bytes: t.bytes, budget: t.budget, windowSeconds: t.windowSeconds });
    }
    return {
      hit: outcome.hit, loadedBytes: outcome.loadedBytes, diskBytes: outcome.diskBytes, loadMs: outcome.loadMs,
      ...(outcome.hiddenMs === undefined ? {} : { hiddenMs: outcome.hiddenMs }),
      evicted: outcome.evicted.map((i) => this.nameOf(i)),
    };
  }

  /** How this device opens a model's executables under `policy` (its tf32 among the provider options). */
  #openOptions(policy: DeviceCalls['load']['request']['policy']): OpenOptions {
    const init = this.#init;
    const cuda = init.cuda ? { deviceId: init.cuda.ordinal, sharedArena: init.cuda.sharedArena, options: { ...init.cuda.providerOptions, ...(policy.tf32 === undefined ? {} : { use_tf32: policy.tf32 ? '1' : '0' }) } } : null;
    return {
      intraOpThreads: init.intraOpThreads, sharedThreadPool: init.threadPool === 'process', cuda, graphs: init.cuda?.graphs ?? false,
      sharedActivations: init.sessions.sharedActivations, sessions: this.sessions, sharingOff: sharingOff(init),
      cacheDir: init.weights?.cacheDir ?? null,
    };
  }

  /**
   * The batch sizes a dynamic-batch file gets a session each for (runtime.session_per_batch_size),
   * those no per-size file of the bundle covers; null: the file opens once, as it is. A run then
   * goes to the smallest of them its rows fit (execution.ts executableFor), so no session ever
   * changes shape, which costs ONNX Runtime's CUDA Conv a new cuDNN plan per node each time.
   */
  #sessionSizes(spec: ModelSpec, fileBatch: number | null): number[] | null {
    if (!this.#init.sessions.perBatchSize || fileBatch !== null || spec.batchAxis === null || spec.compiledBatchSizes.length < 2) return null;
    const ownFiles = new Set(spec.executables.map((f) => f.batchSize));
    return spec.compiledBatchSizes.filter((size) => !ownFiles.has(size));
  }

  /**
   * Whether `instance`'s residency is `device` now (its sessions then stay open): every model's when the cache is off.
   */
  #pinned(instance: InstanceKey, residency: string): () => boolean {
    return () => (this.weightCache ? (this.weightCache.residencyOf(instance) ?? residency) === 'device' : true);
  }

  /** Its executables leave their sessions (the last to leave a session closes it). */
  #leave(executables: Iterable<Executable> | undefined): void {
    for (const e of executables ?? []) if (e.pooled) this.sessions.leave(e, e.pooled);
  }

  async load({ instance, spec, policy, compiled, hostOffer }: DeviceCalls['load']['request']): Promise<DeviceCalls['load']['reply']> {
    const started = nowMs();
    const opened = new Map<number, Executable>();
    const host = new HostOffer(hostOffer);
    const cache = this.weightCache;
    const memory = this.sessionMemory;
    const freeBefore = memory?.free() ?? 0;
    // The GPU ran out: say where its memory went rather than ONNX Runtime's bare words.
    const outOfMemory = (err: unknown, doing: string) => memory?.exhausted(spec.name, doing, err) ?? null;
    let outcome: ResidencyOutcome<InstanceKey> | undefined;
    try {
      if (cache && !compiled) throw errors.internal(`model ${spec.name} reached device ${this.#init.deviceId} uncompiled while its weight cache is on`);
      const options = this.#openOptions(policy);
      const pinned = this.#pinned(instance, policy.residency);
      for (const [i, file] of spec.executables.entries()) {
        const entry = cache ? compiled![i] : null;
        const sizes = this.#sessionSizes(spec, file.batchSize);
        if (sizes === null) opened.set(file.batchSize ?? 0, await openExecutable(spec, instance, file, entry, options, pinned));
        else for (const size of sizes) opened.set(size, await openExecutable(spec, instance, file, entry, options, pinned, size));
      }
      // A `device` model comes on now, and fails its load if it cannot fit.
      outcome = cache?.add(instance, spec.name, policy.residency, tensorSources(opened.values()), host.buffer);
    } catch (err) {
      this.#leave(opened.values());
      throw outOfMemory(err, 'opening its sessions') ?? err;
    }
    // Warm-up before ready: the model comes on (if it is not on already) and runs once per batch size.
    let warmup: WarmupOutcome | null = null;
    if (policy.warmup ?? this.#init.warmup) {
      try {
        const residency = cache?.ensureResident(instance);
        outcome = outcome ?? residency;
        warmup = await warmUp(spec, opened, async (e) => {
          await this.sessions.use(e.pooled);
          if (cache) bindWeights(e, cache.epoch(instance), (key) => cache.deviceData(key));
        }, this.#init.cuda !== null, () => cache?.epoch(instance) ?? 0);
      } catch (err) {
        cache?.remove(instance);
        this.#leave(opened.values());
        const exhausted = outOfMemory(err, 'warming it up');
        if (exhausted) throw exhausted;
        const on = Object.keys(spec.warmupData).length > 0 ? `the bundle's warm-up data (warmup.data: ${Object.keys(spec.warmupData).join(', ')})` : 'zeros';
        throw errors.bundleInvalid(spec.name, 'model.onnx', `its warm-up run on ${on} failed (set scheduler.models.${spec.name}.warmup: false to skip it): ${(err as Error).message}`);
      }
    }
    // Measured after the warm-up, so the activations of every warmed batch size are in it.
    const sessionDeviceBytes = memory ? memory.record(instance, freeBefore) : null;
    const previous = this.#loaded.get(instance); // only after a crash reload of the same instance
    const batchDims = new Map([...spec.inputs, ...spec.outputs].map((t) => [t.name, t.batchDim]));
    this.#loaded.set(instance, { spec, executables: opened, batchDims });
    this.#scheduler.setModel(instance, DeviceModels.queuePolicy(spec, policy));
    this.#leave(previous?.executables.values());
    const executables = [...opened.values()];
    return {
      loadMs: nowMs() - started,
      compiled: { files: cache ? spec.executables.length : 0, cacheHits: spec.executables.filter((f) => executables.some((e) => e.file === f && e.cacheHit)).length },
      weightBytes: cache?.weightBytes(instance) ?? 0,
      memory: this.memory(),
      load: outcome ? this.weightLoad(outcome) : null,
      host: this.#hostUpdate(host, [instance]),
      warmup,
      sessionDeviceBytes,
      cudaGraphs: DeviceModels.graphStatus(executables),
      session: DeviceModels.sessionStatus(executables),
    };
  }

  /** Which session each of its executables runs on: shared with how many models, or why its own. */
  static sessionStatus(executables: Iterable<Executable>): string {
    return [...new Set([...executables].map((e) => (e.runSize === null ? '' : `batch ${e.runSize}: `) + e.pooled.describe()))].join('; ');
  }

  /** Its share of its sessions' bytes: each open session's bytes over the executables on it. */
  static sessionShare(executables: Iterable<Executable>): number {
    let bytes = 0;
    for (const e of executables) if (e.pooled.open) bytes += e.pooled.bytes / e.pooled.users.size;
    return Math.round(bytes);
  }

  /** Free an instance; its queued requests are answered UNAVAILABLE by `failQueued`. */
  async unload(instance: InstanceKey, failQueued: (tickets: readonly { id: number }[], name: string) => void): Promise<DeviceCalls['unload']['reply']> {
    const model = this.#loaded.get(instance);
    this.#loaded.delete(instance);
    failQueued(this.#scheduler.removeModel(instance), model?.spec.name ?? instance);
    this.weightCache?.remove(instance);
    this.sessionMemory?.forget(instance);
    this.#leave(model?.executables.values());
    return { memory: this.memory() };
  }

  status(): InstanceStatus[] {
    const cache = this.weightCache;
    return [...this.#loaded].map(([instance, m]) => ({
      instance,
      model: m.spec.name,
      queued: this.#scheduler.queuedFor(instance),
      refusedRows: this.#scheduler.refusedRowsFor(instance),
      costs: this.#costs.snapshot(instance),
      ...this.#scheduler.policyOf(instance)!,
      residency: cache?.residencyOf(instance) ?? 'device',
      resident: cache ? cache.isResident(instance) : true,
      weightBytes: cache?.weightBytes(instance) ?? 0,
      sessionDeviceBytes: this.sessionMemory?.of(instance) ?? null,
      cudaGraphs: DeviceModels.graphStatus(m.executables.values()),
      session: DeviceModels.sessionStatus(m.executables.values()),
      sessionBytes: DeviceModels.sessionShare(m.executables.values()),
      sessionOpen: [...m.executables.values()].every((e) => e.pooled.open),
    }));
  }

  setPolicy(model: string, policy: SchedulingPolicy): void {
    for (const [instance, m] of this.#loaded) {
      if (m.spec.name === model) this.#scheduler.setModel(instance, DeviceModels.queuePolicy(m.spec, policy));
    }
  }

  /** Change where a model's weights live at rest, on every loaded version of it; all or nothing. */
  async setResidency({ model, residency, hostOffer }: DeviceCalls['setResidency']['request']): Promise<DeviceCalls['setResidency']['reply']> {
    const cache = this.weightCache;
    if (!cache) throw errors.unsupported('SetModelResidency needs the on-demand weight cache, which is off (runtime.weight_cache_fraction is 0): every model is resident');
    const host = new HostOffer(hostOffer);
    const instances = [...this.#loaded].filter(([, m]) => m.spec.name === model).map(([i]) => i);
    const previous = instances.map((i) => [i, cache.residencyOf(i) ?? residency] as const);
    try {
      for (const instance of instances) cache.setResidency(instance, residency, host.buffer);
    } catch (err) {
      for (const [instance, was] of previous) cache.setResidency(instance, was, host.buffer);
      throw err;
    }
    // A `device` model keeps its sessions open: those the budget had closed open now.
    if (residency === 'device') for (const instance of instances) await this.#openSessions(instance);
    return { memory: this.memory(), host: this.#hostUpdate(host, instances) };
  }

  /**
   * Best effort: its sessions open (if the budget closed them) and its weights on the device; a model
   * that cannot come on now comes on with its first request instead.
   */
  async prefetch(instance: InstanceKey): Promise<DeviceCalls['prefetch']['reply']> {
    await this.#openSessions(instance);
    const outcome = this.weightCache?.has(instance) ? this.weightCache.ensureResident(instance) : undefined;
    return { load: outcome ? this.weightLoad(outcome) : null, memory: this.memory() };
  }

  /** Whether every session of `instance` is open: a call then pays no session open (the scheduler's resident check). */
  sessionsOpen(instance: InstanceKey): boolean {
    const m = this.#loaded.get(instance);
    if (!m) return true;
    for (const e of m.executables.values()) if (!e.pooled.open) return false;
    return true;
  }

  /** Open the sessions the budget closed, best effort (a failure here is the next call's to meet). */
  async #openSessions(instance: InstanceKey): Promise<void> {
    for (const e of this.#loaded.get(instance)?.executables.values() ?? []) {
      try {
        await this.sessions.use(e.pooled);
      } catch {
        return;
      }
    }
  }

  compact(): DeviceCalls['compact']['reply'] {
    if (!this.weightCache) throw errors.unsupported('CompactMemory needs the on-demand weight cache, which is off (runtime.weight_cache_fraction is 0)');
    return { movedBytes: this.weightCache.compact(), memory: this.memory() };
  }

  /** What changed in host RAM: buffers read here, and which tensors each instance now keeps there. */
  #hostUpdate(host: HostOffer, instances: InstanceKey[]): HostUpdate {
    const cache = this.weightCache;
    return { created: host.created, holdings: (cache ? instances : []).map((instance) => ({ instance, keys: cache!.hostKeys(instance) })) };
  }
}
