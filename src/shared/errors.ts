/**
 * Every error Stowage answers with, in one place: a stable code, the gRPC
 * status it maps to, and a factory that writes the message. Errors cross
 * threads as plain `ErrorData` and are rebuilt with `fromErrorData`; the gRPC
 * edge maps anything thrown to a status with `errorToStatus`.
 *
 * Status numbers are gRPC's canonical codes, spelled out here so that worker
 * threads need not load grpc-js to report an error.
 */

export const Status = {
  OK: 0,
  CANCELLED: 1,
  UNKNOWN: 2,
  INVALID_ARGUMENT: 3,
  DEADLINE_EXCEEDED: 4,
  NOT_FOUND: 5,
  ALREADY_EXISTS: 6,
  RESOURCE_EXHAUSTED: 8,
  FAILED_PRECONDITION: 9,
  UNIMPLEMENTED: 12,
  INTERNAL: 13,
  UNAVAILABLE: 14,
} as const;
export type StatusCode = (typeof Status)[keyof typeof Status];

/** Each code, its gRPC status and what it means (docs/operations.md's error table mirrors this). */
export const ERROR_CODES = {
  STOWAGE_MODEL_NOT_FOUND: { status: Status.NOT_FOUND, means: 'no model (or model version) of that name in the repository' },
  STOWAGE_MODEL_NOT_READY: { status: Status.UNAVAILABLE, means: 'the model exists but is loading, failed to load or is unloaded' },
  STOWAGE_INVALID_TENSOR: { status: Status.INVALID_ARGUMENT, means: 'an input or requested output does not match the model: name, datatype, shape or byte size' },
  STOWAGE_INVALID_REQUEST: { status: Status.INVALID_ARGUMENT, means: 'the request is malformed apart from its tensors (parameters, raw contents count)' },
  STOWAGE_UNDECODABLE: { status: Status.INVALID_ARGUMENT, means: 'the request\'s bytes are not a protobuf message of the RPC\'s type; on a ModelStreamInfer stream this ends the stream after the requests before it are answered' },
  STOWAGE_UNSUPPORTED: { status: Status.INVALID_ARGUMENT, means: 'the request asks for a feature this server does not provide (sequences, classification, CUDA shared memory)' },
  STOWAGE_QUEUE_FULL: { status: Status.RESOURCE_EXHAUSTED, means: 'the model\'s queue on the device holds scheduler.max_queue_depth requests already' },
  STOWAGE_HOOK_FAILED: { status: Status.INTERNAL, means: 'a bundle\'s model.js hook threw, rejected, or returned the wrong tensors' },
  STOWAGE_MODEL_CONTROL: { status: Status.FAILED_PRECONDITION, means: 'the model control mode does not allow the operation (static: the model set is fixed)' },
  STOWAGE_WEIGHTS_TOO_LARGE: { status: Status.RESOURCE_EXHAUSTED, means: 'the model\'s weights do not fit in the device\'s weight budget (beside the models pinned with residency: device)' },
  STOWAGE_DEVICE_MEMORY_EXHAUSTED: { status: Status.RESOURCE_EXHAUSTED, means: 'the GPU (or ONNX Runtime\'s arena under runtime.cuda.ort_arena_limit_bytes) ran out of memory loading or running the model; the message says what holds the memory and what to change' },
  STOWAGE_QUOTA_EXCEEDED: { status: Status.RESOURCE_EXHAUSTED, means: 'the request\'s tenant or model is over its quota (global.quotas): requests in flight, or device-seconds per second' },
  STOWAGE_SERVER_BUSY: { status: Status.RESOURCE_EXHAUSTED, means: 'the inference requests in flight already hold endpoints.max_inflight_bytes of tensors (or number endpoints.max_concurrent_requests)' },
  STOWAGE_CANCELLED: { status: Status.CANCELLED, means: 'the client cancelled the request' },
  STOWAGE_SHUTTING_DOWN: { status: Status.UNAVAILABLE, means: 'the server is shutting down: requests in flight finish, new ones are refused (retry on another replica)' },
  STOWAGE_SHM_REGION_EXISTS: { status: Status.ALREADY_EXISTS, means: 'a system shared-memory region of that name is already registered' },
  STOWAGE_SHM_REGION_NOT_FOUND: { status: Status.NOT_FOUND, means: 'no system shared-memory region of that name is registered' },
  STOWAGE_SHM_INVALID: { status: Status.INVALID_ARGUMENT, means: 'a shared-memory key, offset or size is invalid or out of the region\'s bounds' },
  STOWAGE_SHM_KEY_NOT_FOUND: { status: Status.NOT_FOUND, means: 'no shared-memory object of that key exists on the server\'s machine (create it before registering it)' },
  STOWAGE_SHM_OPEN_FAILED: { status: Status.INTERNAL, means: 'the shared-memory object could not be opened or mapped' },
  STOWAGE_UNIMPLEMENTED_RPC: { status: Status.UNIMPLEMENTED, means: 'the RPC is part of the protocol but not implemented by this server' },
  STOWAGE_DEADLINE_EXCEEDED: { status: Status.DEADLINE_EXCEEDED, means: 'the request\'s deadline passed before it could run' },
  STOWAGE_DEVICE_UNAVAILABLE: { status: Status.UNAVAILABLE, means: 'the device actor serving the request stopped or crashed' },
  STOWAGE_EXECUTION_FAILED: { status: Status.INTERNAL, means: 'ONNX Runtime failed while running the model' },
  STOWAGE_BUNDLE_INVALID: { status: Status.FAILED_PRECONDITION, means: 'a bundle was refused at load: its manifest or ONNX files are wrong or disagree' },
  STOWAGE_CONFIG_INVALID: { status: Status.INVALID_ARGUMENT, means: 'the node configuration file or an environment override is invalid' },
  STOWAGE_CUDA_UNAVAILABLE: { status: Status.UNAVAILABLE, means: 'backend cuda cannot start: the CUDA provider, a CUDA library, the driver or a GPU is missing' },
  STOWAGE_INTERNAL: { status: Status.INTERNAL, means: 'a bug: an unexpected failure inside the server' },
} as const;
export type ErrorCode = keyof typeof ERROR_CODES;

