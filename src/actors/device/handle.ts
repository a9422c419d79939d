/**
 * The main thread's handle on one device actor (a worker thread running
 * worker.ts). Its interface is small: `load`, `unload`, `infer`,
 * `inflight`, `stop`.
 *
 * Every pending call settles in exactly one of three ways: the worker's reply,
 * its own timer (the request's deadline, or a load timeout), or the worker
 * exiting, which rejects every pending call with UNAVAILABLE. A worker that
 * exits unexpectedly is replaced and the models it held are loaded again
 * before anything else runs there (the worker serves its inbox in order),
 * each with its policy as the owner (ModelPolicies) has it then; a worker
 * that keeps dying without serving is given up on.
 *
 * Requests go through a door of the handle's own to each worker (door.ts), as an edge thread's
 * do through its: the device sees every request come through a door, and only control calls on the
 * worker's port. A worker's door opens once it serves with its models loaded; until then (a
 * replacement reloading them) requests wait in the door, in order, within their deadlines.
 * `infer` transfers its inputs' ArrayBuffers to the worker (the caller must not touch them
 * afterwards); a request whose preprocess hook feeds the device directly goes without inputs
 * (`infer`'s `feedFromHook`; the hook thread sends them through its door, `adoptDoor`).
 *
 * Control messages to the worker wait in an outbox until the end of the event-loop turn and go as
 * one postMessage. Order is kept.
 */
import { MessageChannel, type MessagePort, type Transferable, type Worker } from 'node:worker_threads';
import type { Logger } from 'pino';
import { modelOf, type InstanceKey, type ModelSpec } from '../../shared/model-spec.js';
import { INLINE_RUN_BELOW_MS, DEVICE_MAX_CONSECUTIVE_CRASHES, DEVICE_START_TIMEOUT_MS, EXECUTION_WATCHDOG_MS, MODEL_LOAD_TIMEOUT_MS } from '../../shared/constants.js';
import { startWorker } from '../../shared/worker-start.js';
import { ConsecutiveCrashes } from '../../shared/restarts.js';
import { errors, fromErrorData, StowageError } from '../../shared/errors.js';
import type { CompiledModel } from '../../shared/channels/compiler.js';
import type { CudaDeviceInit, DeviceCall, DeviceClient, HookFeedTarget, DeviceCalls, DeviceCallType, DeviceInit, ExecutionReport, FromDevice, HostUpdate, DeviceScheduling, InstanceStatus, ModelPolicy, SessionsInit, ToDevice, WeightCacheInit, WeightLoad, WeightMemory } from '../../shared/channels/device.js';
import type { InferenceRequest, InferenceResult, RegionSlice } from '../../shared/channels/inference.js';
import { Outbox, PendingCalls } from '../../shared/thread-messages.js';
import { DeviceDoor } from './door.js';
import { Backlog } from '../../shared/backlog.js';

/** Lifecycle of a device actor. */
export enum DeviceState {
  /** The worker is starting (loading ONNX Runtime). */
  STARTING = 'STARTING',
  /** Serving. */
  READY = 'READY',
  /** The worker died; a replacement is starting and reloading the models. */
  RESTARTING = 'RESTARTING',
  /** Given up on after repeated crashes, or stopped: every call answers UNAVAILABLE. */
  DEAD = 'DEAD',
  /**
   * Its GPU's context is poisoned (a sticky CUDA error: out-of-service.ts): every call answers
   * UNAVAILABLE with why, and it is never restarted in this process.
   */
  OUT_OF_SERVICE = 'OUT_OF_SERVICE',
}


/** The owner of every model's policy (node/model-policies.ts), as a device handle reads it. */
export interface PolicySource {
  of(deviceId: number, model: string): ModelPolicy;
}

/** The process's host copies of weights (node/host-weights.ts), as a device handle uses them. */
export interface HostRam {
  /** Every buffer held now: what a device may use instead of reading the disk. */
  offer(): Record<string, SharedArrayBuffer>;
  /** Take in what a device read and which tensors each instance now keeps in host RAM. */
  update(update: HostUpdate): void;
}

