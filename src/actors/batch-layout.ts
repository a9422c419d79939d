/**
 * Row-major layout along one axis: take rows out of a tensor or pad it with
 * zero rows, whatever the position of the batch axis. Used to pad a partial
 * batch up to a compiled batch size and to cut the padding off the outputs.
 */

/** A shape seen as [outer, axis, inner]: `inner` counts elements after the axis. */
function blocks(shape: readonly number[], axis: number): { outer: number; size: number; inner: number } {
  let outer = 1;
  let inner = 1;
  for (let i = 0; i < axis; i++) outer *= shape[i];
  for (let i = axis + 1; i < shape.length; i++) inner *= shape[i];
  return { outer, size: shape[axis], inner };
}

/** Bytes of `data` (elements of `elementBytes`) padded with zeros along `axis` from shape[axis] to `to` rows. */
export function padRows(data: Uint8Array, shape: readonly number[], axis: number, elementBytes: number, to: number): Uint8Array {
  const { outer, size, inner } = blocks(shape, axis);
  const rowBytes = inner * elementBytes;
  const out = new Uint8Array(outer * to * rowBytes);
  for (let o = 0; o < outer; o++) {
    out.set(data.subarray(o * size * rowBytes, (o + 1) * size * rowBytes), o * to * rowBytes);
  }
  return out;
}

/**
 * The first `count` rows along `axis`. When every row before the axis is one
 * block (axis 0, the usual batch position) this is a view, not a copy.
 */
export function firstRows(data: Uint8Array, shape: readonly number[], axis: number, elementBytes: number, count: number): Uint8Array {
  const { outer, size, inner } = blocks(shape, axis);
  const rowBytes = inner * elementBytes;
  if (outer === 1) return data.subarray(0, count * rowBytes);
  const out = new Uint8Array(outer * count * rowBytes);
  for (let o = 0; o < outer; o++) {
    out.set(data.subarray(o * size * rowBytes, (o * size + count) * rowBytes), o * count * rowBytes);
  }
  return out;
}

/** The same two operations for element arrays (BYTES tensors held as strings). */
export function padRowsArray<T>(items: readonly T[], shape: readonly number[], axis: number, to: number, fill: T): T[] {
  const { outer, size, inner } = blocks(shape, axis);
  const out: T[] = [];
  for (let o = 0; o < outer; o++) {
    for (let i = 0; i < size * inner; i++) out.push(items[o * size * inner + i]);
    for (let i = size * inner; i < to * inner; i++) out.push(fill);
  }
  return out;
}

export function firstRowsArray<T>(items: readonly T[], shape: readonly number[], axis: number, count: number): T[] {
  const { outer, size, inner } = blocks(shape, axis);
  const out: T[] = [];
  for (let o = 0; o < outer; o++) {
    for (let i = 0; i < count * inner; i++) out.push(items[o * size * inner + i]);
  }
  return out;
}
