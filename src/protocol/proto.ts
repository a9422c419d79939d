/**
 * The KServe V2 and control service definitions, loaded from proto/ with @grpc/proto-loader, and
 * how their requests are read off the wire: strictly (wire-check.ts), and with the requests that own
 * the memory their tensor bytes sit in marked (below), so those bytes can move to a device as they are.
 */
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

/*
 * Which decoded inference requests own the memory their tensor bytes sit in.
 *
 * grpc-js joins a message's HTTP/2 frames into one Buffer (its stream decoder concatenates the
 * 5-byte gRPC prefix and the message) and hands `subarray(5)` of it to the deserializer;
 * protobufjs decodes `bytes` fields as views of that Buffer. From half of `Buffer.poolSize` on
 * (4 KiB on Node 22, 32 KiB on Node 24), Buffer.concat allocates an ArrayBuffer of exactly the
 * framed message's size for it alone; below, the bytes sit in Node's shared pool beside other data. Nothing in grpc-js
 * touches the Buffer after deserializing, so when the geometry shows an ArrayBuffer of its own, the request's tensor
 * views can be handed to the device actor (transferred) as they are: no copy on the main thread.
 * In the pool, or in any shape we do not recognise, the codec copies as before.
 */
const owning = new WeakSet<object>();
/** grpc-js's message prefix (compressed flag and length) before the bytes it deserializes. */
const GRPC_PREFIX_BYTES = 5;

/**
 * Whether `bytes` is the whole of its (non-shared) ArrayBuffer but the `prefix` bytes before it.
 * A REST body (prefix 0) read in several chunks is joined into one of its own; a small one sits
 * in Node's pool and is not.
 */
export function ownsArrayBuffer(bytes: Buffer, prefix: number): boolean {
  const memory = bytes.buffer;
  return !(memory instanceof SharedArrayBuffer) && bytes.byteOffset === prefix && memory.byteLength === bytes.byteLength + prefix;
}

/** True when `request`'s bytes are views of an ArrayBuffer that belongs to it alone (see above). */
export function ownsItsBuffer(request: object): boolean {
  return owning.has(request);
}

/** The service definition with `methods`' request deserializers marking the requests that own their buffer. */
export function markOwnedBuffers(definition: grpc.ServiceDefinition, methods: readonly string[]): grpc.ServiceDefinition {
  const marked: Record<string, grpc.MethodDefinition<object, unknown>> = { ...definition };
  for (const name of methods) {
    const method = definition[name];
    const deserialize = method.requestDeserialize;
    marked[name] = {
      ...method,
      requestDeserialize: (message: Buffer) => {
        const request = deserialize(message);
        if (ownsArrayBuffer(message, GRPC_PREFIX_BYTES)) owning.add(request);
        return request;
      },
    };
  }
  return marked as grpc.ServiceDefinition;
}
