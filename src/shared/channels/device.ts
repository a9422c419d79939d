/**
 * The channel between the main thread and a device actor: every message, both
 * ways, typed here and nowhere else. Both sides `import type` this file. The
 * request and result it carries are inference.ts's (their buffers' ownership
 * is said there).
 */
import type { MessagePort } from 'node:worker_threads';
import type { HookFeed } from './hooks.js';
import type { InstanceKey, ModelSpec } from '../model-spec.js';
import type { Residency, SchedulerConfig } from '../config-schema.js';
import type { ErrorData } from '../errors.js';
import type { CompiledExecutable } from './compiler.js';
import type { ExecutionTiming, InferenceRequest, InferenceResult, RegionSlice, WireTensor } from './inference.js';

/** Given to the worker at start-up (as workerData). */
export interface DeviceInit {
  deviceId: number;
  /** ONNX Runtime intra-op threads; 0 lets ONNX Runtime choose. */
  intraOpThreads: number;
  /** Runs whose learned cost is below this many ms run on the device thread (runtime.inline_run_below_ms). */
  inlineRunBelowMs: number;
  /** runtime.thread_pool: ONNX Runtime's intra-op threads per session, or one pool for the process. */
  threadPool: 'per_session' | 'process';
  /** The device's scheduler settings; per-model policies come with each load instead. */
  scheduler: DeviceScheduling;
  /** The on-demand weight cache; null when it is off (every model's weights embedded and resident). */
  weights: WeightCacheInit | null;
  /** Backend cuda: the GPU this actor drives (cuda.ordinal) and its provider's settings; null on backend cpu. */
  cuda: CudaDeviceInit | null;
  /** Warm each model up before it is ready (runtime.warmup resolved); a model's policy may say otherwise. */
  warmup: boolean;
  /** How sessions are shared and opened (actors/device/sessions.ts). */
  sessions: SessionsInit;
  /** Where it publishes its predicted backlog for the threads that admit requests (shared/backlog.ts). */
  backlog: SharedArrayBuffer;
}

/** A device's sessions: shared by graph, activations shared, opened on demand under a budget. */
export interface SessionsInit {
  /** runtime.share_sessions: executables of equal graphs and options share one session. */
  share: boolean;
  /** Backend cpu with runtime.share_activations: activations from the process's one CPU arena. */
  sharedActivations: boolean;
  /** runtime.session_budget_bytes: idle sessions beyond it close, and reopen on their next call; 0: none. */
  budgetBytes: number;
  /**
   * runtime.session_per_batch_size resolved: a dynamic-batch file opens one session per compiled
   * batch size, and a run takes the smallest size its rows fit (padded), so each session only ever
   * runs at one shape (models.ts openExecutables).
   */
  perBatchSize: boolean;
}

/** A CUDA device actor's settings (config/cuda-options.ts derives them from runtime.cuda). */
export interface CudaDeviceInit {
  /**
   * The CUDA ordinal of the GPU this actor drives. It is the actor's deviceId unless a GPU is driven
   * by more than one actor (gpus: [0, 0]); then the actors are numbered by position instead.
   */
  ordinal: number;
  /** The CUDA execution provider's options, in ONNX Runtime's names and string values. */
  providerOptions: Record<string, string>;
  /** Where the CUDA libraries are searched for (native/cuda.ts cudaLibraryDirs). */
  libraryDirs: string[];
  /** runtime.cuda.graphs: run models through CUDA graphs where they allow it (cuda-graphs.ts). */
  graphs: boolean;
  /** runtime.cuda.shared_arena: sessions take activations from one ONNX Runtime arena for the GPU. */
  sharedArena: boolean;
}

/** A worker's scheduler block without `models:` (ModelPolicies owns those). */
export type DeviceScheduling = Omit<SchedulerConfig, 'models'>;

/** How a device's weight cache is set up (config/weight-budget.ts derives it from the node file). */
export interface WeightCacheInit {
  /** Bytes of the device arena that weights may occupy. */
  budgetBytes: number;
  /** Touch the whole arena at start-up, so first loads do not pay page faults. */
  preallocate: boolean;
  /** Compact the arena every this many on-demand loads; 0 never. */
  compactionInterval: number;
  /** The compile cache directory. */
  cacheDir: string;
  /** Window over which thrash is judged, seconds. */
  thrashWindowSeconds: number;
  /** Copy cold models' weights in while other models run (runtime.upload_beside_execution). */
  uploadBesideExecution: boolean;
}

