/**
 * The replies of GRPCInferenceService's RPCs as this client receives them: decoded by
 * @grpc/proto-loader with the options of protocol/proto.ts (field names as in the .proto, 64-bit
 * integers as decimal strings, enums as their names, absent fields filled with defaults). What
 * `InferenceClient.call(rpc)` resolves to, by RPC name. ModelConfig's message is large: only its
 * most used fields are typed here; proto/model_config.proto has the rest.
 */
import type { InferParameter, ModelInferResponse } from '../protocol/types.js';

/** A tensor as model metadata describes it; -1 marks the batch axis. */
export interface TensorMetadata {
  name: string;
  datatype: string;
  shape: string[];
}

/** Triton's StatisticDuration: a count and cumulative nanoseconds. */
export interface StatisticDuration {
  count: string;
  ns: string;
}

export interface ModelStatistics {
  name: string;
  version: string;
  /** Milliseconds since the epoch. */
  last_inference: string;
  /** Samples: each row of a batch counts. */
  inference_count: string;
  /** Executions: a coalesced batch counts once. */
  execution_count: string;
  inference_stats: Record<'success' | 'fail' | 'queue' | 'compute_input' | 'compute_infer' | 'compute_output' | 'cache_hit' | 'cache_miss', StatisticDuration>;
  batch_stats: { batch_size: string; compute_input: StatisticDuration; compute_infer: StatisticDuration; compute_output: StatisticDuration }[];
  memory_usage: { type: string; id: string; byte_size: string }[];
}

/** One tensor of a Triton model configuration. */
export interface ModelConfigTensor {
  name: string;
  data_type: string;
  dims: string[];
  reshape: { shape: string[] } | null;
}

/** The parts of Triton's ModelConfig a client most often reads. */
export interface ModelConfig {
  name: string;
  platform: string;
  backend: string;
  max_batch_size: number;
  input: ModelConfigTensor[];
  output: ModelConfigTensor[];
  dynamic_batching: { preferred_batch_size: number[]; max_queue_delay_microseconds: string; priority_levels: string; default_priority_level: string } | null;
  parameters: Record<string, { string_value: string }>;
}

/** A log setting's value, as LogSettings answers it. */
export interface LogSettingValue {
  parameter_choice?: 'bool_param' | 'uint32_param' | 'string_param';
  bool_param?: boolean;
  uint32_param?: number;
  string_param?: string;
}

/** One answer on a ModelStreamInfer stream: a response, or the error of the request it answers. */
export interface ModelStreamInferResponse {
  error_message: string;
  infer_response: InferenceReplies['ModelInfer'] | null;
}

/** Each RPC's reply, by name. */
export interface InferenceReplies {
  ServerLive: { live: boolean };
  ServerReady: { ready: boolean };
  ModelReady: { ready: boolean };
  ServerMetadata: { name: string; version: string; extensions: string[] };
  ModelMetadata: { name: string; versions: string[]; platform: string; inputs: TensorMetadata[]; outputs: TensorMetadata[] };
  ModelInfer: ModelInferResponse & { parameters: Record<string, InferParameter> };
  ModelConfig: { config: ModelConfig };
  ModelStatistics: { model_stats: ModelStatistics[] };
  RepositoryIndex: { models: { name: string; version: string; state: string; reason: string }[] };
  RepositoryModelLoad: Record<string, never>;
  RepositoryModelUnload: Record<string, never>;
  SystemSharedMemoryStatus: { regions: Record<string, { name: string; key: string; offset: string; byte_size: string }> };
  SystemSharedMemoryRegister: Record<string, never>;
  SystemSharedMemoryUnregister: Record<string, never>;
  CudaSharedMemoryStatus: { regions: Record<string, { name: string; device_id: string; byte_size: string }> };
  CudaSharedMemoryRegister: Record<string, never>;
  CudaSharedMemoryUnregister: Record<string, never>;
  LogSettings: { settings: Record<string, LogSettingValue> };
}
export type InferenceRpc = keyof InferenceReplies;
