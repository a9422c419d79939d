/**
 * Per-model inference statistics in Triton's vocabulary, kept on the main
 * thread and served by the ModelStatistics RPC. Durations are nanoseconds.
 *
 * - inference_count counts rows (a request of 8 rows counts 8);
 *   execution_count counts executions (8 coalesced requests count 1).
 * - success/fail count requests; success.ns is the whole time from decode to
 *   answer; queue and compute_* are each request's share of its execution
 *   (every request of a batch records the batch's compute times, as Triton does).
 * - batch_stats counts executions per executed batch size.
 *
 * These plain numbers are the only record of a request: the Prometheus metrics
 * (metrics.ts) read them when /metrics is scraped, so a request costs a few
 * additions here and no label lookups in prom-client.
 */
import { MODEL_VERSION } from '../shared/constants.js';
import type { ExecutionTiming } from '../shared/channels/inference.js';
import type { ErrorCode } from '../shared/errors.js';
import { failureReason, type FailureReason } from './failure-reason.js';

interface Duration {
  count: number;
  ns: number;
}

export interface ModelCounters {
  lastInferenceMs: number;
  inferenceCount: number;
  executionCount: number;
  success: Duration;
  fail: Duration;
  queue: Duration;
  computeInput: Duration;
  computeInfer: Duration;
  computeOutput: Duration;
  /** Failed requests by Triton's reason (nv_inference_request_failure). */
  failures: Map<FailureReason, number>;
  /** executed batch size -> execution durations */
  batches: Map<number, { computeInput: Duration; computeInfer: Duration; computeOutput: Duration }>;
}

const zero = (): Duration => ({ count: 0, ns: 0 });
const add = (d: Duration, ns: number) => {
  d.count++;
  d.ns += ns;
};
const wire = (d: Duration) => ({ count: String(d.count), ns: String(Math.round(d.ns)) });

/** Per-device totals of executions (stowage_device_*). */
export interface DeviceCounters {
  executions: number;
  busyNs: number;
  /** Requests queued on the device after its last execution. */
  queued: number;
}

/** Keeps ModelStatistics' counters, which the Prometheus metrics read too. */
export class Statistics {
  readonly #models = new Map<string, ModelCounters>();
  readonly #devices = new Map<number, DeviceCounters>();
  /** Rows of each execution, for the batch-size histogram (set by the metrics; none without them). */
  onBatchRows: ((device: number, rows: number) => void) | undefined;

  /** Every model that has counted something, with its counters (read, never written, by the caller). */
  models(): IterableIterator<[string, Readonly<ModelCounters>]> {
    return this.#models.entries();
  }

  devices(): IterableIterator<[number, Readonly<DeviceCounters>]> {
    return this.#devices.entries();
  }

  #of(model: string): ModelCounters {
    let c = this.#models.get(model);
    if (!c) {
      c = {
        lastInferenceMs: 0, inferenceCount: 0, executionCount: 0,
        success: zero(), fail: zero(), queue: zero(), computeInput: zero(), computeInfer: zero(), computeOutput: zero(),
        failures: new Map(), batches: new Map(),
      };
      this.#models.set(model, c);
    }
    return c;
  }

  /** Once per execution, whatever the number of requests in it. */
  recordExecution(model: string, device: number, timing: ExecutionTiming, queued: number): void {
    let d = this.#devices.get(device);
    if (!d) this.#devices.set(device, (d = { executions: 0, busyNs: 0, queued: 0 }));
    d.executions++;
    d.busyNs += timing.computeInferNs;
    d.queued = queued;
    this.onBatchRows?.(device, timing.batchRows);
    const c = this.#of(model);
    c.executionCount++;
    const size = Math.max(timing.executedBatchSize, 1);
    let b = c.batches.get(size);
    if (!b) c.batches.set(size, (b = { computeInput: zero(), computeInfer: zero(), computeOutput: zero() }));
    add(b.computeInput, timing.computeInputNs);
    add(b.computeInfer, timing.computeInferNs);
    add(b.computeOutput, timing.computeOutputNs);
  }

  recordSuccess(model: string, rows: number, totalNs: number, queueNs: number, timing: ExecutionTiming): void {
    const c = this.#of(model);
    c.lastInferenceMs = Date.now();
    c.inferenceCount += Math.max(rows, 1);
    add(c.success, totalNs);
    add(c.queue, queueNs);
    add(c.computeInput, timing.computeInputNs);
    add(c.computeInfer, timing.computeInferNs);
    add(c.computeOutput, timing.computeOutputNs);
  }

  recordFailure(model: string, code: ErrorCode | undefined, totalNs: number): void {
    const c = this.#of(model);
    c.lastInferenceMs = Date.now();
    add(c.fail, totalNs);
    const reason = failureReason(code);
    c.failures.set(reason, (c.failures.get(reason) ?? 0) + 1);
  }

  /** Seconds of device time a model's executions took, summed over its devices (ModelControlStatus's compute_seconds). */
  computeSeconds(model: string): number {
    let ns = 0;
    for (const b of this.#models.get(model)?.batches.values() ?? []) ns += b.computeInfer.ns;
    return ns / 1e9;
  }

  /** One model's statistics as a ModelStatistics message (zeros if it never ran). */
  snapshot(model: string) {
    const c = this.#of(model);
    return {
      name: model,
      version: MODEL_VERSION,
      last_inference: String(c.lastInferenceMs),
      inference_count: String(c.inferenceCount),
      execution_count: String(c.executionCount),
      inference_stats: {
        success: wire(c.success), fail: wire(c.fail), queue: wire(c.queue),
        compute_input: wire(c.computeInput), compute_infer: wire(c.computeInfer), compute_output: wire(c.computeOutput),
        cache_hit: wire(zero()), cache_miss: wire(zero()),
      },
      batch_stats: [...c.batches.entries()].sort(([a], [b]) => a - b).map(([size, b]) => ({
        batch_size: String(size),
        compute_input: wire(b.computeInput), compute_infer: wire(b.computeInfer), compute_output: wire(b.computeOutput),
      })),
    };
  }
}
