/**
 * KServe's raw layout for BYTES tensors: each element is a 4-byte
 * little-endian length followed by that many bytes, elements back to back.
 */

/** Split raw BYTES contents into element views (no copy); null if the framing is broken. */
export function splitBytesElements(data: Uint8Array): Uint8Array[] | null {
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const out: Uint8Array[] = [];
  let at = 0;
  while (at < data.byteLength) {
    if (at + 4 > data.byteLength) return null;
    const len = view.getUint32(at, true);
    at += 4;
    if (at + len > data.byteLength) return null;
    out.push(data.subarray(at, at + len));
    at += len;
  }
  return out;
}

/** Join elements into raw BYTES contents, in one fresh buffer. */
export function joinBytesElements(elements: readonly Uint8Array[]): Uint8Array {
  let total = 0;
  for (const e of elements) total += 4 + e.byteLength;
  const out = new Uint8Array(total);
  const view = new DataView(out.buffer);
  let at = 0;
  for (const e of elements) {
    view.setUint32(at, e.byteLength, true);
    out.set(e, at + 4); // copy: each element into KServe's length-prefixed layout
    at += 4 + e.byteLength;
  }
  return out;
}