/**
 * The refusals an overloaded server answers at the rate it is sent them: their stacks say nothing (where they are
 * thrown is in their code), and capturing one cost ~15 µs of the ~140 µs a quota refusal takes the edge on this
 * machine (bench/quotas.js, profiled), CPU that the requests still admitted need.
 */
const STACKLESS: ReadonlySet<ErrorCode> = new Set<ErrorCode>([
  'STOWAGE_QUOTA_EXCEEDED', 'STOWAGE_SERVER_BUSY', 'STOWAGE_QUEUE_FULL', 'STOWAGE_DEADLINE_EXCEEDED', 'STOWAGE_CANCELLED', 'STOWAGE_SHUTTING_DOWN',
]);

export class StowageError extends Error {
  readonly code: ErrorCode;
  readonly status: StatusCode;

  constructor(code: ErrorCode, message: string) {
    const limit = Error.stackTraceLimit;
    if (STACKLESS.has(code)) Error.stackTraceLimit = 0;
    try {
      super(message);
    } finally {
      Error.stackTraceLimit = limit;
    }
    this.name = 'StowageError';
    this.code = code;
    this.status = ERROR_CODES[code].status;
  }
}

/** One thing wrong with a bundle: the file it is in and what to change. */
export interface BundleProblem {
  readonly file: string;
  readonly message: string;
}

/**
 * STOWAGE_BUNDLE_INVALID with every problem found, not only the first, so that `bundle check`
 * and the server's log let a user fix them all in one pass. Its message lists them all.
 */
export class BundleInvalidError extends StowageError {
  readonly problems: readonly BundleProblem[];

  constructor(bundle: string, problems: readonly BundleProblem[]) {
    super('STOWAGE_BUNDLE_INVALID', `bundle ${quote(bundle)}, ${problems.map((p) => `${p.file}: ${p.message}`).join('; ')}`);
    this.problems = problems;
  }
}

/** How an error travels between threads: plain data, rebuilt on the other side. */
export interface ErrorData {
  code: ErrorCode;
  message: string;
  stack?: string;
}

export function toErrorData(err: unknown): ErrorData {
  if (err instanceof StowageError) return { code: err.code, message: err.message, stack: err.stack };
  const message = err instanceof Error ? err.message : String(err);
  return { code: 'STOWAGE_INTERNAL', message, stack: err instanceof Error ? err.stack : undefined };
}

