/**
 * The KServe V2 messages as the main thread sees them after @grpc/proto-loader
 * decodes them (keepCase, longs as strings, enums as strings, defaults and
 * oneof names filled in: see proto.ts). Only what the handlers read is typed.
 */

export interface InferParameter {
  parameter_choice?: 'bool_param' | 'int64_param' | 'string_param' | 'double_param' | 'uint64_param';
  bool_param?: boolean;
  int64_param?: string;
  string_param?: string;
  double_param?: number;
  uint64_param?: string;
}

export type Parameters = Record<string, InferParameter>;

export interface InferTensorContents {
  bool_contents: boolean[];
  int_contents: number[];
  int64_contents: string[];
  uint_contents: number[];
  uint64_contents: string[];
  fp32_contents: number[];
  fp64_contents: number[];
  bytes_contents: Buffer[];
}

export interface InferInputTensor {
  name: string;
  datatype: string;
  shape: string[];
  parameters: Parameters;
  contents: InferTensorContents | null;
}

export interface InferRequestedOutputTensor {
  name: string;
  parameters: Parameters;
}

export interface ModelInferRequest {
  model_name: string;
  model_version: string;
  id: string;
  parameters: Parameters;
  inputs: InferInputTensor[];
  outputs: InferRequestedOutputTensor[];
  raw_input_contents: Buffer[];
}

export interface InferOutputTensor {
  name: string;
  datatype: string;
  shape: number[];
}

export interface ModelInferResponse {
  model_name: string;
  model_version: string;
  id: string;
  outputs: InferOutputTensor[];
  raw_output_contents: Buffer[];
}

export type { ModelRef } from '../shared/operations.js';
