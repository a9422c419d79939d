/**
 * A request's outputs written where its edge asked (shared/data-plane.ts, OutputLayout): one
 * buffer, `headroom` bytes free first and `gap` bytes free before each output, every output's
 * bytes copied in once. The edge fills the free bytes with its protocol's framing (for gRPC the
 * response around the outputs: protocol/infer-response-wire.ts) and sends the buffer as it is;
 * this thread knows the sizes, never what goes there.
 */
import type { OutputFrame, WireTensor } from '../../shared/channels/inference.js';

/** `outputs` copied into one fresh buffer laid out as `frame` says; each returned as a view of it. */
export function frameOutputs(outputs: readonly WireTensor[], frame: OutputFrame): { outputs: WireTensor[]; framed: Uint8Array } {
  let total = frame.headroom;
  for (const t of outputs) total += frame.gap + t.data.byteLength;
  const framed = new Uint8Array(total);
  let at = frame.headroom;
  const views = outputs.map((t) => {
    at += frame.gap;
    framed.set(t.data, at); // copy: an output into the frame its edge asked for (the path's table counts it)
    const data = framed.subarray(at, at + t.data.byteLength);
    at += t.data.byteLength;
    return { ...t, data };
  });
  return { outputs: views, framed };
}