export type { Residency };

/** A device's weight memory, after an event. */
export interface WeightMemory {
  /** Bytes on the device: distinct tensors, each once. */
  residentBytes: number;
  /** Bytes the resident models would take without sharing. */
  logicalBytes: number;
  budgetBytes: number;
}

/**
 * Host RAM changes a device actor reports (node/host-weights.ts keeps the process's copy):
 * buffers it read from disk, and which tensors each instance now keeps in host RAM.
 */
export interface HostUpdate {
  created: Record<string, SharedArrayBuffer>;
  /** Each instance's tensor keys in host RAM (empty: none, e.g. unpinned). */
  holdings: { instance: InstanceKey; keys: string[] }[];
}

/** What a model's warm-up did before it was ready (actors/device/warmup.ts). */
export interface WarmupOutcome {
  /** Batch sizes warmed (each run once, or on CUDA two or three times). */
  runs: number;
  ms: number;
  /** Why some executable was not warmed (an input with a free axis), or null. */
  skipped: string | null;
  /** The inputs that ran on the bundle's data rather than zeros. */
  fromBundle: string[];
}

/**
 * What making a model resident cost in weight traffic (a hit costs nothing): the weight cache's
 * answer on the device (`Evicted`: the instances it evicted), and what a cold execution reports
 * to the main thread (ExecutionReport's `loads`: the models evicted, by name).
 */
export interface WeightLoad<Evicted extends string = string> {
  hit: boolean;
  /** Bytes copied onto the device (shared tensors already there are not copied). */
  loadedBytes: number;
  /** Of loadedBytes, read from the compile cache on disk (`unpinned` models). */
  diskBytes: number;
  /** Milliseconds the batch waited for it (on the device thread). */
  loadMs: number;
  /**
   * Uploaded beside other models' executions (runtime.upload_beside_execution): milliseconds of its
   * copies that ran while the device did other work, not waited for. Absent for a load made at its
   * batch's turn.
   */
  hiddenMs?: number;
  /** Evicted to make room. */
  evicted: Evicted[];
}

/**
 * A request as it travels to the device: numbered by the handle, stamped with the hand-over
 * time, and marked when a hook thread sends its inputs. The device queues it as it is (it is the
 * scheduler's ticket).
 */
export interface InferCommand extends InferenceRequest {
  type: 'infer';
  id: number;
  /**
   * The inputs come from the hook thread running the request's preprocess hook, over that
   * thread's door to this device (`hookDoor`), as a `HookInputs` with this id (checked against the
   * manifest there), so that they never pass through the main thread. They may arrive before
   * this command does. The request joins its queue when both are here; if the hook fails, the
   * main thread cancels it.
   */
  inputsFromHook?: boolean;
  /** When the main thread handed the request over (nowMs clock). */
  enqueuedAtMs: number;
}

/** hook thread -> device actor, over the thread's door: one request's preprocessed inputs. */
export interface HookInputs {
  /** The door the InferCommand came through (`door`'s link). */
  link: number;
  /** The InferCommand's id on that link. */
  id: number;
  /** One tensor per manifest input, in the manifest's order. */
  inputs: WireTensor[];
  /** When the hook thread sent them (nowMs clock): the request's queue time starts here. */
  sentAtMs: number;
}

/** A run-time change of scheduler.models.<name> (SetModelPolicy); absent fields keep their value. */
export interface ModelPolicyUpdate {
  weight?: number;
  maxBatchSize?: number;
}

/** How a device queues a model: its share of device time under `fair`, and its batch cap. */
export interface SchedulingPolicy {
  weight: number;
  /** scheduler.models.<name>.priority: the level of its requests that name none; absent: scheduler.default_priority. */
  priority?: number;
  /** scheduler.models.<name>.max_batch_size; absent: the model's largest compiled batch. */
  maxBatchSize?: number;
}