/** What a load on a device cost, and which session it runs on (shared with how many, or why its own). */
export interface LoadOutcome {
  loadMs: number;
  weightBytes: number;
  session: string;
}

export interface DeviceHandleOptions {
  deviceId: number;
  intraOpThreads: number;
  /** runtime.inline_run_below_ms; INLINE_RUN_BELOW_MS when absent. */
  inlineRunBelowMs?: number;
  /** runtime.thread_pool; a pool per session when absent. */
  threadPool?: 'per_session' | 'process';
  scheduler: DeviceScheduling;
  /** Each model's policy; read when a load (or a change) is sent, never copied. */
  policies: PolicySource;
  /** The on-demand weight cache; null turns it off. */
  weights: WeightCacheInit | null;
  /** Backend cuda: the GPU (its CUDA ordinal) and the provider's settings; absent or null on backend cpu. */
  cuda?: CudaDeviceInit | null;
  /** Warm models up before they are ready (runtime.warmup resolved); off when absent. */
  warmup?: boolean;
  /** How sessions are shared and opened; absent: shared, activations shared on the CPU, no budget. */
  sessions?: SessionsInit;
  /** The process's host copies of weights, shared with the other device actors. */
  hostWeights?: HostRam;
  logger: Logger;
  /** Told of weight traffic: a model's load or hit (on execution and load), and the device memory after it. */
  onWeights?: (model: string, load: WeightLoad | null, memory: WeightMemory | null) => void;
  /** Told how many of a load's ONNX files the compile cache held already. */
  onCompiled?: (files: number, cacheHits: number) => void;
  /** Told of the device's executions, summed since its last report (statistics count executions from these alone). */
  onExecutions?: (report: ExecutionReport) => void;
  /** Told once when the device is taken out of service, with why and the CUDA error that said so. */
  onOutOfService?: (deviceId: number, reason: string, cudaError: number) => void;
  /**
   * Told when a replacement worker serves again, its models loaded again: edge doors to the worker
   * that died closed with it, and new ones may be opened (`openEdgeDoor`).
   */
  onServing?: (deviceId: number) => void;
  /**
   * Told when the worker ends while it serves, with why (its exit code): edges fail what was pending on their doors
   * saying so.
   */
  onExited?: (deviceId: number, why: string) => void;
  /**
   * Told when the device no longer holds an instance it was asked to (its replacement worker could
   * not load it again): nothing of that instance may be routed here any more, and it is not loaded
   * into later workers. A later load (a reload of the model) brings it back.
   */
  onLost?: (deviceId: number, instance: InstanceKey, why: string) => void;
  /** How long a worker may take to start; DEVICE_START_TIMEOUT_MS when absent (tests shorten it). */
  startTimeoutMs?: number;
  /** The worker script; tests substitute a fixture. */
  workerUrl?: URL;
}

const DEFAULT_WORKER_URL = new URL('./worker.js', import.meta.url);

/** How long each control call may take before the handle stops waiting. */
const CALL_TIMEOUT_MS: Record<DeviceCallType, number> = {
  load: MODEL_LOAD_TIMEOUT_MS,
  unload: MODEL_LOAD_TIMEOUT_MS,
  status: DEVICE_START_TIMEOUT_MS,
  setPolicy: DEVICE_START_TIMEOUT_MS,
  setResidency: MODEL_LOAD_TIMEOUT_MS,
  compact: MODEL_LOAD_TIMEOUT_MS,
  prefetch: MODEL_LOAD_TIMEOUT_MS,
  openCudaRegion: DEVICE_START_TIMEOUT_MS,
  reports: DEVICE_START_TIMEOUT_MS,
};

