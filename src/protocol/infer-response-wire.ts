/**
 * A ModelInferResponse framed around its outputs where the device wrote them: the gRPC edge's
 * output layout (shared/data-plane.ts). The device writes every output of a request into one
 * buffer laid out as `responseLayout` asks (headroom, then a gap before each output) and
 * transfers it; the edge writes the message's header into the headroom and each
 * raw_output_contents entry's tag and length into its gap, and hands grpc-js the buffer as it is.
 * Output bytes are written once, on the device thread; the main thread writes only the header.
 *
 * The message (grpc_service.proto): 1 model_name, 2 model_version, 3 id, 5 outputs (1 name,
 * 2 datatype, 3 shape as packed int64), 6 raw_output_contents, one entry per output in the
 * outputs' order; an output written to shared memory keeps its place with an empty entry.
 *
 * The header is written right-aligned against the first gap, so the message starts wherever its
 * header's length leaves it; the headroom the layout asks for bounds it by the outputs' names,
 * datatypes and ranks (each dimension at most 10 varint bytes, each field's length at most 5),
 * with STREAM_HEADROOM spare in front for ModelStreamInferResponse's wrapper.
 * Each gap holds the entry's tag (1 byte) and its length in 5 bytes whatever its size: a varint
 * written long, with continuation bits, which every protobuf parser reads as the same number
 * (varints are read up to 10 bytes; protobuf's encoding guide says so, and protobufjs, upb,
 * C++ protobuf and Go's protowire do). That is what lets the device leave the same gap before
 * every output, knowing nothing of protobuf.
 */
import type * as grpc from '@grpc/grpc-js';
import type { OutputFrame, WireTensor } from '../shared/channels/inference.js';
import type { InferenceAnswer, OutputLayout } from '../shared/data-plane.js';
import { errors } from '../shared/errors.js';

/** Spare bytes in front of the message: the tag (1 byte) and length (at most 5) of the stream wrapper. */
export const STREAM_HEADROOM = 8;
/** A raw_output_contents entry's tag and its length, written in 5 bytes. */
export const OUTPUT_GAP = 6;
/** The most bytes a dimension's varint takes (an int64: 10). */
const MAX_DIM_BYTES = 10;

const LEN = 2;
const RAW_OUTPUT_TAG = (6 << 3) | LEN;

function varintSize(value: number): number {
  let size = 1;
  for (let v = value; v >= 0x80; v = Math.floor(v / 0x80)) size++;
  return size;
}

/** Bytes of a length-delimited field `field` (< 16) holding `length` bytes. */
const lenFieldSize = (length: number) => 1 + varintSize(length) + length;
const utf8Size = (s: string) => Buffer.byteLength(s, 'utf8');
const stringFieldSize = (length: number) => (length === 0 ? 0 : lenFieldSize(length));

class Writer {
  at: number;
  readonly bytes: Uint8Array;

  constructor(bytes: Uint8Array, at: number) {
    this.bytes = bytes;
    this.at = at;
  }

  varint(value: number): void {
    let v = value;
    while (v >= 0x80) {
      this.bytes[this.at++] = (v % 0x80) | 0x80;
      v = Math.floor(v / 0x80);
    }
    this.bytes[this.at++] = v;
  }

  /** `value` as a varint of exactly 5 bytes (values below 2^35): the gap's fixed width. */
  varint5(value: number): void {
    let v = value;
    for (let i = 0; i < 4; i++) {
      this.bytes[this.at++] = (v % 0x80) | 0x80;
      v = Math.floor(v / 0x80);
    }
    this.bytes[this.at++] = v;
  }

  /** Field `field` (< 16), length-delimited: its tag and length; the caller writes the payload. */
  lenHeader(field: number, length: number): void {
    this.bytes[this.at++] = (field << 3) | LEN;
    this.varint(length);
  }

  string(field: number, value: string, length: number): void {
    if (length === 0) return; // proto3: an empty string is not written
    this.lenHeader(field, length);
    this.at += Buffer.from(this.bytes.buffer, this.bytes.byteOffset + this.at, length).write(value, 'utf8');
  }
}

/** The header's fields 1, 2, 3 and 5, and their sizes. */
function headerLayout(model: string, version: string, id: string, outputs: readonly WireTensor[]) {
  const strings = { model: utf8Size(model), version: utf8Size(version), id: utf8Size(id) };
  const metadata = outputs.map((t) => {
    const name = utf8Size(t.name);
    const datatype = utf8Size(t.datatype);
    const shape = t.shape.reduce((sum, d) => sum + varintSize(d), 0);
    const size = stringFieldSize(name) + stringFieldSize(datatype) + (t.shape.length ? lenFieldSize(shape) : 0);
    return { name, datatype, shape, size };
  });
  let size = stringFieldSize(strings.model) + stringFieldSize(strings.version) + stringFieldSize(strings.id);
  for (const m of metadata) size += lenFieldSize(m.size);
  return { strings, metadata, size };
}

