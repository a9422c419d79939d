/**
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
import type * as grpc from '@grpc/grpc-js';

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

/** True when `request`'s bytes are views of an ArrayBuffer that belongs to it alone (see the header). */
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