/**
 * One model's policy on one device as it stands: the node file's for that worker with the
 * run-time changes over it. The main thread owns it (node/model-policies.ts); loads
 * carry it, so the device keeps no policy of its own beyond its loaded instances.
 */
export interface ModelPolicy extends SchedulingPolicy {
  residency: Residency;
  /** scheduler.models.<name>.warmup; absent: the device's runtime.warmup. */
  warmup?: boolean;
  /** scheduler.models.<name>.tf32 (backend cuda); absent: runtime.cuda.tf32. */
  tf32?: boolean;
}

/** One loaded instance as the device sees it. */
export interface InstanceStatus {
  instance: InstanceKey;
  model: string;
  queued: number;
  /** Rows refused so far because its queue here was full (a counter): demand its queue could not show. */
  refusedRows: number;
  /** Learned cost per executed batch size. */
  costs: { batchSize: number; ms: number }[];
  weight: number;
  maxBatchRows: number;
  /** Where its weights live at rest; 'device' for every model when the weight cache is off. */
  residency: Residency;
  /** Whether its weights are on the device now. */
  resident: boolean;
  /** Bytes of its distinct weight tensors (0 when they are embedded in the executable). */
  weightBytes: number;
  /** Backend cuda: GPU memory its sessions took at load and warm-up (session-memory.ts); null on the CPU. */
  sessionDeviceBytes: number | null;
  /** Backend cuda with runtime.cuda.graphs: whether its runs use CUDA graphs, or why not; null otherwise. */
  cudaGraphs: string | null;
  /** Which session it runs on: shared with how many models (and the graph), or why its own; closed or not. */
  session: string;
  /** Its share of its open sessions' bytes (each session's bytes over the models on it). */
  sessionBytes: number;
  /** Whether its sessions are open (a call pays no session open). */
  sessionOpen: boolean;
}

/** One device's status reply, tagged with the device (node/devices.ts reports). */
export interface DeviceReport {
  device: number;
  instances: InstanceStatus[];
  sessions: DeviceSessionsStatus;
}

/** Why a session was opened: a model's load, or a call to a model whose session the budget had closed. */
export const SESSION_OPEN_REASONS = ['load', 'reopen'] as const;
export type SessionOpenReason = (typeof SESSION_OPEN_REASONS)[number];
/**
 * Why a session was closed: its last model went (unloaded, or its load failed), the budget (idle
 * and least recently used beyond it), or memory (closed to make room for an open that ran out).
 */
export const SESSION_CLOSE_REASONS = ['unload', 'budget', 'memory'] as const;
export type SessionCloseReason = (typeof SESSION_CLOSE_REASONS)[number];

/** A device's sessions (actors/device/sessions.ts), as its status reports them. */
export interface SessionsReport {
  /** Sessions open now. */
  open: number;
  /** Distinct sessions the loaded models run on, open or closed. */
  sessions: number;
  /** Executables bound to them (a model with one ONNX file counts once). */
  users: number;
  /** Bytes the open sessions hold beside weights and shared activations (measured at their opens). */
  bytes: number;
  budgetBytes: number;
  opens: Record<SessionOpenReason, number>;
  closes: Record<SessionCloseReason, number>;
  /** Milliseconds spent reopening sessions the budget had closed, summed. */
  reopenMs: number;
}

/**
 * The device's sessions with the process's shared CPU activation arena (one per process: every device reports the
 * same).
 */
export interface DeviceSessionsStatus extends SessionsReport {
  /**
   * Backend cpu with shared activations: the arena's bytes reserved, in use now, and the most in use; null otherwise.
   */
  activations: { reservedBytes: number; inUseBytes: number; maxInUseBytes: number } | null;
}

/**
 * The device's control calls: each request (main thread -> device) and the reply it gets, by
 * name. The handle's `call(type, request)` returns `DeviceCalls[type]['reply']`; the device
 * answers a `DeviceReply` with the same id, or `failed` with the error.
 */