/** A length-delimited field's tag and length at their largest (lengths below 2^35). */
const MAX_FIELD_HEADER = 1 + 5;

/**
 * The layout the gRPC edge asks of the request path for a response to request `id` of `model`
 * (`version`): headroom for the header at its largest (each output's entry in field 5, its name,
 * datatype and shape fields, each dimension at most MAX_DIM_BYTES) and the stream wrapper, a gap
 * per output.
 */
export function responseLayout(model: string, version: string, id: string): OutputLayout {
  const fixed = STREAM_HEADROOM + stringFieldSize(utf8Size(model)) + stringFieldSize(utf8Size(version)) + stringFieldSize(utf8Size(id));
  return { fixed, perOutput: 4 * MAX_FIELD_HEADER, perDimension: MAX_DIM_BYTES, gap: OUTPUT_GAP };
}

/** A response the edge framed: the buffer the device placed its outputs in, the message from `start`. */
export class EncodedResponse {
  readonly #bytes: Uint8Array;
  readonly #start: number;

  constructor(bytes: Uint8Array, start: number) {
    this.#bytes = bytes;
    this.#start = start;
  }

  /** The ModelInferResponse message. */
  message(): Buffer {
    const b = this.#bytes;
    return Buffer.from(b.buffer, b.byteOffset + this.#start, b.byteLength - this.#start);
  }

  /**
   * A ModelStreamInferResponse carrying it (field 2, no error_message), its tag and length written in front: a view, no
   * copy.
   */
  streamMessage(): Buffer {
    const b = this.#bytes;
    const length = b.byteLength - this.#start;
    const start = this.#start - 1 - varintSize(length);
    new Writer(b, start).lenHeader(2, length);
    return Buffer.from(b.buffer, b.byteOffset + start, b.byteLength - start);
  }
}

/**
 * The response to request `id` of `model` (`version`), framed around `outputs`, whose bytes the
 * device wrote into `framed` as `frame` laid them out (each a view of it, in response order).
 */
export function frameResponse(model: string, version: string, id: string, outputs: readonly WireTensor[], framed: Uint8Array, frame: OutputFrame): EncodedResponse {
  const { strings, metadata, size } = headerLayout(model, version, id, outputs);
  const room = frame.headroom - STREAM_HEADROOM;
  if (size > room) {
    // An output of higher rank than the model declares outgrew the bound: never for a graph whose
    // outputs' ranks are fixed, which ONNX Runtime checks; said, not written past the headroom.
    throw errors.internal(`model ${JSON.stringify(model)}: the response header needs ${size} bytes, its frame left ${room} (an output's rank differs from the model's)`);
  }
  const start = frame.headroom - size;
  const w = new Writer(framed, start);
  w.string(1, model, strings.model);
  w.string(2, version, strings.version);
  w.string(3, id, strings.id);
  outputs.forEach((t, i) => {
    const m = metadata[i];
    w.lenHeader(5, m.size);
    w.string(1, t.name, m.name);
    w.string(2, t.datatype, m.datatype);
    if (t.shape.length) {
      w.lenHeader(3, m.shape);
      for (const d of t.shape) w.varint(d);
    }
  });
  for (const t of outputs) {
    if (t.data.buffer !== framed.buffer || t.data.byteOffset !== framed.byteOffset + w.at + OUTPUT_GAP) {
      throw errors.internal(`model ${JSON.stringify(model)}: output ${JSON.stringify(t.name)} is not where its frame put it`);
    }
    framed[w.at++] = RAW_OUTPUT_TAG;
    w.varint5(t.data.byteLength);
    w.at += t.data.byteLength;
  }
  return new EncodedResponse(framed, start);
}

/** The gRPC edge's say in where one response's outputs go, and the response framed around them once they are there. */
export class ResponseFrame {
  readonly #model: string;
  readonly #version: string;
  readonly #id: string;
  readonly layout: OutputLayout;

  constructor(model: string, version: string, id: string) {
    this.#model = model;
    this.#version = version;
    this.#id = id;
    this.layout = responseLayout(model, version, id);
  }

  /**
   * The response framed around the answer's outputs; null when they were not written into a frame (hooks made them).
   */
  frame(answer: InferenceAnswer): EncodedResponse | null {
    if (!answer.framed) return null;
    return frameResponse(this.#model, this.#version, this.#id, answer.outputs, answer.framed.bytes, answer.framed.frame);
  }
}

/**
 * The service definition with ModelInfer's and ModelStreamInfer's response serializers passing an
 * EncodedResponse through as its bytes (anything else is encoded by protobufjs as before).
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
