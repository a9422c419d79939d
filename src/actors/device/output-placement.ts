/**
 * A request's outputs written where its edge asked (shared/data-plane.ts, OutputLayout): one
 * buffer, `headroom` bytes free first and `gap` bytes free before each output, every output's
 * bytes copied in once. The edge fills the free bytes with its protocol's framing (for gRPC the
 * response around the outputs: protocol/infer-response-wire.ts) and sends the buffer as it is;
 * this thread knows the sizes, never what goes there.
 */
import type { OutputPlacement, WireTensor } from '../../shared/channels/inference.js';

/** `outputs` copied into one fresh buffer laid out as `placement` says; each returned as a view of it. */
export function placeOutputs(outputs: readonly WireTensor[], placement: OutputPlacement): { outputs: WireTensor[]; placed: Uint8Array } {
  let total = placement.headroom;
  for (const t of outputs) total += placement.gap + t.data.byteLength;
  const placed = new Uint8Array(total);
  let at = placement.headroom;
  const views = outputs.map((t) => {
    at += placement.gap;
    placed.set(t.data, at); // copy: an output into the buffer its edge placed it in (the pipeline's table counts it)
    const data = placed.subarray(at, at + t.data.byteLength);
    at += t.data.byteLength;
    return { ...t, data };
  });
  return { outputs: views, placed };
}
