/**
 * The gRPC inference messages to and from the data plane (shared/data-plane.ts): a decoded
 * ModelInferRequest into the protocol-free request the request path takes, and the answer back
 * into a ModelInferResponse: framed around the outputs where the device wrote them
 * (`ResponseFrame`, below), or, for the outputs of a model with a postprocess hook, an object for
 * protobufjs.
 *
 * What is gRPC's is settled here: which raw_input_contents entry is which input's, typed
 * `contents` converted into bytes, parameters from their protobuf oneofs into the values
 * shared/request-check.ts reads for both protocols (sequence, priority, timeout, Triton's shared_memory_*
 * ones, classification). Names, datatypes, shapes and sizes against the model are
 * the request path's (shared/request-check.ts), for every protocol alike.
 *
 * The framed response is the gRPC edge's output layout (shared/data-plane.ts). The device writes
 * every output of a request into one buffer laid out as `responseLayout` asks (headroom, then a
 * gap before each output) and transfers it; the edge writes the message's header into the
 * headroom and each raw_output_contents entry's tag and length into its gap, and hands grpc-js the
 * buffer as it is. Output bytes are written once, on the device thread; the edge writes only the
 * header. The message (grpc_service.proto): 1 model_name, 2 model_version, 3 id, 5 outputs (1
 * name, 2 datatype, 3 shape as packed int64), 6 raw_output_contents, one entry per output in the
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
 *
 * The copies a request's bytes go through, end to end, are tabled at the top of
 * shared/request-path.ts; this file makes the typed contents' conversion.
 */
import type * as grpc from '@grpc/grpc-js';
import { byDatatype, DATATYPES, type DtypeInfo } from '../shared/dtypes.js';
import { errors, quote, quoteShape } from '../shared/errors.js';
import { MODEL_VERSION } from '../shared/constants.js';
import type { OutputFrame, WireTensor } from '../shared/channels/inference.js';
import { refusedLater, type DataPlaneRequest, type InferenceAnswer, type OutputLayout, type RequestInput } from '../shared/data-plane.js';
import { noParameters, requestedOutput, requestParameters, sharedMemoryRef, type ParameterValues } from '../shared/request-check.js';
import { joinBytesElements } from '../shared/bytes-elements.js';
import type { InferInputTensor, InferTensorContents, ModelInferRequest, ModelInferResponse, Parameters } from './types.js';

const q = quote;

const NO_PARAMETERS: ParameterValues = Object.freeze(noParameters());

/** InferParameter's oneof. */
const PARAMETER_CHOICES = ['bool_param', 'int64_param', 'string_param', 'double_param', 'uint64_param'] as const;

/**
 * A message's parameters as the data plane reads them (shared/request-check.ts): int64 and uint64 (decimal
 * strings from proto-loader, every digit kept) as bigint; a parameter without a value as null.
 */
export function parameterValues(params: Parameters): ParameterValues {
  // Most messages carry none: one frozen empty set for all of them.
  let any = false;
  for (const _ in params) {
    any = true;
    break;
  }
  if (!any) return NO_PARAMETERS;
  const values = noParameters();
  for (const [key, p] of Object.entries(params)) {
    // proto-loader names the oneof's field; a message built by hand may only set the field.
    const choice = p.parameter_choice ?? PARAMETER_CHOICES.find((c) => p[c] !== undefined);
    values[key] = !choice ? null : choice === 'int64_param' || choice === 'uint64_param' ? BigInt(p[choice] as string) : p[choice] as boolean | number | string;
  }
  return values;
}

function parseShape(input: InferInputTensor): number[] {
  return input.shape.map((s) => {
    const n = Number(s);
    if (!Number.isSafeInteger(n) || n < 0) {
      throw errors.invalidTensor(`input ${q(input.name)}: shape ${quoteShape(input.shape)} has an invalid dimension ${String(s).slice(0, 40)}: each must be a whole number from 0 to 2^53-1`);
    }
    return n;
  });
}

const INTEGER_RANGES: Partial<Record<string, [number, number]>> = {
  INT8: [-128, 127], INT16: [-32768, 32767], INT32: [-(2 ** 31), 2 ** 31 - 1],
  UINT8: [0, 255], UINT16: [0, 65535], UINT32: [0, 2 ** 32 - 1],
};

function bytesOf(view: ArrayBufferView): Uint8Array {
  return new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
}

/**
 * Typed `contents` into wire bytes, checking the field matches the datatype and the count the shape.
 * copy: every branch converts the decoded JS values into a fresh buffer (the typed-contents path's copy).
 */
