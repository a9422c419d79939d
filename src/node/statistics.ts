/**
 * Per-model inference statistics in Triton's vocabulary, served by the ModelStatistics RPC and read
 * by the Prometheus metrics. Durations are nanoseconds.
 *
 * - inference_count counts rows (a request of 8 rows counts 8);
 *   execution_count counts executions (8 coalesced requests count 1).
 * - success/fail count requests; success.ns is the whole time from decode to
 *   answer; queue and compute_* are each request's share of its execution
 *   (every request of a batch records the batch's compute times, as Triton does).
 * - batch_stats counts executions per executed batch size.
 *
 * Each is counted once, where it happens:
 * - requests by the thread that answers them (an edge thread, or the main thread), in shared
 *   memory per lease slot (shared/request-counters.ts): added in when read, and folded into the
 *   model's own counters here when a slot is freed;
 * - executions by the device that runs them, reported summed (actors/device/execution-costs.ts),
 *   which a reader asks every device for first (Devices.reported).
 *
 * These plain numbers are the only record: the Prometheus metrics (metrics.ts) read them when
 * /metrics is scraped, so a request costs a few atomic additions and no label lookups in prom-client.
 */
import { MODEL_VERSION } from '../shared/constants.js';
import type { ExecutionReport } from '../shared/channels/device.js';
import type { FailureReason } from '../shared/failure-reason.js';
import { DURATION_BUCKETS_MS, type RequestCounters, type SlotCounts } from '../shared/request-counters.js';

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
  /** Successful requests per duration bucket (request-counters.ts DURATION_BUCKETS_MS), each bucket its own. */
  durations: number[];
  /** executed batch size -> execution durations */
  batches: Map<number, { computeInput: Duration; computeInfer: Duration; computeOutput: Duration }>;
}