export function fromErrorData(data: ErrorData): StowageError {
  const code = data.code in ERROR_CODES ? data.code : 'STOWAGE_INTERNAL';
  const err = new StowageError(code, data.message);
  if (data.stack) err.stack = `${err.stack}\n    -- from another thread --\n${data.stack}`;
  return err;
}

/** Map anything thrown to a gRPC status and a message; unknown errors become INTERNAL. */
export function errorToStatus(err: unknown): { code: StatusCode; details: string } {
  if (err instanceof StowageError) return { code: err.status, details: err.message };
  const message = err instanceof Error ? err.message : String(err);
  return { code: Status.INTERNAL, details: `internal error: ${message}` };
}

const QUOTED_CHARACTERS = 200;

/**
 * A client's string (a model, tensor or region name, a key, a path) as an error quotes it: cut
 * short past 200 characters, so that an error about a 1 MB name still fits in a gRPC trailer.
 * One parameter only, so that `names.map(quote)` is safe.
 */
export function quote(s: string): string {
  return s.length > QUOTED_CHARACTERS ? `${JSON.stringify(s.slice(0, QUOTED_CHARACTERS))}... (${s.length} characters)` : JSON.stringify(s);
}

/** A client's shape as an error shows it: any number of dims can come, so past 16 it is cut short. */
export function quoteShape(shape: readonly (number | string)[]): string {
  return shape.length <= 16 ? `[${shape.join(', ')}]` : `[${shape.slice(0, 8).join(', ')}, ... ${shape.length} dims in all]`;
}

const UNDECODABLE = 'the request is not a valid';

/**
 * Whether a status's details say the request could not be decoded (errors.undecodable): how a
 * gateway tells, from a node's answer, that the message it forwarded was broken.
 */
export function isUndecodable(details: string): boolean {
  return details.includes(`: ${UNDECODABLE} `);
}