function fromContents(name: string, info: DtypeInfo, contents: InferTensorContents, elements: number): Uint8Array {
  const used = (Object.keys(contents) as (keyof InferTensorContents)[]).filter((k) => contents[k]?.length > 0);
  if (info.contentsField === null) {
    throw errors.invalidTensor(`input ${q(name)}: ${info.datatype} values must be sent in raw_input_contents; typed contents have no ${info.datatype} field`);
  }
  const wrong = used.filter((k) => k !== info.contentsField);
  if (wrong.length) {
    throw errors.invalidTensor(`input ${q(name)} is ${info.datatype}: put its values in contents.${info.contentsField}, not ${wrong.map((k) => `contents.${k}`).join(', ')}`);
  }
  const values = (contents[info.contentsField] ?? []) as unknown[];
  if (values.length !== elements) {
    throw errors.invalidTensor(`input ${q(name)}: shape needs ${elements} elements, contents.${info.contentsField} has ${values.length}`);
  }
  switch (info.datatype) {
    // copy: typed contents converted into the datatype's bytes (the table's "typed contents")
    case 'BOOL':
      return Uint8Array.from(values as boolean[], (b) => (b ? 1 : 0)); // copy: (as above)
    case 'INT64':
      return bytesOf(BigInt64Array.from(values as string[], (s) => BigInt(s))); // copy: (as above)
    case 'UINT64':
      return bytesOf(BigUint64Array.from(values as string[], (s) => BigInt(s))); // copy: (as above)
    case 'BYTES':
      return joinBytesElements(values as Buffer[]);
    default: {
      const range = INTEGER_RANGES[info.datatype];
      if (range) {
        const i = (values as number[]).findIndex((v) => v < range[0] || v > range[1]);
        if (i >= 0) throw errors.invalidTensor(`input ${q(name)}: element ${i} = ${values[i] as number} is out of range for ${info.datatype} [${range[0]}, ${range[1]}]`);
      }
      return bytesOf((info.typedArray as Float32ArrayConstructor).from(values as number[]));
    }
  }
}

/**
 * A ModelInferRequest as the data plane's request. `owned`: the message's bytes are views of an
 * ArrayBuffer that belongs to it alone (proto.ts), so its raw inputs may be handed over
 * as they are. A fault in its tensors or parameters is answered once its model is found (refusedLater).
 */
export function fromModelInferRequest(req: ModelInferRequest, owned: boolean): DataPlaneRequest {
  try {
    return decodeModelInferRequest(req, owned);
  } catch (err) {
    return refusedLater({ model: req.model_name, version: req.model_version, id: req.id }, err);
  }
}

function decodeModelInferRequest(req: ModelInferRequest, owned: boolean): DataPlaneRequest {
  const read = requestParameters(parameterValues(req.parameters));
  const regions = req.inputs.map((input) => sharedMemoryRef('input', input.name, parameterValues(input.parameters)));
  // raw_input_contents holds one entry per input that is not in shared memory, in input order.
  let inline = 0;
  const rawIndex = regions.map((r) => (r ? -1 : inline++));
  const useRaw = req.raw_input_contents.length > 0;
  if (useRaw && req.raw_input_contents.length !== inline) {
    throw errors.invalidRequest(`raw_input_contents has ${req.raw_input_contents.length} entries for ${inline} inputs not in shared memory; send one entry per such input, in the order of inputs`);
  }
  const inputs = req.inputs.map((input, i): RequestInput => {
    const shape = parseShape(input);
    const { name, datatype } = input;
    const hasContents = input.contents !== null
      && Object.values(input.contents).some((v) => Array.isArray(v) && v.length > 0);
    const region = regions[i];
    if (region) {
      if (hasContents) throw errors.invalidRequest(`input ${q(name)} sets contents and shared_memory_region; use one or the other`);
      return { name, datatype, shape, bytes: region };
    }
    if (useRaw) {
      if (hasContents) throw errors.invalidRequest(`input ${q(name)} sets contents while the request uses raw_input_contents; use one or the other`);
      return { name, datatype, shape, bytes: { kind: 'inline', data: req.raw_input_contents[rawIndex[i]], owned } };
    }
    // Typed values are converted by their datatype as the client named it; the request path checks it is the model's.
    const info = byDatatype(datatype);
    if (!info) throw errors.invalidTensor(`input ${q(name)}: unknown datatype ${q(datatype)}; KServe datatypes are ${DATATYPES.join(', ')}`);
    const elements = shape.reduce((a, b) => a * b, 1);
    if (!hasContents && elements > 0) {
      throw errors.invalidTensor(`input ${q(name)} has no data: send it in raw_input_contents or contents.${info.contentsField ?? 'raw'}`);
    }
    return { name, datatype, shape, bytes: { kind: 'inline', data: fromContents(name, info, input.contents ?? ({} as InferTensorContents), elements), owned: true } };
  });
  return {
    model: req.model_name,
    version: req.model_version,
    id: req.id,
    inputs,
    outputs: req.outputs.map((o) => requestedOutput(o.name, parameterValues(o.parameters))),
    // As REST's decoder does: whatever requestParameters reads, spread, never listed field by field.
    ...read,
  };
}

/**
 * Outputs into a response object, for protobufjs to encode: the answers of models with a
 * postprocess hook (their outputs come from the hook pool). Others are framed around the outputs
 * in the frame the device wrote them into (`ResponseFrame`, below). Raw bytes are wrapped, not copied
 * (protobufjs copies while encoding). An output written to shared memory keeps its place with an
 * empty entry, because clients find an output's raw contents by its position among the outputs.
 */
export function inferResponse(model: string, id: string, outputs: readonly WireTensor[]): ModelInferResponse {
  return {
    model_name: model,
    model_version: MODEL_VERSION,
    id,
    outputs: outputs.map((t) => ({ name: t.name, datatype: t.datatype, shape: t.shape })),
    raw_output_contents: outputs.map((t) => Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength)),
  };
}

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