export class DeviceHandle implements DeviceClient {
  readonly deviceId: number;
  #options: DeviceHandleOptions;
  #worker!: Worker;
  #state = DeviceState.STARTING;
  /** Control calls sent and not yet settled. */
  readonly #pending = new PendingCalls();
  #nextId = 1;
  /** Messages for the worker not yet posted (see the header), and the buffers they transfer. */
  /** What this turn sends the worker, as one message at the turn's end. */
  readonly #outbox = new Outbox<ToDevice>((messages, transfer) => this.#worker.postMessage(messages, transfer));
  /** Loaded instances, their specs and compiled forms, to load again into a replacement worker. */
  #loaded = new Map<InstanceKey, { spec: ModelSpec; compiled: CompiledModel | null }>();
  readonly #crashes = new ConsecutiveCrashes(DEVICE_MAX_CONSECUTIVE_CRASHES);
  /** Why it is out of service (DeviceState.OUT_OF_SERVICE). */
  #outOfServiceWhy = '';
  #stopping = false;
  /** Workers started so far. */
  #generation = 0;
  /** The next door's link (HookInputs.link), from 1. Never reused: a request's hook inputs name their door. */
  #nextLink = 1;
  /**
   * This handle's own door to the current worker, its requests' way in: made with the worker, opened once it
   * serves. Its link is what hook threads' doors are made for (HookFeed.generation).
   */
  #door!: DeviceDoor;
  /** A replacement worker is loading the models again: no edge door opens until it has. */
  #reloading = false;

  private constructor(options: DeviceHandleOptions) {
    this.deviceId = options.deviceId;
    this.#options = options;
    this.backlog = new Backlog(Backlog.create(options.scheduler.priority_levels));
  }

  /** The device's predicted backlog, which its worker publishes (shared/backlog.ts): each worker writes it anew. */
  readonly backlog: Backlog;

  /** Start the worker and wait until ONNX Runtime is loaded in it. */
  static async create(options: DeviceHandleOptions): Promise<DeviceHandle> {
    const actor = new DeviceHandle(options);
    await actor.#spawn();
    actor.#openOwnDoor();
    return actor;
  }

  get state(): DeviceState {
    return this.#state;
  }

  /** The worker thread, for its heap statistics (stowage_thread_heap_bytes). */
  get thread(): Worker {
    return this.#worker;
  }

  /** Calls and requests sent to the worker and not yet settled. */
  get inflight(): number {
    return this.#pending.size + this.#door.inflight;
  }

