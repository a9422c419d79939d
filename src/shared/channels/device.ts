/**
 * The channel between the main thread and a device actor: every message, both
 * ways, typed here and nowhere else. Both sides `import type` this file.
 *
 * Ownership: tensor bytes travel in `WireTensor.data`. The sender lists
 * `data.buffer` in the transfer list, so after postMessage the bytes belong to
 * the receiver and the sender's view is detached. Every buffer sent this way
 * is a whole ArrayBuffer created for the purpose (never Node's shared Buffer
 * pool, which cannot be transferred).
 */
import type { MessagePort } from 'node:worker_threads';
import type { ModelSpec } from '../model-spec.js';
import type { Residency, SchedulerConfig } from '../config-schema.js';
import type { Datatype } from '../dtypes.js';
import type { ErrorData } from '../errors.js';
import type { CompiledExecutable } from './compiler.js';

/** A tensor's place in a region, as it travels to the device actor. */
export interface RegionSlice {
  regionId: number;
  key: string;
  /** The open descriptor the device maps from (the same process: threads share descriptors). */
  fd: number;
  regionOffset: number;
  regionByteSize: number;
  /** Within the region. */
  offset: number;
  byteSize: number;
}

/** A tensor in KServe's raw wire layout: row-major little-endian elements; BYTES elements length-prefixed. */
export interface WireTensor {
  name: string;
  datatype: Datatype;
  shape: number[];
  /** The bytes; empty when they are in shared memory (`shm`). */
  data: Uint8Array;
  /** Inputs: where the bytes are. Outputs: where they were written (nothing is returned inline). */
  shm?: RegionSlice;
}

