/**
 * Tensors as a bundle's hooks see them, on a hook thread: named { datatype, shape, data } with
 * typed data of the datatype's width (FP16 and BF16 as Uint16Array; BYTES as an array of
 * Uint8Array elements). A hook may return data as a plain array of numbers, bigints or (BYTES)
 * strings too. `toHook` and `fromHook` convert from and to the wire layout.
 */
import type { WireTensor } from '../../shared/channels/inference.js';
import { byDatatype, type Datatype } from '../../shared/dtypes.js';
import { joinBytesElements, splitBytesElements } from '../../shared/bytes-elements.js';

export type HookTensor = { datatype: Datatype; shape: number[]; data: unknown };

export function toHook(t: WireTensor): HookTensor {
  const info = byDatatype(t.datatype);
  if (t.datatype === 'BYTES') return { datatype: t.datatype, shape: t.shape, data: splitBytesElements(t.data) ?? [] };
  const Typed = info?.typedArray as Float32ArrayConstructor;
  return { datatype: t.datatype, shape: t.shape, data: new Typed(t.data.buffer, t.data.byteOffset, t.data.byteLength / Typed.BYTES_PER_ELEMENT) };
}

const utf8 = new TextEncoder();

/** A hook's returned tensor back into wire bytes; a message for anything malformed. */
export function fromHook(name: string, value: unknown): WireTensor | string {
  if (!value || typeof value !== 'object') return `tensor ${JSON.stringify(name)} is ${value === null ? 'null' : typeof value}, not { datatype, shape, data }`;
  const { datatype, shape, data } = value as HookTensor;
  const info = byDatatype(String(datatype));
  if (!info) return `tensor ${JSON.stringify(name)} has datatype ${JSON.stringify(datatype)}, not a KServe datatype`;
  if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && d >= 0)) return `tensor ${JSON.stringify(name)} has shape ${JSON.stringify(shape)}, not a list of sizes`;
  const elements = shape.reduce((a: number, b: number) => a * b, 1);
  if (info.datatype === 'BYTES') {
    if (!Array.isArray(data)) return `BYTES tensor ${JSON.stringify(name)} needs an array of strings or Uint8Array`;
    const parts = data.map((d) => (typeof d === 'string' ? utf8.encode(d) : d));
    if (!parts.every((p) => p instanceof Uint8Array)) return `BYTES tensor ${JSON.stringify(name)} holds something other than strings or Uint8Array`;
    if (parts.length !== elements) return `tensor ${JSON.stringify(name)}: shape [${shape.join(', ')}] needs ${elements} elements, data has ${parts.length}`;
    return { name, datatype: info.datatype, shape, data: joinBytesElements(parts as Uint8Array[]) };
  }
  const Typed = info.typedArray as Float32ArrayConstructor;
  let typed: ArrayBufferView;
  if (ArrayBuffer.isView(data)) {
    // copy: a typed array of another type converted to the datatype's
    typed = data.constructor === Typed ? data : (Typed.from as (v: ArrayLike<number>) => Float32Array)(data as unknown as ArrayLike<number>);
  } else if (Array.isArray(data)) {
    // copy: a plain array converted to the datatype's typed array
    typed = (Typed.from as (v: ArrayLike<unknown>) => Float32Array)(data);
  } else {
    return `tensor ${JSON.stringify(name)}: data must be a typed array or an array`;
  }
  const count = typed.byteLength / Typed.BYTES_PER_ELEMENT;
  if (count !== elements) return `tensor ${JSON.stringify(name)}: shape [${shape.join(', ')}] needs ${elements} elements, data has ${count}`;
  // A view of part of a larger buffer is copied so that only this tensor's bytes are transferred:
  // the rest may be the hook's own (a module-level array), which a transfer would detach.
  const whole = typed.byteOffset === 0 && typed.byteLength === typed.buffer.byteLength;
  const bytes = whole ? new Uint8Array(typed.buffer, 0, typed.byteLength)
    // copy: a returned view of part of a buffer
    : new Uint8Array(typed.buffer.slice(typed.byteOffset, typed.byteOffset + typed.byteLength));
  return { name, datatype: info.datatype, shape, data: bytes };
}