export interface DeviceCalls {
  /** Open the weightless sessions of one version of a model (compiled already) under its own instance key. */
  load: {
    request: { instance: InstanceKey; spec: ModelSpec; policy: ModelPolicy; compiled: CompiledExecutable[] | null; hostOffer: Record<string, SharedArrayBuffer> };
    /**
     * sessionDeviceBytes: backend cuda, the GPU memory the model's sessions took (load and warm-up);
     * cudaGraphs: with runtime.cuda.graphs, whether its runs use CUDA graphs or why not; both null otherwise.
     */
    reply: { loadMs: number; compiled: { files: number; cacheHits: number }; weightBytes: number; memory: WeightMemory | null; load: WeightLoad | null; host: HostUpdate; warmup: WarmupOutcome | null; sessionDeviceBytes: number | null; cudaGraphs: string | null; session: string };
  };
  unload: { request: { instance: InstanceKey }; reply: { memory: WeightMemory | null } };
  /** Every loaded instance's queue and learned costs. */
  status: { request: Record<string, never>; reply: { instances: InstanceStatus[]; sessions: DeviceSessionsStatus } };
  /** A model's scheduling policy changed: apply it to its loaded instances (their queued requests included). */
  setPolicy: { request: { model: string; policy: SchedulingPolicy }; reply: Record<string, never> };
  /** Move a model's loaded instances to another residency; all or nothing. */
  setResidency: { request: { model: string; residency: Residency; hostOffer: Record<string, SharedArrayBuffer> }; reply: { memory: WeightMemory | null; host: HostUpdate } };
  /** Close the holes in the weight arena now. */
  compact: { request: Record<string, never>; reply: { movedBytes: number; memory: WeightMemory | null } };
  /** Make an instance's weights resident now (the device pool moving a model here under lpt_packing). */
  prefetch: { request: { instance: InstanceKey }; reply: { load: WeightLoad | null; memory: WeightMemory | null } };
  /** Open a CUDA shared-memory region's IPC handle on this device's GPU (its registration waits for it). */
  openCudaRegion: { request: { slice: RegionSlice }; reply: Record<string, never> };
  /**
   * Answered at once, not queued: the device posts its ExecutionReport of everything run so far
   * just before this reply (one port, in order). A reader of statistics asks it first, so that a
   * request answered before the read (the execution is tallied as its answer is posted) is counted
   * with its execution by the time the read is answered.
   */
  reports: { request: Record<string, never>; reply: Record<string, never> };
}
export type DeviceCallType = keyof DeviceCalls;

/** A control call as it travels: of type K, or (by default) of any type. */
export type DeviceCall<K extends DeviceCallType = DeviceCallType> = { [P in K]: { type: P; id: number } & DeviceCalls[P]['request'] }[K];

/** main thread -> device actor */
export type ToDevice =
  | DeviceCall
  /** A shared-memory region was unregistered: drop the cached mapping (requests using it keep theirs). */
  | { type: 'forgetRegion'; regionId: number }
  /**
   * Another device actor on this device's GPU found the GPU's context poisoned (the context is
   * the process's, one per GPU): this device is out of service too, for `reason`.
   */
  | { type: 'takeOut'; cudaError: number; reason: string }
  /**
   * A hook thread's door: the port over which it sends this device the inputs of requests whose
   * preprocess hook it ran (HookInputs). A hook thread makes one per device actor it feeds
   * (actors/hooks/worker.ts) and hands the other end over with its first result.
   */
  | { type: 'hookDoor'; port: MessagePort }
  /**
   * A door: the port over which one client thread hands this device its requests (ToDeviceDoor) and
   * hears their answers (FromDeviceDoor): the main thread's handle keeps one to each worker it
   * starts, and makes one per edge thread, handing the other end to the edge, so that an edge's
   * requests never pass through the main thread (actors/device/inbox.ts). Every request comes through
   * a door. `link`: the door's number, from 1 and never reused by this worker, which names its
   * requests to the hook threads that feed them (HookInputs).
   */
  | { type: 'door'; port: MessagePort; link: number };

/**
 * client thread -> device actor, over its door, each event-loop turn's as one array: requests
 * (numbered by the client, its `id`s its own) and cancellations of them.
 */
export type ToDeviceDoor =
  | InferCommand
  | { type: 'cancel'; id: number }
  /** A hook thread of this client's made its door to the device. */
  | { type: 'hookDoor'; port: MessagePort };

