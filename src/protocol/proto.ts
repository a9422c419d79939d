/** Load the KServe V2 service definition from proto/ with @grpc/proto-loader. */
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';

/** proto/ at the repository root (this file runs from dist/protocol/). */
export const PROTO_DIR = fileURLToPath(new URL('../../proto/', import.meta.url));

/**
 * keepCase: field names as in the .proto (raw_input_contents);
 * longs: String, so int64/uint64 values keep every digit;
 * enums: String, so DataType travels as 'TYPE_FP32';
 * defaults: absent fields read as their defaults ([] for repeated, {} for maps);
 * oneofs: a virtual field names which member of a oneof is set.
 */
export const LOADER_OPTIONS: protoLoader.Options = {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
  includeDirs: [PROTO_DIR],
};

/** Stowage's control service (proto/control.proto), served beside the KServe one. */
export function loadControlClient(): grpc.ServiceClientConstructor {
  const definition = protoLoader.loadSync('control.proto', LOADER_OPTIONS);
  const pkg = grpc.loadPackageDefinition(definition) as unknown as {
    stowage: { control: { ModelControl: grpc.ServiceClientConstructor } };
  };
  return pkg.stowage.control.ModelControl;
}

/** The client constructor; its `.service` is the definition the server registers. */
export function loadInferenceClient(): grpc.ServiceClientConstructor {
  const definition = protoLoader.loadSync('grpc_service.proto', LOADER_OPTIONS);
  const pkg = grpc.loadPackageDefinition(definition) as unknown as {
    inference: { GRPCInferenceService: grpc.ServiceClientConstructor };
  };
  return pkg.inference.GRPCInferenceService;
}
