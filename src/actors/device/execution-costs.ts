/**
 * What executions cost: summed until the next report to the main thread (`ExecutionTally`), and a
 * model's full-batch rate from its learned costs (`fullBatchRate`, for placement). The costs
 * themselves are learned by `CostModel` (shared/backlog.ts), which the device's scheduler reads
 * too; every thread that admits requests keeps one of its own.
 *
 * The tally is the device's count of its executions (FromDevice's `report`, typed as
 * ExecutionReport in shared/channels/device.ts). Why summed: with edge threads, an execution's
 * answers go to the edges' doors and the main thread has nothing of it to hear but its statistics.
 * One message per execution cost the main thread 30–40 µs each (a wake-up and a structured clone),
 * and a hooked model's batches are small, so the main thread spent more on counting an edge's
 * requests than the edge spent serving them. Summed, one message stands for every execution of up
 * to `REPORT_EVERY_MS`. Why nothing is counted late: a reader of statistics or metrics first asks
 * every device for `reports` (DeviceCalls), and the device posts its tally just before that reply.
 * An execution is tallied in the same synchronous step that posts its answers, so an answer a
 * client holds was tallied before the client could ask to read it. What a crash loses: executions
 * of the last `REPORT_EVERY_MS` not yet reported (never a request: requests are counted where they
 * are answered).
 */
import type { ExecutionReport, ModelExecutions, WeightLoad, WeightMemory } from '../../shared/channels/device.js';
import type { ExecutionTiming } from '../../shared/channels/inference.js';

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

/**
 * At most this long between an execution and the report that counts it, when nobody asks sooner.
 * A report costs the main thread a wake-up: with two edges at concurrency 64, reports every 20 ms
 * cost it 1.3 µs per plain request and 2.0 per hooked one; every 100 ms 0.2 and 0.8, no more than
 * every second (0.5 and 0.6) within /proc's 10 ms ticks (bench/edges.js --scale 12). Nothing reads
 * the counts between reports without asking first; only the gateway's measured load (lpt_packing's
 * repacks) hears of them up to this late.
 */
const REPORT_EVERY_MS = 100;

/** What one execution adds to the tally. */
export interface ExecutionOutcome {
  model: string;
  timing: ExecutionTiming;
  /** Requests queued on the device after it. */
  queued: number;
  load: WeightLoad | null;
  memory: WeightMemory | null;
}

export class ExecutionTally {
  readonly #post: (report: ExecutionReport) => void;
  readonly #everyMs: number;
  #models = new Map<string, ModelExecutions>();
  #rows = new Map<number, number>();
  #loads: ExecutionReport['loads'] = [];
  #executions = 0;
  #busyNs = 0;
  #queued = 0;
  #timer: NodeJS.Timeout | null = null;

  /** `post` sends a report to the main thread. */
  constructor(post: (report: ExecutionReport) => void, everyMs = REPORT_EVERY_MS) {
    this.#post = post;
    this.#everyMs = everyMs;
  }

  /** Count one execution; a report goes within `everyMs` unless one is asked for sooner. */
  add({ model, timing, queued, load, memory }: ExecutionOutcome): void {
    this.#executions++;
    this.#busyNs += timing.computeInferNs;
    this.#queued = queued;
    this.#rows.set(timing.batchRows, (this.#rows.get(timing.batchRows) ?? 0) + 1);
    let m = this.#models.get(model);
    if (!m) this.#models.set(model, (m = { model, executions: 0, batches: [], weightHits: 0 }));
    m.executions++;
    const size = Math.max(timing.executedBatchSize, 1);
    let b = m.batches.find((x) => x.size === size);
    if (!b) m.batches.push((b = { size, count: 0, computeInputNs: 0, computeInferNs: 0, computeOutputNs: 0 }));
    b.count++;
    b.computeInputNs += timing.computeInputNs;
    b.computeInferNs += timing.computeInferNs;
    b.computeOutputNs += timing.computeOutputNs;
    if (load?.hit) m.weightHits++;
    else if (load) this.#loads.push({ model, load, memory });
    if (!this.#timer) {
      this.#timer = setTimeout(() => this.report(), this.#everyMs);
      this.#timer.unref(); // a pending report never keeps the thread alive
    }
  }

  /** Post what is counted (nothing when nothing ran since the last report), and start again at zero. */
  report(): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
    if (this.#executions === 0) return;
    this.#post({
      models: [...this.#models.values()],
      executions: this.#executions,
      busyNs: this.#busyNs,
      queued: this.#queued,
      rows: [...this.#rows],
      loads: this.#loads,
    });
    this.#models = new Map();
    this.#rows = new Map();
    this.#loads = [];
    this.#executions = 0;
    this.#busyNs = 0;
  }
}
