// What the benchmarks' timed loops share: the median and other quantiles, a run timed after its warm-up, and the
// ResNet-50 input they feed.

/** The median of `xs` (the upper one of an even count). */
export const median = (/** @type {number[]} */ xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/** The `p` quantile of `xs` (0.99: the p99), by rank. */
export const percentile = (/** @type {number[]} */ xs, /** @type {number} */ p) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))];

/**
 * Median ms of `calls` runs of `run(i)` after `warmups` untimed ones; `idleMs` of idle before each
 * timed run (not counted: a device left idle between requests, as a server's is).
 * @param {number} calls
 * @param {(i: number) => unknown} run
 * @param {{ warmups?: number, idleMs?: number }} [options]
 */
export async function timed(calls, run, { warmups = 3, idleMs = 0 } = {}) {
  for (let i = 0; i < warmups; i++) await run(i);
  const ms = [];
  for (let i = 0; i < calls; i++) {
    if (idleMs > 0) await new Promise((resolve) => setTimeout(resolve, idleMs));
    const t0 = performance.now();
    await run(i);
    ms.push(performance.now() - t0);
  }
  return median(ms);
}

/**
 * `picks` sent by `clients` at once, each client every clients.length-th in turn, one at a time:
 * each call's latency in ms, and the seconds the whole took.
 * @template C
 * @param {C[]} clients
 * @param {string[]} picks
 * @param {(client: C, pick: string) => Promise<unknown>} send
 */
export async function driveClients(clients, picks, send) {
  /** @type {number[]} */
  const latencies = [];
  const t0 = performance.now();
  await Promise.all(clients.map(async (c, i) => {
    for (let k = i; k < picks.length; k += clients.length) {
      const s = performance.now();
      await send(c, picks[k]);
      latencies.push(performance.now() - s);
    }
  }));
  return { latencies, seconds: (performance.now() - t0) / 1000 };
}

/** `n` ResNet-50 inputs (3x224x224 float32 each), deterministic and not all zeros. */
export const image = (/** @type {number} */ n) => Float32Array.from({ length: n * 3 * 224 * 224 }, (_, i) => Math.sin(i * 0.001));