  #spawn(): Promise<void> {
    const init: DeviceInit = { deviceId: this.deviceId, intraOpThreads: this.#options.intraOpThreads, inlineRunBelowMs: this.#options.inlineRunBelowMs ?? INLINE_RUN_BELOW_MS, threadPool: this.#options.threadPool ?? 'per_session', scheduler: this.#options.scheduler, weights: this.#options.weights, cuda: this.#options.cuda ?? null, warmup: this.#options.warmup ?? false,
      sessions: this.#options.sessions ?? { share: true, sharedActivations: !this.#options.cuda, budgetBytes: 0, perBatchSize: this.#options.cuda !== undefined && this.#options.cuda !== null }, backlog: this.backlog.memory };
    this.#generation++;
    this.#door?.close('its worker was replaced');
    // What is sent before the worker serves waits in its door (see the header).
    // It holds when gone: a request sent between its worker's end and the exit the handle hears fails with the
    // exit's why.
    this.#door = new DeviceDoor(this.deviceId, null, this.#nextLink++, this.waitBoundMs, () => undefined, { holdWhenGone: true });
    const door = this.#door;
    const startTimeoutMs = this.#options.startTimeoutMs ?? DEVICE_START_TIMEOUT_MS;
    const { worker, started } = startWorker<FromDevice, void>({
      url: this.#options.workerUrl ?? DEFAULT_WORKER_URL,
      name: `device-${this.deviceId}`,
      workerData: init,
      startTimeoutMs,
      onMessage: (msg, markStarted) => {
        if (msg.type !== 'started') return this.#settle(msg);
        this.#state = DeviceState.READY;
        markStarted();
      },
      onStartTimeout: (limitMs) => {
        // Given up on: what was sent to it (a replacement's reloads, requests) will never be
        // answered, so it fails now rather than at each call's own timer; its exit, later, is
        // no longer this handle's concern.
        const why = `its worker did not start within ${limitMs} ms`;
        this.#outbox.clear();
        this.#pending.failAll(errors.deviceUnavailable(this.deviceId, why));
        door.close(why);
        return errors.deviceUnavailable(this.deviceId, why);
      },
      exitedBeforeStart: (code, lastError) => errors.deviceUnavailable(this.deviceId, this.#exitWhy(code, lastError)),
      onExit: (code, lastError, hadStarted) => {
        if (worker !== this.#worker) return;
        // What was queued for this worker dies with it (its calls are failed just below).
        this.#outbox.clear();
        const why = this.#exitWhy(code, lastError);
        this.#pending.failAll(errors.deviceUnavailable(this.deviceId, why));
        door.close(why);
        this.#options.onExited?.(this.deviceId, why);
        if (hadStarted) this.#onCrash(why);
      },
    });
    this.#worker = worker;
    return started;
  }

  #exitWhy(code: number, lastError: Error | undefined): string {
    return this.#stopping ? 'the server is stopping' : `its worker exited (code ${code}${lastError ? `: ${lastError.message}` : ''})`;
  }

  /**
   * The device's GPU context is poisoned: what it had pending fails with why, nothing more is sent
   * to it, and it is never restarted (a new worker thread would inherit the same context).
   */
  #outOfService(reason: string, cudaError: number): void {
    if (this.#state === DeviceState.OUT_OF_SERVICE || this.#state === DeviceState.DEAD) return;
    this.#state = DeviceState.OUT_OF_SERVICE;
    this.#outOfServiceWhy = reason;
    this.#options.logger.error({ device: this.deviceId, cudaError }, `device taken out of service: ${reason}`);
    this.#pending.failAll(errors.deviceUnavailable(this.deviceId, `it is out of service: ${reason}`));
    this.#door.close(`it is out of service: ${reason}`);
    this.#options.onOutOfService?.(this.deviceId, reason, cudaError);
  }

  /**
   * Take the device out of service from here: another device actor on its GPU found the GPU's
   * context poisoned, and the context is the whole process's. What it has pending fails now; its
   * worker is told too, so that it refuses what edges and hook threads send it directly.
   */
  takeOut(reason: string, cudaError: number): void {
    if (!this.serving) return;
    this.#send({ type: 'takeOut', cudaError, reason });
    this.#outOfService(reason, cudaError);
  }

  /** Whether requests may be routed to it: not stopped, not out of service. */
  get serving(): boolean {
    return this.#state !== DeviceState.DEAD && this.#state !== DeviceState.OUT_OF_SERVICE;
  }

  #onCrash(why: string): void {
    if (this.#state === DeviceState.OUT_OF_SERVICE) return; // never restarted on a poisoned context
    if (this.#stopping) {
      this.#state = DeviceState.DEAD;
      return;
    }
    const restart = this.#crashes.crashed();
    this.#options.logger.error({ device: this.deviceId, crashes: this.#crashes.count }, `device actor crashed: ${why}`);
    if (!restart) {
      this.#state = DeviceState.DEAD;
      this.#options.logger.error({ device: this.deviceId }, `device actor crashed ${this.#crashes.count} times in a row; not restarting it`);
      return;
    }
    this.#state = DeviceState.RESTARTING;
    this.#reloading = true;
    const started = this.#spawn();
    const generation = this.#generation;
    // Posted now, the reloads sit first in the new worker's inbox, ahead of any later request;
    // each carries its model's policy as it stands.
    const reloads = [...this.#loaded].map(([instance, { spec, compiled }]) => this.#open(spec, instance, compiled, true).then(() => null, (err: Error) => ({ instance, err })));
    started.then(async () => {
      const failed = (await Promise.all(reloads)).filter((f) => f !== null);
      // This worker died too before its reloads were done: its replacement reloads, and says so.
      if (generation !== this.#generation) return;
      for (const { instance, err } of failed) this.#lose(instance, `its worker was replaced and could not load it again: ${err.message}`);
      this.#options.logger[failed.length ? 'error' : 'info']({ device: this.deviceId, reloaded: reloads.length - failed.length, failed: failed.length, ...(failed.length ? { lost: failed.map((f) => f.instance) } : {}) },
        failed.length ? 'device actor restarted without some of its models: they are routed to the devices that have them' : 'device actor restarted: its models are loaded again');
      this.#reloading = false;
      if (this.#state !== DeviceState.READY) return;
      this.#openOwnDoor();
      this.#options.onServing?.(this.deviceId);
    }, (err: Error) => this.#onCrash(`its replacement failed to start: ${err.message}`));
  }

  /**
   * The worker does not hold `instance` (its reload failed): nothing of it is routed here or loaded
   * into a later worker, and whatever part of it the worker made is freed.
   */
  #lose(instance: InstanceKey, why: string): void {
    if (!this.#loaded.delete(instance)) return; // unloaded meanwhile
    this.#options.logger.error({ device: this.deviceId, model: modelOf(instance), instance }, `model lost on device ${this.deviceId}: ${why}`);
    this.#call('unload', { instance }).catch(() => undefined);
    this.#options.onLost?.(this.deviceId, instance, why);
  }

  #settle(msg: FromDevice): void {
    switch (msg.type) {
      case 'started':
        return;
      case 'report':
        this.#crashes.healthy(); // it served (its requests come through doors: this is where the handle hears it)
        this.#options.onExecutions?.(msg.report);
        for (const { model, load, memory } of msg.report.loads) this.#options.onWeights?.(model, load, memory);
        return;
      case 'warning':
        this.#options.logger.warn(msg.fields, msg.message);
        return;
      case 'outOfService':
        this.#outOfService(msg.reason, msg.cudaError);
        return;
      case 'reply':
        this.#pending.resolve(msg.id, msg.reply);
        return;
      case 'failed':
        this.#pending.reject(msg.id, fromErrorData(msg.error));
        return;
      default: {
        const never: never = msg;
        this.#options.logger.error({ device: this.deviceId, message: never }, 'device sent an unknown message');
      }
    }
  }

  /** Queue `msg` for the worker; the outbox goes at the end of this event-loop turn. */
  #send(msg: ToDevice, transfer: readonly Transferable[] = []): void {
    this.#outbox.push(msg, transfer);
  }

  /** Post `msg` and wait for its settlement: the reply, `onTimeout` after `timeoutMs`, or the worker exiting. */
  #post<T>(msg: ToDevice & { id: number }, timeoutMs: number, onTimeout: () => StowageError, transfer: Transferable[] = []): Promise<T> {
    const refused = this.#refusal();
    if (refused) return Promise.reject(refused);
    const settled = this.#pending.wait<T>(msg.id, timeoutMs, onTimeout);
    this.#send(msg, transfer);
    return settled;
  }

  /** A control call: resolves with its reply's type. */
  #call<K extends DeviceCallType>(type: K, request: DeviceCalls[K]['request']): Promise<DeviceCalls[K]['reply']> {
    const msg = { ...request, type, id: this.#nextId++ } as DeviceCall;
    return this.#post<DeviceCalls[K]['reply']>(msg, CALL_TIMEOUT_MS[type], () => errors.deviceUnavailable(this.deviceId, `no answer to ${type} within ${CALL_TIMEOUT_MS[type]} ms`));
  }

  /**
   * Open the sessions of one version of a model on the device, under `instance`. `compiled` is its
   * compiled form (null when the weight cache is off); its host buffers join the offer, and the
   * host RAM the load ends up holding is reported to `hostWeights`.
   */
  load(spec: ModelSpec, instance: InstanceKey, compiled: CompiledModel | null): Promise<LoadOutcome> {
    return this.#open(spec, instance, compiled, false);
  }

  /**
   * A load, or (`reload`) the same instance loaded again into a replacement worker: a reload does
   * not make the handle hold again what was unloaded while it ran (the unload, posted after it,
   * frees it in the worker), so an unloaded model is never loaded into a later worker.
   */
  async #open(spec: ModelSpec, instance: InstanceKey, compiled: CompiledModel | null, reload: boolean): Promise<LoadOutcome> {
    const hostOffer = { ...this.#options.hostWeights?.offer(), ...compiled?.host };
    const policy = this.#options.policies.of(this.deviceId, spec.name);
    const loaded = await this.#call('load', { instance, spec, policy, compiled: compiled?.executables ?? null, hostOffer });
    if (reload && !this.#loaded.has(instance)) return { loadMs: loaded.loadMs, weightBytes: loaded.weightBytes, session: loaded.session };
    // Kept for a crash reload without the compiler's buffers: HostWeights holds what is in use.
    if (!reload) this.#loaded.set(instance, { spec, compiled: compiled && { executables: compiled.executables, host: {} } });
    this.#options.hostWeights?.update({ created: { ...compiled?.host, ...loaded.host.created }, holdings: loaded.host.holdings });
    this.#options.onCompiled?.(loaded.compiled.files, loaded.compiled.cacheHits);
    if (loaded.memory) this.#options.onWeights?.(spec.name, loaded.load, loaded.memory);
    if (loaded.sessionDeviceBytes !== null) {
      // What limits how many models a GPU holds: its sessions' memory beyond the weight arena.
      this.#options.logger.info({ model: spec.name, device: this.deviceId, session_device_mib: Math.round(loaded.sessionDeviceBytes / 2 ** 20) }, 'model sessions on the GPU');
    }
    if (loaded.cudaGraphs !== null) {
      const off = /(^|; )off: /.test(loaded.cudaGraphs);
      this.#options.logger[off ? 'warn' : 'info']({ model: spec.name, device: this.deviceId, cuda_graphs: loaded.cudaGraphs }, off ? 'CUDA graphs off for (part of) the model: it runs without them' : 'CUDA graphs');
    }
    if (loaded.warmup) {
      const w = loaded.warmup;
      this.#options.logger[w.skipped ? 'warn' : 'info']({ model: spec.name, device: this.deviceId, runs: w.runs, warmup_ms: Math.round(w.ms), data: w.fromBundle.length > 0 ? w.fromBundle : 'zeros', ...(w.skipped ? { skipped: w.skipped } : {}) }, 'model warmed up');
    }
    return { loadMs: loaded.loadMs, weightBytes: loaded.weightBytes, session: loaded.session };
  }

  /**
   * Free an instance. If the worker it was sent to dies (or the device stops, or is taken out of
   * service) first, the instance is gone with it, and no replacement loads it again: that is an
   * unload too.
   */
  async unload(instance: InstanceKey): Promise<void> {
    this.#loaded.delete(instance);
    const generation = this.#generation;
    try {
      const { memory } = await this.#call('unload', { instance });
      if (memory) this.#options.onWeights?.(modelOf(instance), null, memory);
    } catch (err) {
      if (generation !== this.#generation || !this.serving) return;
      throw err;
    }
  }

  /** Whether the device holds `instance` (or will once its replacement worker has loaded it again). */
  holds(instance: InstanceKey): boolean {
    return this.#loaded.has(instance);
  }

  /** Serving with every model it holds loaded: not starting, not reloading after a crash. */
  get settled(): boolean {
    return this.#state === DeviceState.READY && !this.#reloading;
  }

  /**
   * Run one request. Settles by its deadline at the latest (for a request
   * without one: the queue-wait bound plus a watchdog on the execution); an
   * aborted signal drops it (queued: removed; running: its result discarded).
   * With `feedFromHook` the request goes without inputs: it is called at once
   * with where the hook thread running its preprocess hook must send them.
   */
  infer(req: InferenceRequest, signal?: AbortSignal, feedFromHook?: (to: HookFeedTarget) => void): Promise<InferenceResult> {
    const refused = this.#refusal();
    if (refused) return Promise.reject(refused);
    return this.#door.infer(req, signal, feedFromHook);
  }

  /** Why nothing may be sent to it now; null when it may. */
  #refusal(): Error | null {
    if (this.#state === DeviceState.DEAD) return errors.deviceUnavailable(this.deviceId, 'it has stopped');
    if (this.#state === DeviceState.OUT_OF_SERVICE) return errors.deviceUnavailable(this.deviceId, `it is out of service: ${this.#outOfServiceWhy}`);
    return null;
  }

  /** Every loaded instance's queue, learned costs, policy and residency. */
  async status(): Promise<InstanceStatus[]> {
    return (await this.#call('status', {})).instances;
  }

  /** Its instances and its sessions (shared by graph, opened on demand), as one status call reads them. */
  async report(): Promise<DeviceCalls['status']['reply']> {
    return this.#call('status', {});
  }

  /**
   * Move a model's loaded instances to its residency as the owner has it now (`device` brings them on now, or fails if
   * they cannot fit).
   */
  async applyResidency(model: string): Promise<void> {
    const { residency } = this.#options.policies.of(this.deviceId, model);
    const { memory, host } = await this.#call('setResidency', { model, residency, hostOffer: this.#options.hostWeights?.offer() ?? {} });
    this.#options.hostWeights?.update(host);
    if (memory) this.#options.onWeights?.(model, null, memory);
  }

  /** Make an instance's weights resident now, if they fit (the device pool moving a model here under lpt_packing). */
  async prefetch(instance: InstanceKey): Promise<void> {
    const { load, memory } = await this.#call('prefetch', { instance });
    if (load || memory) this.#options.onWeights?.(modelOf(instance), load, memory);
  }

  /** Backend cuda: the GPU (CUDA ordinal) this device drives; null on backend cpu. */
  get gpu(): number | null {
    return this.#options.cuda?.ordinal ?? null;
  }

  /**
   * Resolves once every execution the worker answered before now has been reported (see
   * DeviceCalls' `reports`); at once when the device does not serve (nothing more will report).
   */
  async reported(): Promise<void> {
    if (this.#refusal()) return;
    await this.#call('reports', {}).catch(() => undefined);
  }

  /** Open a CUDA shared-memory region on this device's GPU (the whole region, as a slice of it). */
  async openCudaRegion(slice: RegionSlice): Promise<void> {
    await this.#call('openCudaRegion', { slice });
  }

  /** Close the holes in the device's weight arena; returns the bytes moved. */
  async compact(): Promise<number> {
    return (await this.#call('compact', {})).movedBytes;
  }

  /**
   * Apply a model's scheduling policy as the owner has it now to its loaded instances (their queued requests included).
   */
  async applyPolicy(model: string): Promise<void> {
    const { weight, maxBatchSize } = this.#options.policies.of(this.deviceId, model);
    await this.#call('setPolicy', { model, policy: { weight, maxBatchSize } });
  }

  /**
   * A hook thread's new door to this device (HookFeed), made for the handle's door `generation` (its link): the worker
   * reads the inputs waiting in it. A door to a worker that has since been replaced is closed.
   */
  adoptDoor(port: MessagePort, generation: number): void {
    if (this.#state === DeviceState.DEAD) port.close();
    else this.#door.adoptDoor(port, generation);
  }

  /**
   * A door for an edge thread to this device's worker (shared/channels/device.ts `door`): the
   * worker gets one end, the edge the other. None while the device does not serve (starting,
   * reloading its models after a crash, stopped, out of service): the edge sends its requests
   * through the main thread meanwhile, and `onServing` says when to ask again.
   */
  openEdgeDoor(): { port: MessagePort; link: number } | null {
    if (this.#state !== DeviceState.READY || this.#reloading) return null;
    const link = this.#nextLink++;
    return { port: this.#doorPort(link), link };
  }

  /** A new door `link` to the current worker: the worker gets one end; the other, returned, is the client's. */
  #doorPort(link: number): MessagePort {
    const { port1, port2 } = new MessageChannel();
    this.#send({ type: 'door', port: port1, link }, [port1]);
    return port2;
  }

  /** The worker serves with its models loaded: the handle's own door opens, what it held going first. */
  #openOwnDoor(): void {
    this.#door.open(this.#doorPort(this.#door.link));
  }

  /** How long a request without a deadline may wait on this device before its caller stops waiting. */
  get waitBoundMs(): number {
    return this.#options.scheduler.dispatch_timeout_seconds * 1000 + EXECUTION_WATCHDOG_MS;
  }

  /** A shared-memory region was unregistered: the worker drops its cached mapping. */
  forgetRegion(regionId: number): void {
    if (this.#state !== DeviceState.DEAD) this.#send({ type: 'forgetRegion', regionId });
  }

  /** Stop the worker; pending calls are answered UNAVAILABLE. */
  async stop(): Promise<void> {
    this.#stopping = true;
    this.#state = DeviceState.DEAD;
    await this.#worker.terminate();
  }
}
