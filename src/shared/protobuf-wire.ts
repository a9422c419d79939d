/**
 * Just enough of the protobuf wire format to take an ONNX model apart and put
 * it back together without knowing every field: a message is read as a list
 * of fields, each keeping its exact bytes, so a rewrite copies what it does
 * not touch verbatim (fields this code has never heard of included) and only
 * re-encodes what it changes. A full onnx.proto binding would drop or reorder
 * what it does not model; this cannot.
 */

export const WIRE_VARINT = 0;
export const WIRE_I64 = 1;
export const WIRE_LEN = 2;
export const WIRE_I32 = 5;

export interface WireField {
  field: number;
  wireType: number;
  /** The field's whole encoding, tag included: what a rewrite copies. */
  raw: Uint8Array;
  /** LEN fields: the payload. Others: empty. */
  payload: Uint8Array;
  /** VARINT fields: the value (exact below 2^53, which every ONNX count and dim is). */
  varint: number;
}

function readVarint(buf: Uint8Array, at: number): [value: number, next: number] {
  let value = 0;
  let scale = 1;
  for (let i = at; i < buf.length; i++) {
    const b = buf[i];
    value += (b & 0x7f) * scale;
    if ((b & 0x80) === 0) return [value, i + 1];
    scale *= 128;
    if (i - at > 9) break;
  }
  throw new Error(`malformed protobuf: bad varint at byte ${at}`);
}

/** The fields of one message, in the order they are encoded. */
export function readFields(buf: Uint8Array): WireField[] {
  const fields: WireField[] = [];
  let at = 0;
  while (at < buf.length) {
    const start = at;
    const [tag, afterTag] = readVarint(buf, at);
    const field = Math.floor(tag / 8);
    const wireType = tag & 7;
    let payload: Uint8Array = new Uint8Array(0);
    let varint = 0;
    switch (wireType) {
      case WIRE_VARINT:
        [varint, at] = readVarint(buf, afterTag);
        break;
      case WIRE_I64:
        at = afterTag + 8;
        break;
      case WIRE_I32:
        at = afterTag + 4;
        break;
      case WIRE_LEN: {
        const [length, afterLength] = readVarint(buf, afterTag);
        at = afterLength + length;
        payload = buf.subarray(afterLength, at);
        break;
      }
      default:
        throw new Error(`malformed protobuf: wire type ${wireType} (field ${field}) at byte ${start}`);
    }
    if (at > buf.length) throw new Error(`malformed protobuf: field ${field} runs past the end of its message`);
    fields.push({ field, wireType, raw: buf.subarray(start, at), payload, varint });
  }
  return fields;
}

/** A repeated integer field's values, packed or not. */
export function readRepeatedVarints(fields: readonly WireField[], field: number): number[] {
  const values: number[] = [];
  for (const f of fields) {
    if (f.field !== field) continue;
    if (f.wireType === WIRE_VARINT) values.push(f.varint);
    else if (f.wireType === WIRE_LEN) {
      for (let at = 0; at < f.payload.length;) {
        let v: number;
        [v, at] = readVarint(f.payload, at);
        values.push(v);
      }
    }
  }
  return values;
}

export function readString(fields: readonly WireField[], field: number): string | undefined {
  const f = fields.find((x) => x.field === field && x.wireType === WIRE_LEN);
  return f ? new TextDecoder().decode(f.payload) : undefined;
}

/** Builds one message from encoded fields. */
export class WireWriter {
  #parts: Uint8Array[] = [];
  #length = 0;

  #push(bytes: Uint8Array): this {
    this.#parts.push(bytes);
    this.#length += bytes.length;
    return this;
  }

  #varintBytes(value: number): Uint8Array {
    const out: number[] = [];
    let v = value;
    while (v >= 128) {
      out.push((v % 128) | 0x80);
      v = Math.floor(v / 128);
    }
    out.push(v);
    return Uint8Array.from(out); // copy: a varint's few bytes
  }

  /** A field copied as it was read. */
  raw(bytes: Uint8Array): this {
    return this.#push(bytes);
  }

  varint(field: number, value: number): this {
    this.#push(this.#varintBytes(field * 8 + WIRE_VARINT));
    return this.#push(this.#varintBytes(value));
  }

  bytes(field: number, payload: Uint8Array): this {
    this.#push(this.#varintBytes(field * 8 + WIRE_LEN));
    this.#push(this.#varintBytes(payload.length));
    return this.#push(payload);
  }

  string(field: number, value: string): this {
    return this.bytes(field, new TextEncoder().encode(value));
  }

  finish(): Uint8Array {
    const out = new Uint8Array(this.#length);
    let at = 0;
    for (const p of this.#parts) {
      out.set(p, at); // copy: each field into the finished message
      at += p.length;
    }
    return out;
  }
}
