/** Load the KServe V2 service definition from proto/ with @grpc/proto-loader. */
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { WireSchema } from './wire-check.js';

let inferenceSchema: WireSchema | undefined;

/** The KServe messages' wire schema: how a gateway checks the raw bytes it forwards. */
export function inferenceWireSchema(): WireSchema {
  if (!inferenceSchema) loadInferenceClient();
  return inferenceSchema as WireSchema;
}

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

/**
 * Make every request deserializer of `service` in `definition` check the wire strictly first
 * (wire-check.ts), so that bytes that are not the request type throw, naming the field, instead
 * of decoding into a plausible message. Returns the schema, for readers of raw bytes (a gateway).
 */
function strictRequests(definition: protoLoader.PackageDefinition, pkg: string, service: string): WireSchema {
  const schema = new WireSchema(definition, pkg);
  for (const method of Object.values(definition[`${pkg}.${service}`] as protoLoader.ServiceDefinition)) {
    const type = `${pkg}.${(method.requestType.type as { name: string }).name}`;
    const decode = method.requestDeserialize;
    method.requestDeserialize = (bytes: Buffer) => {
      schema.check(bytes, type);
      return decode(bytes);
    };
  }
  return schema;
}

/** Stowage's control service (proto/control.proto), served beside the KServe one. */
export function loadControlClient(): grpc.ServiceClientConstructor {
  const definition = protoLoader.loadSync('control.proto', LOADER_OPTIONS);
  strictRequests(definition, 'stowage.control', 'ModelControl');
  const pkg = grpc.loadPackageDefinition(definition) as unknown as {
    stowage: { control: { ModelControl: grpc.ServiceClientConstructor } };
  };
  return pkg.stowage.control.ModelControl;
}

/** The client constructor; its `.service` is the definition the server registers. */
export function loadInferenceClient(): grpc.ServiceClientConstructor {
  const definition = protoLoader.loadSync('grpc_service.proto', LOADER_OPTIONS);
  inferenceSchema = strictRequests(definition, 'inference', 'GRPCInferenceService');
  const pkg = grpc.loadPackageDefinition(definition) as unknown as {
    inference: { GRPCInferenceService: grpc.ServiceClientConstructor };
  };
  return pkg.inference.GRPCInferenceService;
}