/** Given to the worker at start-up (as workerData). */
export interface DeviceInit {
  deviceId: number;
  /** ONNX Runtime intra-op threads; 0 lets ONNX Runtime choose. */
  intraOpThreads: number;
  /** The device's scheduler settings; per-model policies come with each load instead. */
  scheduler: DeviceScheduling;
  /** The on-demand weight cache; null when it is off (every model's weights embedded and resident). */
  weights: WeightCacheInit | null;
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
 * Host RAM changes a device actor reports (src/weights/host-weights.ts keeps the process's copy):
 * buffers it read from disk, and which tensors each instance now keeps in host RAM.
 */
export interface HostUpdate {
  created: Record<string, SharedArrayBuffer>;
  /** instance -> its tensor keys in host RAM (empty: none, e.g. unpinned). */
  holdings: Record<string, string[]>;
}

/** What one execution's model cost in weight traffic (a hit costs nothing). */
export interface WeightLoad {
  hit: boolean;
  loadedBytes: number;
  /** Of loadedBytes, read from the compile cache on disk (`unpinned` models). */
  diskBytes: number;
  loadMs: number;
  /** Models evicted to make room. */
  evicted: string[];
}

/** Where the time of one execution went, in nanoseconds (Triton's statistics vocabulary). */
export interface ExecutionTiming {
  computeInputNs: number;
  computeInferNs: number;
  computeOutputNs: number;
  /** Rows of the requests that rode in this execution. */
  batchRows: number;
  /** Rows actually executed: batchRows padded up to a compiled batch size. */
  executedBatchSize: number;
  /** How many requests rode in this execution. */
  requests: number;
}

/** One request's share of an execution, as the device answers it. */
export interface ExecutedRequest {
  id: number;
  /** The outputs as tensors; empty when the request asked for `response`. */
  outputs: WireTensor[];
  /**
   * The request's ModelInferResponse, encoded on the device (protocol/infer-response-wire.ts) when
   * the command asked for it with `encode`: the main thread sends it as it is.
   */
  response?: Uint8Array;
  /** Time from the main thread's hand-over to the start of the execution. */
  queueNs: number;
}

export interface InferCommand {
  type: 'infer';
  id: number;
  /** The loaded instance to run (`name#generation`: a reload loads a new one beside the old). */
  instance: string;
  /** One tensor per manifest input, in the manifest's order (the codec guarantees it); empty with `inputsFromHook`. */
  inputs: WireTensor[];
  /**
   * The inputs come from the hook thread running the request's preprocess hook, over that
   * thread's door to this device (`hookDoor`), as a `HookInputs` with this id (checked against the
   * manifest there), so that they never pass through the main thread. They may arrive before
   * this command does. The request joins its queue when both are here; if the hook fails, the
   * main thread cancels it.
   */
  inputsFromHook?: boolean;
  /** Output names to return, in response order (never empty: the codec fills in every output). */
  outputs: string[];
  /** Per output: the shared-memory slice to write it into instead of returning it, or null. */
  outputRegions: (RegionSlice | null)[];
  /**
   * Answer with the encoded ModelInferResponse for the client's request `id` instead of tensors
   * (a request off the wire whose outputs go straight back); null: tensors (hooks read them).
   */
  encode: { id: string } | null;
  /** The client's absolute deadline, ms since the epoch (performance.timeOrigin + performance.now()); Infinity if none. */
  deadlineMs: number;
  /** When the main thread handed the request over, same clock. */
  enqueuedAtMs: number;
}

/** hook thread -> device actor, over the thread's door: one request's preprocessed inputs. */
export interface HookInputs {
  /** The InferCommand's id. */
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
  /** scheduler.models.<name>.max_batch_size; absent: the model's largest compiled batch. */
  maxBatchSize?: number;
}

/**
 * One model's policy on one device as it stands: the node file's for that worker with the
 * run-time changes over it. The main thread owns it (actors/gateway/model-policies.ts); loads
 * carry it, so the device keeps no policy of its own beyond its loaded instances.
 */
export interface ModelPolicy extends SchedulingPolicy {
  residency: Residency;
}

/** One loaded instance as the device sees it. */
export interface InstanceStatus {
  instance: string;
  model: string;
  queued: number;
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
}

/**
 * The device's control calls: each request (main thread -> device) and the reply it gets, by
 * name. The handle's `call(type, request)` returns `DeviceCalls[type]['reply']`; the device
 * answers a `DeviceReply` with the same id, or `failed` with the error.
 */
export interface DeviceCalls {
  /** Open the weightless sessions of one version of a model (compiled already) under its own instance key. */
  load: {
    request: { instance: string; spec: ModelSpec; policy: ModelPolicy; compiled: CompiledExecutable[] | null; hostOffer: Record<string, SharedArrayBuffer> };
    reply: { loadMs: number; compiled: { files: number; cacheHits: number }; weightBytes: number; memory: WeightMemory | null; load: WeightLoad | null; host: HostUpdate };
  };
  unload: { request: { instance: string }; reply: { memory: WeightMemory | null } };
  /** Every loaded instance's queue and learned costs. */
  status: { request: Record<string, never>; reply: { instances: InstanceStatus[] } };
  /** A model's scheduling policy changed: apply it to its loaded instances (their queued requests included). */
  setPolicy: { request: { model: string; policy: SchedulingPolicy }; reply: Record<string, never> };
  /** Move a model's loaded instances to another residency; all or nothing. */
  setResidency: { request: { model: string; residency: Residency; hostOffer: Record<string, SharedArrayBuffer> }; reply: { memory: WeightMemory | null; host: HostUpdate } };
  /** Close the holes in the weight arena now. */
  compact: { request: Record<string, never>; reply: { movedBytes: number; memory: WeightMemory | null } };
  /** Make an instance's weights resident now (the gateway moving a model here). */
  prefetch: { request: { instance: string }; reply: { load: WeightLoad | null; memory: WeightMemory | null } };
}
export type DeviceCallType = keyof DeviceCalls;

/** A control call as it travels. */
export type DeviceCall = { [K in DeviceCallType]: { type: K; id: number } & DeviceCalls[K]['request'] }[DeviceCallType];

/** main thread -> device actor */
export type ToDevice =
  | DeviceCall
  | InferCommand
  /** Drop a queued infer; one already running finishes and its result is discarded. */
  | { type: 'cancel'; id: number }
  /** A shared-memory region was unregistered: drop the cached mapping (requests using it keep theirs). */
  | { type: 'forgetRegion'; regionId: number }
  /**
   * A hook thread's door: the port over which it sends this device the inputs of requests whose
   * preprocess hook it ran (HookInputs). A hook thread makes one per device actor it feeds
   * (actors/hooks/worker.ts) and hands the other end over with its first result.
   */
  | { type: 'hookDoor'; port: MessagePort };

/** device actor -> main thread */
export type FromDevice =
  | { type: 'started' }
  /** The answer to a control call. */
  | { type: 'reply'; id: number; reply: DeviceCalls[DeviceCallType]['reply'] }
  /** One execution: every request that rode in it, answered in one message (their outputs may share buffers). */
  | { type: 'executed'; model: string; instance: string; results: ExecutedRequest[]; timing: ExecutionTiming; queued: number; load: WeightLoad | null; memory: WeightMemory | null }
  /** A control call or an infer failed; errors cross threads as plain data. */
  | { type: 'failed'; id: number; error: ErrorData }
  /** Something the operator should hear about (the main thread logs it). */
  | { type: 'warning'; message: string; fields: Record<string, number | string> };

/** The clock both threads share for deadlines (Date.now() has ms resolution only). */
export function nowMs(): number {
  return performance.timeOrigin + performance.now();
}
