/**
 * Start something whose start-up can fail halfway (a node, a gateway-only process): on failure
 * it is stopped, releasing whatever it had started (ports, threads), before the error goes on.
 */
export async function startOrStop<T extends { stop(): Promise<void> }>(thing: T, start: (thing: T) => Promise<void>): Promise<T> {
  try {
    await start(thing);
  } catch (err) {
    await thing.stop();
    throw err;
  }
  return thing;
}

/**
 * A graceful stop's two halves, by `deadline` (ms since the epoch): wait while `busy()` (requests
 * still in flight), then `close(done)` and wait for it to call `done`; whatever is left when the
 * deadline comes is `cut()`.
 */
export async function drainThenClose(deadline: number, busy: () => boolean, close: (done: () => void) => void, cut: () => void): Promise<void> {
  while (busy() && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
  await new Promise<void>((resolve) => {
    const timer = setTimeout(() => {
      cut();
      resolve();
    }, Math.max(0, deadline - Date.now()));
    close(() => {
      clearTimeout(timer);
      resolve();
    });
  });
}

/**
 * `drainThenClose`'s `busy` for a server that refuses new calls while it drains: busy while calls are
 * in flight, then for `quietMs` after the last is answered and after each call refused meanwhile,
 * but no longer than `maxQuietMs` after the last is answered. A client that sends its next call the
 * moment its last is answered is then refused (UNAVAILABLE, as it expects) instead of meeting the
 * close (a reset stream, which grpc-js reports as INTERNAL).
 */
export function drainedQuietly(inflight: () => number, refusedAtMs: () => number, quietMs: number, maxQuietMs: number, now: () => number = Date.now): () => boolean {
  let idleSinceMs = -1;
  return () => {
    if (inflight() > 0) {
      idleSinceMs = -1;
      return true;
    }
    const at = now();
    if (idleSinceMs < 0) idleSinceMs = at;
    return at - idleSinceMs < quietMs || (at - refusedAtMs() < quietMs && at - idleSinceMs < maxQuietMs);
  };
}
