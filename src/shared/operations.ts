/**
 * Every operation the edges answer besides inferences, as plain functions of a request: KServe's
 * and Triton's (node/inference-service.ts implements them), Stowage's control service
 * (node/control-service.ts) and the health status (node/health.ts). The gRPC tables
 * (protocol/grpc-services.ts, protocol/health-service.ts) and the REST routes
 * (protocol/rest-routes.ts) call them, on the main
 * thread as they are, or from an edge thread through its port (actors/edge/: each call posted to
 * the main thread and its reply posted back), which is why every reply may be a promise and every
 * request and reply is data. Requests and replies hold plain values, in the messages' field names:
 * 64-bit integers as numbers (every counter the server keeps is one), a log setting as its value.
 * Each protocol encodes them its own way: protobufjs takes numbers for int64 fields
 * (protocol/grpc-services.ts reads gRPC's int64 requests and log settings into these values), and
 * the REST routes write them as JSON as they are.
 */
import type { ModelControlStatusReply } from './control-messages.js';

type Awaitable<T> = T | Promise<T>;

/** Requests that name a model (ModelReady, ModelMetadata, ModelConfig, ModelStatistics). */
export interface ModelRef {
  name: string;
  version: string;
}

/**
 * A log setting's value (LogSettings: booleans for the switches, a whole number for the verbosity, strings for file and
 * format).
 */
export type LogSettingValue = boolean | number | string;

/** A tensor as ModelMetadata describes it. */
interface MetadataTensor {
  name: string;
  datatype: string;
  shape: number[];
}

/** What a gRPC health probe hears for a name (grpc.health.v1). */
export type ServingStatus = 'SERVING' | 'NOT_SERVING';

export interface Operations {
  ServerLive(): Awaitable<{ live: boolean }>;
  ServerReady(): Awaitable<{ ready: boolean }>;
  ModelReady(req: ModelRef): Awaitable<{ ready: boolean }>;
  ServerMetadata(): Awaitable<{ name: string; version: string; extensions: string[] }>;
  ModelMetadata(req: ModelRef): Awaitable<{ name: string; versions: string[]; platform: string; inputs: MetadataTensor[]; outputs: MetadataTensor[] }>;
  /** Triton's ModelConfig message, as model-config.ts writes it. */
  ModelConfig(req: ModelRef): Awaitable<{ config: Record<string, unknown> }>;
  RepositoryIndex(req: { repository_name: string; ready: boolean }): Awaitable<{ models: { name: string; version: string; state: string; reason: string }[] }>;
  RepositoryModelLoad(req: { model_name: string; parameters: Record<string, unknown> }): Awaitable<Record<string, never>>;
  RepositoryModelUnload(req: { model_name: string }): Awaitable<Record<string, never>>;
  /** Triton's ModelStatistics messages, as node/statistics.ts writes them. */
  ModelStatistics(req: ModelRef): Awaitable<{ model_stats: Record<string, unknown>[] }>;
  SystemSharedMemoryRegister(req: { name: string; key: string; offset: number; byte_size: number }): Awaitable<Record<string, never>>;
  SystemSharedMemoryStatus(req: { name: string }): Awaitable<{ regions: Record<string, { name: string; key: string; offset: number; byte_size: number }> }>;
  SystemSharedMemoryUnregister(req: { name: string }): Awaitable<Record<string, never>>;
  CudaSharedMemoryStatus(req: { name: string }): Awaitable<{ regions: Record<string, { name: string; device_id: number; byte_size: number }> }>;
  CudaSharedMemoryUnregister(req: { name: string }): Awaitable<Record<string, never>>;
  CudaSharedMemoryRegister(req: { name: string; raw_handle: Uint8Array; device_id: number; byte_size: number }): Awaitable<Record<string, never>>;
  LogSettings(req: { settings: Record<string, LogSettingValue> }): Awaitable<{ settings: Record<string, LogSettingValue> }>;

  /** Stowage's control service (proto/control.proto), its messages' fields. */
  ModelControlStatus(req: { name: string; window_seconds: number }): Awaitable<ModelControlStatusReply<number>>;
  SetModelPolicy(req: { name: string; weight: number; max_batch_size: number }): Awaitable<Record<string, never>>;
  SetModelResidency(req: { name: string; residency: string }): Awaitable<Record<string, never>>;
  CompactMemory(req: { device: number }): Awaitable<{ moved_bytes: number }>;
  PrefetchModel(req: { name: string }): Awaitable<{ resident_bytes: number }>;

  /** What a health probe of `service` hears now (health-service.ts). */
  HealthStatus(req: { service: string }): Awaitable<{ status: ServingStatus }>;
}

export type OperationName = keyof Operations;

/** Every operation's name, for a table of them made in another thread (actors/edge/). */
export const OPERATION_NAMES: readonly OperationName[] = [
  'ServerLive', 'ServerReady', 'ModelReady', 'ServerMetadata', 'ModelMetadata', 'ModelConfig',
  'RepositoryIndex', 'RepositoryModelLoad', 'RepositoryModelUnload', 'ModelStatistics',
  'SystemSharedMemoryRegister', 'SystemSharedMemoryStatus', 'SystemSharedMemoryUnregister',
  'CudaSharedMemoryStatus', 'CudaSharedMemoryUnregister', 'CudaSharedMemoryRegister', 'LogSettings',
  'ModelControlStatus', 'SetModelPolicy', 'SetModelResidency', 'CompactMemory', 'PrefetchModel', 'HealthStatus',
];

/** The operations of the inference service's gRPC table (the rest are control's and health's). */
export const KSERVE_OPERATIONS: readonly OperationName[] = OPERATION_NAMES.slice(0, 17);
/** Stowage's control service. */
export const CONTROL_OPERATIONS: readonly OperationName[] = ['ModelControlStatus', 'SetModelPolicy', 'SetModelResidency', 'CompactMemory', 'PrefetchModel'];

/** What operation `K` is asked: its one argument (undefined for those that take none). */
export type OperationRequest<K extends OperationName> = Parameters<Operations[K]> extends [infer R] ? R : undefined;
/** What operation `K` answers. */
export type OperationReply<K extends OperationName> = Awaited<ReturnType<Operations[K]>>;
/** One operation called across threads: its name and its request, typed together. */
export type OperationCall = { [K in OperationName]: { op: K; request: OperationRequest<K> } }[OperationName];
/** What any operation answers. */
export type AnyOperationReply = OperationReply<OperationName>;

/** Run `call` on `ops` (the thread that has them); rejects with its error. */
export async function callOperation(ops: Operations, call: OperationCall): Promise<AnyOperationReply> {
  // The union of calls does not tell the compiler that this request is this operation's: it is, by OperationCall's
  // construction.
  const operation = ops[call.op] as ((request: OperationCall['request']) => Awaitable<AnyOperationReply>) | undefined;
  if (typeof operation !== 'function') throw new TypeError(`no operation ${JSON.stringify(call.op)}`);
  return operation.call(ops, call.request);
}

/** Every operation, each one a call that `send` carries to the thread that has them. */
export function operationsVia(send: (call: OperationCall) => Promise<AnyOperationReply>): Operations {
  const ops: Partial<Record<OperationName, (request: OperationCall['request']) => Promise<AnyOperationReply>>> = {};
  for (const op of OPERATION_NAMES) ops[op] = (request) => send({ op, request } as OperationCall);
  return ops as Operations;
}
