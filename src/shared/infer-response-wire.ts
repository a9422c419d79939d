/**
 * A ModelInferResponse encoded once, where its outputs are: the device actor writes the whole
 * message (its header and every output's bytes) into one buffer and transfers it to the main
 * thread, which hands it to grpc-js as it is. The main thread never re-encodes output bytes
 * (protobufjs would copy them once more, on the thread that also runs the gRPC front end).
 *
 * The pure part, shared by both sides of one layout:
 * - device thread: `encodeInferResponse` writes `RESPONSE_HEADROOM` spare bytes, then the message;
 * - main thread (protocol/encoded-response.ts): `EncodedResponse` wraps the buffer and hands grpc-js
 *   its bytes instead of encoding. ModelStreamInfer wraps the message as field 2 of
 *   ModelStreamInferResponse: `streamFrame` writes the field's tag and length into the headroom,
 *   so the stream's answer is not copied either.
 *
 * The message (grpc_service.proto): 1 model_name, 2 model_version, 3 id, 5 outputs (1 name,
 * 2 datatype, 3 shape as packed int64), 6 raw_output_contents, one entry per output in the
 * outputs' order; an output written to shared memory keeps its place with an empty entry.
 */
import type { WireTensor } from './channels/inference.js';

/** Spare bytes in front of the message: the tag (1 byte) and length (at most 5) of the stream wrapper. */
export const RESPONSE_HEADROOM = 8;

const LEN = 2;

function varintSize(value: number): number {
  let size = 1;
  for (let v = value; v >= 0x80; v = Math.floor(v / 0x80)) size++;
  return size;
}

/** Bytes of a length-delimited field `field` (< 16) holding `length` bytes. */
const lenFieldSize = (length: number) => 1 + varintSize(length) + length;

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

  raw(field: number, data: Uint8Array): void {
    this.lenHeader(field, data.byteLength);
    this.bytes.set(data, this.at); // copy: an output into its response (the pipeline's table counts it)
    this.at += data.byteLength;
  }
}

const utf8Size = (s: string) => Buffer.byteLength(s, 'utf8');
const stringFieldSize = (length: number) => (length === 0 ? 0 : lenFieldSize(length));

/**
 * The response to request `id` of model `model` (version `version`), with `outputs` in the order
 * the client asked for them: one fresh ArrayBuffer, `RESPONSE_HEADROOM` bytes then the message.
 */
export function encodeInferResponse(model: string, version: string, id: string, outputs: readonly WireTensor[]): Uint8Array {
  const modelLength = utf8Size(model);
  const versionLength = utf8Size(version);
  const idLength = utf8Size(id);
  const metadata = outputs.map((t) => {
    const name = utf8Size(t.name);
    const datatype = utf8Size(t.datatype);
    const shape = t.shape.reduce((sum, d) => sum + varintSize(d), 0);
    const size = stringFieldSize(name) + stringFieldSize(datatype) + (t.shape.length ? lenFieldSize(shape) : 0);
    return { name, datatype, shape, size };
  });
  let size = stringFieldSize(modelLength) + stringFieldSize(versionLength) + stringFieldSize(idLength);
  for (const m of metadata) size += lenFieldSize(m.size);
  for (const t of outputs) size += lenFieldSize(t.data.byteLength);

  const w = new Writer(new Uint8Array(RESPONSE_HEADROOM + size), RESPONSE_HEADROOM);
  w.string(1, model, modelLength);
  w.string(2, version, versionLength);
  w.string(3, id, idLength);
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
  for (const t of outputs) w.raw(6, t.data);
  return w.bytes;
}

/**
 * The bytes of a ModelStreamInferResponse carrying the encoded response `bytes` (field 2, no
 * error_message), its tag and length written in place in the headroom: a view, no copy.
 */
export function streamFrame(bytes: Uint8Array): Uint8Array {
  const length = bytes.byteLength - RESPONSE_HEADROOM;
  const start = RESPONSE_HEADROOM - 1 - varintSize(length);
  new Writer(bytes, start).lenHeader(2, length);
  return bytes.subarray(start);
}
