/**
 * What a model's execution costs, learned: an exponential moving average of
 * measured execution time per executed batch size, with a half-life in time
 * (`ema_halflife_seconds`), so a model whose speed changes (a new version, a
 * busier machine) is re-learned at a known rate.
 */

/** Assumed cost of a model never run at any batch size, in ms: small, so new models get tried. */
export const UNKNOWN_COST_MS = 1;

interface Ema {
  ms: number;
  updatedAtMs: number;
}

export class CostModel {
  readonly #halflifeMs: number;
  /** model -> executed batch size -> EMA */
  readonly #emas = new Map<string, Map<number, Ema>>();

  constructor(halflifeMs: number) {
    this.#halflifeMs = halflifeMs;
  }

  /** Fold one measured execution into the model's cost at that batch size; returns the new estimate. */
  record(model: string, batchSize: number, ms: number, nowMs: number): number {
    let sizes = this.#emas.get(model);
    if (!sizes) this.#emas.set(model, (sizes = new Map()));
    const ema = sizes.get(batchSize);
    if (!ema) {
      sizes.set(batchSize, { ms, updatedAtMs: nowMs });
      return ms;
    }
    // The old value's weight halves every half-life of elapsed time. A sample stands for at least
    // its own duration of device time, so back-to-back executions (no clock tick between) still count.
    const elapsedMs = Math.max(nowMs - ema.updatedAtMs, ms);
    const keep = 0.5 ** (elapsedMs / this.#halflifeMs);
    ema.ms = keep * ema.ms + (1 - keep) * ms;
    ema.updatedAtMs = nowMs;
    return ema.ms;
  }

  /**
   * Expected cost of running `batchSize` rows. Unmeasured sizes scale the
   * nearest measured one linearly by rows, a deliberate overestimate for
   * larger batches (they usually cost less than proportionally).
   */
  estimate(model: string, batchSize: number): number {
    const sizes = this.#emas.get(model);
    if (!sizes || sizes.size === 0) return UNKNOWN_COST_MS;
    const exact = sizes.get(batchSize);
    if (exact) return exact.ms;
    let best = 0;
    let bestDistance = Infinity;
    for (const size of sizes.keys()) {
      const d = Math.abs(size - batchSize);
      if (d < bestDistance) [best, bestDistance] = [size, d];
    }
    return (sizes.get(best) as Ema).ms * (batchSize / best);
  }

  /** What is known of a model: its learned cost per executed batch size, ascending. */
  snapshot(model: string): { batchSize: number; ms: number }[] {
    return [...(this.#emas.get(model) ?? new Map<number, Ema>())].map(([batchSize, e]) => ({ batchSize, ms: e.ms }))
      .sort((a, b) => a.batchSize - b.batchSize);
  }

  forget(model: string): void {
    this.#emas.delete(model);
  }
}

/**
 * Rows per second one device answers of a model at full batches, from its learned costs: a line
 * (a fixed cost plus a cost per row, least squares over the learned sizes) taken to `maxBatch`, or
 * to the largest size learned when the line cannot be trusted (one size known, or larger batches
 * measured cheaper than smaller ones); 0 when nothing is learned. What a pooled gateway weighs a
 * model's requests against (node/control-service.ts, window_capacity). Extrapolating matters: a
 * model spread over many nodes runs small batches there, and its largest learned batch alone would
 * say it needs more nodes than it does.
 */
export function fullBatchRate(costs: readonly { batchSize: number; ms: number }[], maxBatch: number): number {
  const largest = costs.reduce<{ batchSize: number; ms: number } | undefined>((best, c) => (!best || c.batchSize > best.batchSize ? c : best), undefined);
  if (!largest || !(largest.ms > 0)) return 0;
  const measured = (largest.batchSize / largest.ms) * 1000;
  const target = Math.max(largest.batchSize, Number.isFinite(maxBatch) ? maxBatch : 0);
  if (costs.length < 2 || target === largest.batchSize) return measured;
  const n = costs.length;
  const meanRows = costs.reduce((s, c) => s + c.batchSize, 0) / n;
  const meanMs = costs.reduce((s, c) => s + c.ms, 0) / n;
  let covariance = 0;
  let variance = 0;
  for (const c of costs) {
    covariance += (c.batchSize - meanRows) * (c.ms - meanMs);
    variance += (c.batchSize - meanRows) ** 2;
  }
  const perRow = variance > 0 ? covariance / variance : 0;
  if (!(perRow > 0)) return measured;
  const fixed = Math.max(0, meanMs - perRow * meanRows);
  return Math.max(measured, (target / (fixed + perRow * target)) * 1000);
}