/** Factories: each gives a fresh error (and stack) with a message a user can act on. */
export const errors = {
  modelNotFound: (name: string, known: readonly string[]) =>
    new StowageError('STOWAGE_MODEL_NOT_FOUND',
      `unknown model ${quote(name)}; the repository serves: ${known.length ? known.join(', ') : '(no models)'}`),
  modelVersionNotFound: (name: string, version: string, versions: readonly string[]) =>
    new StowageError('STOWAGE_MODEL_NOT_FOUND',
      `model ${quote(name)} has no version ${quote(version)}; available versions: ${versions.join(', ')}`),
  modelNotReady: (name: string, state: string, reason: string) =>
    new StowageError('STOWAGE_MODEL_NOT_READY',
      `model ${quote(name)} is not ready (state ${state})${reason ? `: ${reason}` : ''}`),
  invalidTensor: (message: string) => new StowageError('STOWAGE_INVALID_TENSOR', message),
  invalidRequest: (message: string) => new StowageError('STOWAGE_INVALID_REQUEST', message),
  unsupported: (message: string) => new StowageError('STOWAGE_UNSUPPORTED', message),
  undecodable: (rpc: string, type: string, reason: string) =>
    new StowageError('STOWAGE_UNDECODABLE', `${rpc}: ${UNDECODABLE} ${type} message (${reason})`),
  queueFull: (model: string, depth: number) =>
    new StowageError('STOWAGE_QUEUE_FULL',
      `model ${quote(model)} already has ${depth} requests queued (scheduler.max_queue_depth); retry later`),
  hookFailed: (model: string, hook: string, message: string) =>
    new StowageError('STOWAGE_HOOK_FAILED', `model ${quote(model)}: the ${hook} hook in model.js failed: ${message}`),
  modelControl: (rpc: string, mode: string) =>
    new StowageError('STOWAGE_MODEL_CONTROL', `${rpc} is not allowed: model_control_mode is ${mode}, so the model set is fixed at start-up`),
  weightsTooLarge: (model: string, bytes: number, budget: number, pinned: number) =>
    new StowageError('STOWAGE_WEIGHTS_TOO_LARGE',
      `model ${quote(model)} needs ${bytes} bytes of weights on the device, but the device's weight budget is ${budget} bytes`
      + (pinned > 0 ? `, of which ${pinned} are held by models with residency: device` : '')
      + '; raise runtime.cpu_device_memory_bytes or runtime.weight_cache_fraction, or unpin models'),
  quotaExceeded: (subject: string, limit: string, key: string) =>
    new StowageError('STOWAGE_QUOTA_EXCEEDED', `${subject} is over its quota of ${limit} (${key}); retry later`),
  serverBusy: (cap: number) =>
    new StowageError('STOWAGE_SERVER_BUSY', `the server has ${cap} inference requests in flight (endpoints.max_concurrent_requests = ${cap}); retry later`),
  serverBusyBytes: (cap: number, inflight: number, bytes: number) =>
    new StowageError('STOWAGE_SERVER_BUSY', `the inference requests in flight hold ${inflight} bytes of tensors and this one brings ${bytes} more, past endpoints.max_inflight_bytes = ${cap}; retry later`),
  tooManyStatusStreams: (cap: number) =>
    new StowageError('STOWAGE_SERVER_BUSY', `this thread already has ${cap} status streams open (endpoints.max_status_streams = ${cap}); a pooled gateway holds one per node: close the streams nobody reads, or raise the cap`),
  cancelled: () => new StowageError('STOWAGE_CANCELLED', 'cancelled by the client'),
  shuttingDown: () => new StowageError('STOWAGE_SHUTTING_DOWN', 'the server is shutting down: requests in flight finish, new ones are refused; retry on another replica'),
  sharedMemoryExists: (name: string) =>
    new StowageError('STOWAGE_SHM_REGION_EXISTS', `shared-memory region ${quote(name)} is already registered; unregister it first`),
  sharedMemoryNotFound: (name: string) =>
    new StowageError('STOWAGE_SHM_REGION_NOT_FOUND', `no shared-memory region ${quote(name)} is registered`),
  sharedMemoryInvalid: (message: string) => new StowageError('STOWAGE_SHM_INVALID', message),
  sharedMemoryKeyNotFound: (key: string) =>
    new StowageError('STOWAGE_SHM_KEY_NOT_FOUND', `no shared-memory object of key ${quote(key)} exists on this machine (/dev/shm${key}): create it (shm_open) before registering it`),
  sharedMemoryOpenFailed: (key: string, message: string) =>
    new StowageError('STOWAGE_SHM_OPEN_FAILED', `unable to open or map shared-memory key ${quote(key)}: ${message}`),
  unimplementedRpc: (rpc: string) =>
    new StowageError('STOWAGE_UNIMPLEMENTED_RPC', `${rpc} is not implemented by this server`),
  deadlineExceeded: (model: string, waitedMs: number, why = 'it passed its deadline') =>
    new StowageError('STOWAGE_DEADLINE_EXCEEDED',
      `request for model ${quote(model)} did not run after ${Math.round(waitedMs)} ms: ${why}`),
  deadlineUnreachable: (model: string, leftMs: number, aheadMs: number, runMs: number, level: number) =>
    new StowageError('STOWAGE_DEADLINE_EXCEEDED',
      `request for model ${quote(model)} refused before it ran: its deadline is ${Math.max(0, Math.round(leftMs))} ms away, and the device has ${Math.round(aheadMs)} ms of work ahead of it at priority ${level} and above, then its run takes about ${Math.round(runMs)} ms`),
  deviceUnavailable: (device: number, why: string) =>
    new StowageError('STOWAGE_DEVICE_UNAVAILABLE', `device ${device} is unavailable: ${why}`),
  deviceMemoryExhausted: (model: string, message: string) =>
    new StowageError('STOWAGE_DEVICE_MEMORY_EXHAUSTED', `model ${quote(model)}: ${message}`),
  executionFailed: (model: string, message: string) =>
    new StowageError('STOWAGE_EXECUTION_FAILED', `model ${quote(model)} failed in ONNX Runtime: ${message}`),
  bundleInvalid: (bundle: string, file: string, message: string) => new BundleInvalidError(bundle, [{ file, message }]),
  configInvalid: (message: string) => new StowageError('STOWAGE_CONFIG_INVALID', message),
  /** Backend cuda cannot start: a library, the driver or a GPU is missing (the message says which and what to run). */
  cudaUnavailable: (message: string) => new StowageError('STOWAGE_CUDA_UNAVAILABLE', message),
  internal: (message: string) => new StowageError('STOWAGE_INTERNAL', message),
};
