/**
 * Row-major layout along one axis (the batch axis, wherever it sits): join
 * requests' tensors into one batch, padded with zero rows up to a compiled
 * batch size, and cut the batch's outputs back into each request's rows.
 */

/** A shape seen as [outer, axis, inner]: `inner` counts elements after the axis. */
function blocks(shape: readonly number[], axis: number): { outer: number; inner: number } {
  let outer = 1;
  let inner = 1;
  for (let i = 0; i < axis; i++) outer *= shape[i];
  for (let i = axis + 1; i < shape.length; i++) inner *= shape[i];
  return { outer, inner };
}

export interface RowsPart {
  data: Uint8Array;
  shape: readonly number[];
}

/**
 * The parts joined along `axis` into one buffer of `toRows` rows, from `alloc` (fresh by default;
 * it may hand out reused memory: every byte is written); rows past the parts' total are zero.
 * Every part has the same shape but for `axis`.
 */
export function concatRows(parts: readonly RowsPart[], axis: number, elementBytes: number, toRows: number,
  alloc: (bytes: number) => Uint8Array = (bytes) => new Uint8Array(bytes)): Uint8Array {
  const { outer, inner } = blocks(parts[0].shape, axis);
  const rowBytes = inner * elementBytes;
  const out = alloc(outer * toRows * rowBytes);
  for (let o = 0; o < outer; o++) {
    let at = o * toRows * rowBytes;
    for (const p of parts) {
      const block = p.shape[axis] * rowBytes;
      // copy: a request's rows into the joined (or padded) input
      out.set(p.data.subarray(o * block, (o + 1) * block), at);
      at += block;
    }
    out.fill(0, at, (o + 1) * toRows * rowBytes);
  }
  return out;
}

/**
 * `count` rows from row `from` along `axis`. When the axis is the outermost
 * (axis 0, the usual batch position) this is a view, not a copy, unless
 * `fresh` asks for memory of its own.
 */
export function sliceRows(data: Uint8Array, shape: readonly number[], axis: number, elementBytes: number,
  from: number, count: number, fresh = false): Uint8Array {
  const { outer, inner } = blocks(shape, axis);
  const rowBytes = inner * elementBytes;
  if (outer === 1) {
    const rows = data.subarray(from * rowBytes, (from + count) * rowBytes);
    if (!fresh) return rows;
    const own = new Uint8Array(rows.byteLength);
    own.set(rows); // copy: a coalesced request's rows out of the batch's output, to go on as its own tensor
    return own;
  }
  const size = shape[axis];
  const out = new Uint8Array(outer * count * rowBytes);
  for (let o = 0; o < outer; o++) {
    // copy: a request's rows cut along a batch axis that is not the first (strided, so never a view)
    out.set(data.subarray((o * size + from) * rowBytes, (o * size + from + count) * rowBytes), o * count * rowBytes);
  }
  return out;
}

/** The same two operations for element arrays (BYTES tensors held as strings). */
export function concatRowsArray<T>(parts: readonly { items: readonly T[]; shape: readonly number[] }[], axis: number,
  toRows: number, fill: T): T[] {
  const { outer, inner } = blocks(parts[0].shape, axis);
  const out: T[] = [];
  for (let o = 0; o < outer; o++) {
    let rows = 0;
    for (const p of parts) {
      const block = p.shape[axis] * inner;
      for (let i = 0; i < block; i++) out.push(p.items[o * block + i]);
      rows += p.shape[axis];
    }
    for (let i = rows * inner; i < toRows * inner; i++) out.push(fill);
  }
  return out;
}

export function sliceRowsArray<T>(items: readonly T[], shape: readonly number[], axis: number, from: number, count: number): T[] {
  const { outer, inner } = blocks(shape, axis);
  const size = shape[axis];
  const out: T[] = [];
  for (let o = 0; o < outer; o++) {
    for (let i = 0; i < count * inner; i++) out.push(items[(o * size + from) * inner + i]);
  }
  return out;
}