const zero = (): Duration => ({ count: 0, ns: 0 });
const addMany = (d: Duration, count: number, ns: number) => {
  d.count += count;
  d.ns += ns;
};
const duration = (d: Duration) => ({ count: d.count, ns: Math.round(d.ns) });

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
  /** Every thread's counts of its requests, and the slots in use, by model (none until the node shares them). */
  #requests: { counters: RequestCounters; slots: () => Iterable<[model: string, slot: number]> } | null = null;
  /** Requests sent to each device, per model, from slots folded already. */
  readonly #routes = new Map<string, Map<number, number>>();
  /**
   * Rows per execution, for the batch-size histogram: `executions` ran with `rows` rows (set by the metrics; none
   * without them).
   */
  onBatchRows: ((device: number, rows: number, executions: number) => void) | undefined;
  /** Scrapes rendering now, and the one reading of the models they share (`scraping`). */
  readonly #scrape: { depth: number; snapshot: [string, Readonly<ModelCounters>][] | null } = { depth: 0, snapshot: null };

  /**
   * Where requests are counted (every thread's, shared memory): `slots` lists every lease slot in use and its model.
   */
  shareCounters(counters: RequestCounters, slots: () => Iterable<[model: string, slot: number]>): void {
    this.#requests = { counters, slots };
  }

  /** A slot is freed (its leases drained): its counts become the model's own, and it starts again at zero. */
  fold(model: string, slot: number): void {
    if (!this.#requests) return;
    const counts = this.#requests.counters.take(slot);
    addCounts(this.#of(model), counts);
    addRoutes(this.#routes, model, counts);
  }

  /**
   * Every model that has counted something, with its counters, its live slots' included (read, never written, by the
   * caller).
   */
  *models(): IterableIterator<[string, Readonly<ModelCounters>]> {
    if (this.#scrape.depth === 0) return yield* this.#read();
    yield* (this.#scrape.snapshot ??= [...this.#read()]);
  }

  /**
   * `render` (a /metrics scrape) with every read of `models()` in it given one reading: each of the
   * dozen per-model families read every live slot of every model again (14 ms of a scrape at 200
   * models), and their figures came from a dozen moments. A scrape that begins reads anew.
   */
  async scraping<T>(render: () => Promise<T>): Promise<T> {
    this.#scrape.depth++;
    this.#scrape.snapshot = null;
    try {
      return await render();
    } finally {
      if (--this.#scrape.depth === 0) this.#scrape.snapshot = null;
    }
  }

  *#read(): IterableIterator<[string, Readonly<ModelCounters>]> {
    const live = this.#liveSlots();
    for (const [model, c] of this.#models) yield [model, this.#merged(c, live.get(model))];
    for (const [model, slots] of live) if (!this.#models.has(model)) yield [model, this.#merged(this.#of(model), slots)];
  }

  /** Requests every thread sent to each device, per model (stowage_requests_routed_total). */
  routes(): Map<string, Map<number, number>> {
    const routes = new Map([...this.#routes].map(([m, d]) => [m, new Map(d)]));
    if (this.#requests) for (const [model, slot] of this.#requests.slots()) addRoutes(routes, model, this.#requests.counters.read(slot));
    return routes;
  }

  /** The slots in use, by model. */
  #liveSlots(): Map<string, number[]> {
    const live = new Map<string, number[]>();
    if (this.#requests) for (const [model, slot] of this.#requests.slots()) (live.get(model) ?? live.set(model, []).get(model)!).push(slot);
    return live;
  }

  /** A model's counters with its live slots' counts added (a copy; the counters themselves when it has none). */
  #merged(c: ModelCounters, slots: number[] | undefined): ModelCounters {
    if (!slots?.length || !this.#requests) return c;
    const merged: ModelCounters = {
      ...c,
      success: { ...c.success }, fail: { ...c.fail }, queue: { ...c.queue },
      computeInput: { ...c.computeInput }, computeInfer: { ...c.computeInfer }, computeOutput: { ...c.computeOutput },
      failures: new Map(c.failures),
      durations: [...c.durations],
    };
    for (const slot of slots) addCounts(merged, this.#requests.counters.read(slot));
    return merged;
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
        failures: new Map(), batches: new Map(), durations: DURATION_BUCKETS_MS.map(() => 0),
      };
      this.#models.set(model, c);
    }
    return c;
  }

  /**
   * A device's executions since its last report (actors/device/execution-costs.ts): each counts
   * once, whatever the number of requests in it.
   */
  recordExecutions(device: number, report: ExecutionReport): void {
    let d = this.#devices.get(device);
    if (!d) this.#devices.set(device, (d = { executions: 0, busyNs: 0, queued: 0 }));
    d.executions += report.executions;
    d.busyNs += report.busyNs;
    d.queued = report.queued;
    if (this.onBatchRows) for (const [rows, executions] of report.rows) this.onBatchRows(device, rows, executions);
    for (const m of report.models) {
      const c = this.#of(m.model);
      c.executionCount += m.executions;
      for (const batch of m.batches) {
        let b = c.batches.get(batch.size);
        if (!b) c.batches.set(batch.size, (b = { computeInput: zero(), computeInfer: zero(), computeOutput: zero() }));
        addMany(b.computeInput, batch.count, batch.computeInputNs);
        addMany(b.computeInfer, batch.count, batch.computeInferNs);
        addMany(b.computeOutput, batch.count, batch.computeOutputNs);
      }
    }
  }

  /**
   * Seconds of device time a model's executions took, summed over its devices (ModelControlStatus's compute_seconds).
   */
  computeSeconds(model: string): number {
    let ns = 0;
    for (const b of this.#models.get(model)?.batches.values() ?? []) ns += b.computeInfer.ns;
    return ns / 1e9;
  }

  /** Rows its executions answered, summed over its devices: each batch's size times its count. */
  rowsExecuted(model: string): number {
    let rows = 0;
    for (const [size, b] of this.#models.get(model)?.batches ?? []) rows += size * b.computeInfer.count;
    return rows;
  }

  /** One model's statistics as a ModelStatistics message (zeros if it never ran). */
  snapshot(model: string) {
    const c = this.#merged(this.#of(model), this.#liveSlots().get(model));
    return {
      name: model,
      version: MODEL_VERSION,
      last_inference: c.lastInferenceMs,
      inference_count: c.inferenceCount,
      execution_count: c.executionCount,
      inference_stats: {
        success: duration(c.success), fail: duration(c.fail), queue: duration(c.queue),
        compute_input: duration(c.computeInput), compute_infer: duration(c.computeInfer), compute_output: duration(c.computeOutput),
        cache_hit: duration(zero()), cache_miss: duration(zero()),
      },
      batch_stats: [...c.batches.entries()].sort(([a], [b]) => a - b).map(([size, b]) => ({
        batch_size: size,
        compute_input: duration(b.computeInput), compute_infer: duration(b.computeInfer), compute_output: duration(b.computeOutput),
      })),
    };
  }
}

/** A slot's counts (every thread's) added to a model's counters. */
function addCounts(c: ModelCounters, counts: SlotCounts): void {
  const requests = counts.success.count;
  c.inferenceCount += counts.rows;
  c.success.count += requests;
  c.success.ns += counts.success.ns;
  c.fail.count += counts.fail.count;
  c.fail.ns += counts.fail.ns;
  // Each successful request records its queue and compute times once (Triton's per-request durations).
  for (const [d, ns] of [[c.queue, counts.queueNs], [c.computeInput, counts.computeInputNs], [c.computeInfer, counts.computeInferNs], [c.computeOutput, counts.computeOutputNs]] as const) {
    d.count += requests;
    d.ns += ns;
  }
  for (const [reason, n] of counts.failures) if (n > 0) c.failures.set(reason, (c.failures.get(reason) ?? 0) + n);
  for (const [i, n] of counts.durations.entries()) c.durations[i] += n;
  c.lastInferenceMs = Math.max(c.lastInferenceMs, counts.lastMs);
}

/** A slot's routes (the edges': the main thread's are the metrics' own) added, per model and device. */
function addRoutes(routes: Map<string, Map<number, number>>, model: string, counts: SlotCounts): void {
  for (const [device, n] of counts.routes.entries()) {
    if (n === 0) continue;
    const byDevice = routes.get(model) ?? routes.set(model, new Map()).get(model)!;
    byDevice.set(device, (byDevice.get(device) ?? 0) + n);
  }
}
