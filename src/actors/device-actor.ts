/**
 * The main thread's handle on one device actor (a worker thread running
 * device-worker.js). Its interface is small: `load`, `unload`, `infer`,
 * `inflight`, `stop`.
 *
 * Every pending call settles in exactly one of three ways: the worker's reply,
 * its own timer (the request's deadline, or a load timeout), or the worker
 * exiting, which rejects every pending call with UNAVAILABLE. A worker that
 * exits unexpectedly is replaced and the models it held are loaded again
 * before anything else runs there (the worker serves its inbox in order); a
 * worker that keeps dying without serving is given up on.
 *
 * Buffers: `infer` transfers its inputs' ArrayBuffers to the worker (the
 * caller must not touch them afterwards) and receives the outputs' buffers.
 */
import { Worker } from 'node:worker_threads';
import type { Logger } from 'pino';
import type { ModelSpec } from '../bundle/model-spec.js';
import type { SchedulerConfig } from '../config/schema.js';
import { DEVICE_MAX_CONSECUTIVE_CRASHES, DEVICE_START_TIMEOUT_MS, EXECUTION_WATCHDOG_MS, MODEL_LOAD_TIMEOUT_MS } from '../constants.js';
import { errors, fromErrorData, StowageError } from '../errors.js';
import type { HostWeights } from '../weights/host-weights.js';
import { nowMs, type DeviceInit, type ExecutionTiming, type FromDevice, type InferCommand, type InferResult as ExecutedRequest, type InstanceStatus, type ModelPolicyUpdate, type Residency, type ToDevice, type WeightCacheInit, type WeightLoad, type WeightMemory, type WireTensor } from './messages.js';

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
}

export interface InferRequest {
  /** The model's loaded instance (from the registry's lease). */
  instance: string;
  /** One tensor per manifest input, in manifest order. */
  inputs: WireTensor[];
  outputs: string[];
  /** Per output: the shared-memory slice to write it into, or null to return it. */
  outputRegions: InferCommand['outputRegions'];
  /** The client's absolute deadline (nowMs clock); Infinity if it set none. */
  deadlineMs: number;
}

export interface InferResult {
  outputs: WireTensor[];
  /** Time queued on the device before its execution started. */
  queueNs: number;
  /** The execution this request rode in, shared with the others of its batch. */
  timing: ExecutionTiming;
}

/** What a pending call settles with: a control reply, or one request's share of an execution. */
type Reply = FromDevice | { type: 'result'; result: ExecutedRequest; timing: ExecutionTiming };

interface Pending {
  resolve: (value: Reply) => void;
  reject: (err: StowageError) => void;
  timer: NodeJS.Timeout;
}

export interface DeviceActorOptions {
  deviceId: number;
  intraOpThreads: number;
  scheduler: SchedulerConfig;
  /** The on-demand weight cache; null turns it off. */
  weights: WeightCacheInit | null;
  /** The process's host copies of weights, shared with the other device actors. */
  hostWeights?: HostWeights;
  logger: Logger;
  /** Told of weight traffic: a model's load or hit (on execution and load), and the device memory after it. */
  onWeights?: (model: string, load: WeightLoad | null, memory: WeightMemory | null) => void;
  /** Told how many of a load's ONNX files the compile cache held already. */
  onCompiled?: (files: number, cacheHits: number) => void;
  /** Told of every execution once (statistics count executions, not requests), with the requests still queued. */
  onExecution?: (model: string, timing: ExecutionTiming, queued: number) => void;
  /** The worker script; tests substitute a fixture. */
  workerUrl?: URL;
}

const DEFAULT_WORKER_URL = new URL('./device-worker.js', import.meta.url);

export class DeviceActor {
  readonly deviceId: number;
  #options: DeviceActorOptions;
  #worker!: Worker;
  #state = DeviceState.STARTING;
  #pending = new Map<number, Pending>();
  #nextId = 1;
  /** Loaded instances and their specs, to load again into a replacement worker. */
  #loaded = new Map<string, ModelSpec>();
  /** Run-time changes (SetModelPolicy, SetModelResidency) by model, to replay into a replacement worker. */
  #policies = new Map<string, ModelPolicyUpdate>();
  #residencies = new Map<string, Residency>();
  #crashes = 0;
  #stopping = false;

