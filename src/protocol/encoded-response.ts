/**
 * On the main thread: a ModelInferResponse the device encoded (shared/infer-response-wire.ts), as
 * it arrived, and the service definition that hands its bytes to grpc-js instead of encoding.
 */
import type * as grpc from '@grpc/grpc-js';
import { RESPONSE_HEADROOM, streamFrame } from '../shared/infer-response-wire.js';

/** On the main thread: a response the device encoded, as it arrived (see the header). */
export class EncodedResponse {
  readonly #bytes: Uint8Array;

  constructor(bytes: Uint8Array) {
    this.#bytes = bytes;
  }

  /** The ModelInferResponse message. */
  message(): Buffer {
    const b = this.#bytes;
    return Buffer.from(b.buffer, b.byteOffset + RESPONSE_HEADROOM, b.byteLength - RESPONSE_HEADROOM);
  }

  /** A ModelStreamInferResponse carrying it (field 2, no error_message), written in place in the headroom. */
  streamMessage(): Buffer {
    const frame = streamFrame(this.#bytes);
    return Buffer.from(frame.buffer, frame.byteOffset, frame.byteLength);
  }
}

/**
 * The service definition with ModelInfer's and ModelStreamInfer's response serializers passing an
 * EncodedResponse through as its bytes (anything else is encoded as before).
 */
export function passEncodedResponses(definition: grpc.ServiceDefinition): grpc.ServiceDefinition {
  const passed: Record<string, grpc.MethodDefinition<unknown, object>> = { ...definition };
  const infer = definition.ModelInfer;
  if (infer) {
    const serialize = infer.responseSerialize;
    passed.ModelInfer = { ...infer, responseSerialize: (value: object) => (value instanceof EncodedResponse ? value.message() : serialize(value)) };
  }
  const stream = definition.ModelStreamInfer;
  if (stream) {
    const serialize = stream.responseSerialize;
    passed.ModelStreamInfer = {
      ...stream,
      responseSerialize: (value: { error_message?: string; infer_response?: unknown }) =>
        (value.infer_response instanceof EncodedResponse && !value.error_message ? value.infer_response.streamMessage() : serialize(value)),
    };
  }
  return passed as grpc.ServiceDefinition;
}