/**
 * One execution's answers to one door: the results of the requests that came through it, each with
 * its buffers, and the execution's timing. The execution itself is counted in the device's next
 * `ExecutionReport`.
 */
export interface ExecutionAnswers {
  type: 'executed';
  results: ({ id: number } & Omit<InferenceResult, 'timing'>)[];
  timing: ExecutionTiming;
}

/**
 * device actor -> client thread, over its door: the share of one execution of the requests that
 * client sent, or one of them failed.
 */
export type FromDeviceDoor = ExecutionAnswers | { type: 'failed'; id: number; error: ErrorData };

/** One model's executions summed in an ExecutionReport. */
export interface ModelExecutions {
  model: string;
  executions: number;
  /** Per executed batch size (padded up to a compiled size): how many executions, and their time. */
  batches: { size: number; count: number; computeInputNs: number; computeInferNs: number; computeOutputNs: number }[];
  /** Executions whose weights were resident already (weight-cache hits); the misses are in `loads`. */
  weightHits: number;
}

/**
 * What the device ran since its last report, summed (actors/device/execution-costs.ts): the main
 * thread's statistics and metrics count executions from these alone. The device posts one when
 * some time has passed since its first execution not yet reported, and before it answers a
 * `reports` call, so one message stands for many executions, whichever thread their requests came from.
 */
export interface ExecutionReport {
  models: ModelExecutions[];
  executions: number;
  /** Nanoseconds the device spent computing (compute_infer, summed). */
  busyNs: number;
  /** Requests queued on the device after the last execution. */
  queued: number;
  /** Rows per execution: [rows, how many executions had that many]. */
  rows: [rows: number, executions: number][];
  /** Each execution whose weights came onto the device first (a cold load), as it happened. */
  loads: { model: string; load: WeightLoad; memory: WeightMemory | null }[];
}

/** Where a hook thread sends one request's inputs: the device part of HookFeed (shared/channels/hooks.ts). */
export type HookFeedTarget = Pick<HookFeed, 'deviceId' | 'generation' | 'link' | 'id'>;

/** One request's share of an execution, as the device answered it (to the main thread's handle or an edge's door). */
export interface Executed {
  result: Omit<InferenceResult, 'timing'>;
  timing: ExecutionTiming;
}

/**
 * A device actor as a request's thread reaches it: the main thread's handle
 * (actors/device/handle.ts) and an edge thread's door (actors/device/door.ts) are both one.
 * `infer` settles exactly once: the answer, the deadline (or the device's wait bound), the client
 * going (the device is told to drop it), or the device gone (UNAVAILABLE).
 */
export interface DeviceClient {
  readonly deviceId: number;
  /** Requests handed to it and not yet settled (least_outstanding routing reads it). */
  readonly inflight: number;
  /**
   * With `feedFromHook`, the request goes without inputs; the hook thread that preprocesses it sends them where it is
   * told.
   */
  infer(req: InferenceRequest, signal?: AbortSignal, feedFromHook?: (to: HookFeedTarget) => void): Promise<InferenceResult>;
  /**
   * A hook thread's new door to this device, made for `generation` (HookFeed): the device reads the inputs waiting in
   * it; one for another generation is closed.
   */
  adoptDoor(port: MessagePort, generation: number): void;
}

/** device actor -> main thread */
export type FromDevice =
  | { type: 'started' }
  /** The answer to a control call. */
  | { type: 'reply'; id: number; reply: DeviceCalls[DeviceCallType]['reply'] }
  /** The executions run since the last report, summed (whichever thread their requests came from). */
  | { type: 'report'; report: ExecutionReport }
  /** A control call failed; errors cross threads as plain data. */
  | { type: 'failed'; id: number; error: ErrorData }
  /** Something the operator should hear about (the main thread logs it). */
  | { type: 'warning'; message: string; fields: Record<string, number | string> }
  /**
   * The process's context on this device's GPU is poisoned (a sticky CUDA error: every later call
   * fails): the device can serve nothing more in this process. Sent once; everything after is refused.
   */
  | { type: 'outOfService'; reason: string; cudaError: number };