  private constructor(options: DeviceActorOptions) {
    this.deviceId = options.deviceId;
    this.#options = options;
  }

  /** Start the worker and wait until ONNX Runtime is loaded in it. */
  static async create(options: DeviceActorOptions): Promise<DeviceActor> {
    const actor = new DeviceActor(options);
    await actor.#spawn();
    return actor;
  }

  get state(): DeviceState {
    return this.#state;
  }

  /** Calls sent to the worker and not yet settled. */
  get inflight(): number {
    return this.#pending.size;
  }

  #spawn(): Promise<void> {
    const init: DeviceInit = { deviceId: this.deviceId, intraOpThreads: this.#options.intraOpThreads, scheduler: this.#options.scheduler, weights: this.#options.weights };
    const worker = new Worker(this.#options.workerUrl ?? DEFAULT_WORKER_URL, { workerData: init, name: `device-${this.deviceId}` });
    this.#worker = worker;
    let lastError: Error | undefined;
    let started = false;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        void worker.terminate();
        reject(errors.deviceUnavailable(this.deviceId, `its worker did not start within ${DEVICE_START_TIMEOUT_MS} ms`));
      }, DEVICE_START_TIMEOUT_MS);
      worker.on('message', (msg: FromDevice) => {
        if (msg.type === 'started') {
          started = true;
          clearTimeout(timer);
          this.#state = DeviceState.READY;
          resolve();
          return;
        }
        this.#settle(msg);
      });
      worker.on('error', (err) => {
        lastError = err;
      });
      worker.on('messageerror', (err) => {
        lastError = err;
      });
      worker.on('exit', (code) => {
        clearTimeout(timer);
        if (worker !== this.#worker) return;
        const why = this.#stopping ? 'the server is stopping'
          : `its worker exited (code ${code}${lastError ? `: ${lastError.message}` : ''})`;
        this.#failAll(errors.deviceUnavailable(this.deviceId, why));
        if (!started) reject(errors.deviceUnavailable(this.deviceId, why));
        else this.#onCrash(why);
      });
    });
  }

  #onCrash(why: string): void {
    if (this.#stopping) {
      this.#state = DeviceState.DEAD;
      return;
    }
    this.#crashes++;
    this.#options.logger.error({ device: this.deviceId, crashes: this.#crashes }, `device actor crashed: ${why}`);
    if (this.#crashes >= DEVICE_MAX_CONSECUTIVE_CRASHES) {
      this.#state = DeviceState.DEAD;
      this.#options.logger.error({ device: this.deviceId }, `device actor crashed ${this.#crashes} times in a row; not restarting it`);
      return;
    }
    this.#state = DeviceState.RESTARTING;
    const started = this.#spawn();
    // Posted now, these sit first in the new worker's inbox, ahead of any later request: the
    // run-time policy and residency changes, then the loads they apply to.
    const replayFailed = (what: string) => (err: Error) => this.#options.logger.error({ device: this.deviceId }, `replaying ${what} after crash failed: ${err.message}`);
    for (const [model, policy] of this.#policies) this.setPolicy(model, policy).catch(replayFailed(`the policy of ${model}`));
    for (const [model, residency] of this.#residencies) this.setResidency(model, residency).catch(replayFailed(`the residency of ${model}`));
    for (const [instance, spec] of this.#loaded) {
      this.load(spec, instance).catch((err: Error) => this.#options.logger.error({ device: this.deviceId, model: spec.name }, `reload after crash failed: ${err.message}`));
    }
    started.catch((err: Error) => this.#onCrash(`its replacement failed to start: ${err.message}`));
  }

  #settle(msg: FromDevice): void {
    if (msg.type === 'started') return;
    if (msg.type === 'executed') {
      for (const result of msg.results) this.#resolve(result.id, { type: 'result', result, timing: msg.timing });
      this.#options.onExecution?.(msg.model, msg.timing, msg.queued);
      if (msg.load || msg.memory) this.#options.onWeights?.(msg.model, msg.load, msg.memory);
      return;
    }
    if (msg.type === 'warning') {
      this.#options.logger.warn(msg.fields, msg.message);
      return;
    }
    this.#resolve(msg.id, msg);
  }

  #resolve(id: number, reply: Reply): void {
    const pending = this.#pending.get(id);
    if (!pending) return; // timed out or cancelled: the caller was answered already
    this.#pending.delete(id);
    clearTimeout(pending.timer);
    if (reply.type === 'failed') pending.reject(fromErrorData(reply.error));
    else pending.resolve(reply);
  }

  #failAll(err: StowageError): void {
    const pending = [...this.#pending.values()];
    this.#pending.clear();
    for (const p of pending) {
      clearTimeout(p.timer);
      p.reject(err);
    }
  }

  #call(msg: ToDevice, timeoutMs: number, onTimeout: () => StowageError, transfer: ArrayBuffer[] = []): Promise<Reply> {
    if (this.#state === DeviceState.DEAD) {
      return Promise.reject(errors.deviceUnavailable(this.deviceId, 'it has stopped'));
    }
    return new Promise((resolve, reject) => {
      const id = (msg as { id: number }).id;
      const timer = setTimeout(() => {
        this.#pending.delete(id);
        if (msg.type === 'infer') this.#worker.postMessage({ type: 'cancel', id } satisfies ToDevice);
        reject(onTimeout());
      }, Math.max(0, timeoutMs));
      this.#pending.set(id, { resolve, reject, timer });
      this.#worker.postMessage(msg, transfer);
    });
  }

  /** Create the sessions of one version of a model on the device, under `instance`. */
  async load(spec: ModelSpec, instance: string): Promise<{ loadMs: number; weightBytes: number }> {
    const hostOffer = this.#options.hostWeights?.offer() ?? {};
    const reply = await this.#call({ type: 'load', id: this.#nextId++, instance, spec, hostOffer }, MODEL_LOAD_TIMEOUT_MS,
      () => errors.bundleInvalid(spec.name, 'model.onnx', `loading took longer than ${MODEL_LOAD_TIMEOUT_MS} ms`));
    this.#loaded.set(instance, spec);
    const loaded = reply as Extract<FromDevice, { type: 'loaded' }>;
    this.#options.hostWeights?.update(loaded.host);
    this.#options.onCompiled?.(loaded.compiled.files, loaded.compiled.cacheHits);
    if (loaded.memory) this.#options.onWeights?.(spec.name, loaded.load, loaded.memory);
    return { loadMs: loaded.loadMs, weightBytes: loaded.weightBytes };
  }

  async unload(instance: string): Promise<void> {
    this.#loaded.delete(instance);
    const reply = await this.#call({ type: 'unload', id: this.#nextId++, instance }, MODEL_LOAD_TIMEOUT_MS,
      () => errors.internal(`unloading ${instance} timed out`));
    const { memory } = reply as Extract<FromDevice, { type: 'unloaded' }>;
    if (memory) this.#options.onWeights?.(instance.slice(0, instance.lastIndexOf('#')), null, memory);
  }

  /**
   * Run one request. Settles by its deadline at the latest (for a request
   * without one: the queue-wait bound plus a watchdog on the execution); an
   * aborted signal drops it (queued: removed; running: its result discarded).
   */
  async infer(req: InferRequest, signal?: AbortSignal): Promise<InferResult> {
    const id = this.#nextId++;
    const enqueuedAtMs = nowMs();
    const settleBy = Number.isFinite(req.deadlineMs) ? req.deadlineMs
      : enqueuedAtMs + this.#options.scheduler.dispatch_timeout_seconds * 1000 + EXECUTION_WATCHDOG_MS;
    const transfer = [...new Set(req.inputs.map((t) => t.data.buffer as ArrayBuffer))];
    const call = this.#call(
      { type: 'infer', id, instance: req.instance, inputs: req.inputs, outputs: req.outputs, outputRegions: req.outputRegions, deadlineMs: req.deadlineMs, enqueuedAtMs },
      settleBy - enqueuedAtMs,
      () => errors.deadlineExceeded(req.instance.slice(0, req.instance.lastIndexOf('#')), nowMs() - enqueuedAtMs),
      transfer);
    const onAbort = () => {
      const pending = this.#pending.get(id);
      if (!pending) return;
      this.#pending.delete(id);
      clearTimeout(pending.timer);
      this.#worker.postMessage({ type: 'cancel', id } satisfies ToDevice);
      pending.reject(errors.cancelled());
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      const reply = await call;
      this.#crashes = 0; // served: the worker is healthy
      const { result, timing } = reply as Extract<Reply, { type: 'result' }>;
      return { outputs: result.outputs, queueNs: result.queueNs, timing };
    } finally {
      signal?.removeEventListener('abort', onAbort);
    }
  }

  /** Every loaded instance's queue, learned costs, policy and residency. */
  async status(): Promise<InstanceStatus[]> {
    const reply = await this.#call({ type: 'status', id: this.#nextId++ }, DEVICE_START_TIMEOUT_MS, () => errors.deviceUnavailable(this.deviceId, 'no status report'));
    return (reply as Extract<FromDevice, { type: 'statusReport' }>).instances;
  }

  /** Change where a model's weights live at rest (`device` brings them on now, or fails if they cannot fit). */
  async setResidency(model: string, residency: Residency): Promise<void> {
    const hostOffer = this.#options.hostWeights?.offer() ?? {};
    const reply = await this.#call({ type: 'setResidency', id: this.#nextId++, model, residency, hostOffer }, MODEL_LOAD_TIMEOUT_MS, () => errors.deviceUnavailable(this.deviceId, 'no answer to setResidency'));
    const { memory, host } = reply as Extract<FromDevice, { type: 'residencySet' }>;
    this.#residencies.set(model, residency);
    this.#options.hostWeights?.update(host);
    if (memory) this.#options.onWeights?.(model, null, memory);
  }

  /** Make an instance's weights resident now, if they fit (the gateway moving a model here). */
  async prefetch(instance: string): Promise<void> {
    const reply = await this.#call({ type: 'prefetch', id: this.#nextId++, instance }, MODEL_LOAD_TIMEOUT_MS, () => errors.deviceUnavailable(this.deviceId, 'no answer to prefetch'));
    const { load, memory } = reply as Extract<FromDevice, { type: 'prefetched' }>;
    if (load || memory) this.#options.onWeights?.(instance.slice(0, instance.lastIndexOf('#')), load, memory);
  }

  /** Close the holes in the device's weight arena; returns the bytes moved. */
  async compact(): Promise<number> {
    const reply = await this.#call({ type: 'compact', id: this.#nextId++ }, MODEL_LOAD_TIMEOUT_MS, () => errors.deviceUnavailable(this.deviceId, 'no answer to compact'));
    return (reply as Extract<FromDevice, { type: 'compacted' }>).movedBytes;
  }

  /** Change a model's scheduling policy now (its queued requests included) and for later loads. */
  async setPolicy(model: string, policy: ModelPolicyUpdate): Promise<void> {
    await this.#call({ type: 'setPolicy', id: this.#nextId++, model, policy }, DEVICE_START_TIMEOUT_MS, () => errors.deviceUnavailable(this.deviceId, 'no answer to setPolicy'));
    this.#policies.set(model, { ...this.#policies.get(model), ...policy });
  }

  /** A shared-memory region was unregistered: the worker drops its cached mapping. */
  forgetRegion(regionId: number): void {
    if (this.#state !== DeviceState.DEAD) this.#worker.postMessage({ type: 'forgetRegion', regionId } satisfies ToDevice);
  }

  /** Stop the worker; pending calls are answered UNAVAILABLE. */
  async stop(): Promise<void> {
    this.#stopping = true;
    this.#state = DeviceState.DEAD;
    await this.#worker.terminate();
  }
}
