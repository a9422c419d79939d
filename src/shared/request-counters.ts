/**
 * What every thread that runs the request path counts of the requests it answers (each edge
 * thread and the main thread, in its rooms: actors/rooms/rooms.ts), in shared memory where
 * it happens: the main thread reads the counts when ModelStatistics or /metrics asks
 * (node/statistics.ts), with no report to wait for.
 *
 * SharedArrayBuffers of 64-bit integers updated with atomic operations:
 * - per lease slot (shared/leases.ts: a slot stands for one loaded instance of a model while it
 *   is routed; a segment of counters per segment of slots) and per thread (a row per edge and the
 *   main thread's last, so every word has one writer): Triton's per-request counters (successes
 *   and failures with their durations, rows, queue and compute time, the latest request's time,
 *   failures by reason), successful requests by duration bucket (a histogram, for p50/p99 per
 *   model) and the requests an edge sent to each device;
 * - per edge thread: the requests it routed itself, ever (stowage_edge_served_requests_total).
 *
 * A thread counts a request before it answers it and before it gives its lease back: a client that
 * asks for statistics after its answer finds its request counted (the atomics order the writes
 * before the reads that follow them), and once the main thread has seen a slot's leases drained
 * it may fold the slot's counts into its own (`take`) and reuse the slot for another instance.
 */
import type { ExecutionTiming } from './channels/inference.js';
import { FAILURE_REASONS, type FailureReason } from './failure-reason.js';
import { SEGMENT_SLOTS } from './leases.js';

const SUCCESS = 0;
const SUCCESS_NS = 1;
const FAIL = 2;
const FAIL_NS = 3;
const ROWS = 4;
const QUEUE_NS = 5;
const INPUT_NS = 6;
const INFER_NS = 7;
const OUTPUT_NS = 8;
const LAST_MS = 9;
const REASONS = 10;
/**
 * Upper bounds (ms) of the buckets successful requests are counted in by their whole time
 * (stowage_request_duration_seconds); a request past the last counts in the total alone (+Inf).
 */
export const DURATION_BUCKETS_MS = [1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000] as const;

/** The DURATION_BUCKETS_MS bucket a request of `durationNs` counts in; -1 past the last (the total alone). */
export function durationBucket(durationNs: number): number {
  return DURATION_BUCKETS_MS.findIndex((le) => durationNs <= le * 1e6);
}

/**
 * One label's requests by duration, as a histogram's series are written from them (node/metrics.ts countedHistogram):
 * per DURATION_BUCKETS_MS bucket (each its own, not cumulative), the count and the seconds.
 */
export interface CountedSeries {
  label: string;
  buckets: readonly number[];
  count: number;
  seconds: number;
}
const BUCKETS = REASONS + FAILURE_REASONS.length;
/** The first of the per-device route counts. */
const ROUTES = BUCKETS + DURATION_BUCKETS_MS.length;

/** One slot's counts, summed over the edges. */
export interface SlotCounts {
  success: { count: number; ns: number };
  fail: { count: number; ns: number };
  /** Rows of the successful requests (inference_count). */
  rows: number;
  queueNs: number;
  computeInputNs: number;
  computeInferNs: number;
  computeOutputNs: number;
  /** The latest request's time (ms since the epoch); 0: none. */
  lastMs: number;
  failures: Map<FailureReason, number>;
  /** Successful requests per duration bucket (DURATION_BUCKETS_MS; each bucket its own, not cumulative). */
  durations: number[];
  /** Requests sent to each device, by device index (0..devices-1). */
  routes: number[];
}

/** The counters' shared memory and its shape: what the main thread hands each edge (RoomsStart). */
export interface CountersShape {
  /** A segment per segment of lease slots (shared/leases.ts SEGMENT_SLOTS slots each), added as they are. */
  segments: SharedArrayBuffer[];
  /** Each edge's requests routed itself, ever (a word per row). */
  totals: SharedArrayBuffer;
  /** A row per edge thread, and the main thread's last. */
  rows: number;
  /** Device indexes a request may be routed to (0..devices-1). */
  devices: number;
}

export class RequestCounters {
  readonly #segments: BigInt64Array[] = [];
  readonly #totals: BigInt64Array;
  readonly #rows: number;
  readonly #devices: number;
  /** This thread's row: an edge's index; the main thread's is the last (it also reads and takes). */
  readonly #row: number;

  /** `shape`: made by `RequestCounters.create` on the main thread, shared with each edge (`row`: its index). */
  constructor(shape: CountersShape, row: number) {
    this.#totals = new BigInt64Array(shape.totals);
    this.#rows = shape.rows;
    this.#devices = shape.devices;
    this.#row = row;
    for (const segment of shape.segments) this.adopt(segment);
  }

  /**
   * The main thread's counters, all at zero, for `edges` edge threads and itself (its row is the
   * last, as in the leases); a segment is added with each of the leases' (`grow`).
   */
  static create(edges: number, devices: number): RequestCounters {
    const rows = edges + 1;
    return new RequestCounters({ segments: [], totals: new SharedArrayBuffer(8 * rows), rows, devices }, edges);
  }

  /** What an edge starts with (segments added later come as the leases' do). */
  get shape(): CountersShape {
    return { segments: this.#segments.map((s) => s.buffer as SharedArrayBuffer), totals: this.#totals.buffer as SharedArrayBuffer, rows: this.#rows, devices: this.#devices };
  }

  /** The main thread: the counters of the lease slots' next segment, to send to the edges. */
  grow(): SharedArrayBuffer {
    const segment = new SharedArrayBuffer(8 * SEGMENT_SLOTS * this.#rows * (ROUTES + this.#devices));
    this.adopt(segment);
    return segment;
  }

  /** An edge: a segment the main thread added. */
  adopt(segment: SharedArrayBuffer): void {
    this.#segments.push(new BigInt64Array(segment));
  }

  #words(slot: number): BigInt64Array {
    return this.#segments[Math.floor(slot / SEGMENT_SLOTS)];
  }

  /** Where `row`'s counts for `slot` start in its segment. */
  #at(slot: number, row: number): number {
    return ((slot % SEGMENT_SLOTS) * this.#rows + row) * (ROUTES + this.#devices);
  }

  #add(words: BigInt64Array, index: number, value: number): void {
    Atomics.add(words, index, BigInt(Math.max(0, Math.round(value))));
  }

  /** This edge sent a request on `slot` to device index `device`. */
  routed(slot: number, device: number): void {
    this.#add(this.#words(slot), this.#at(slot, this.#row) + ROUTES + device, 1);
    this.#add(this.#totals, this.#row, 1);
  }

  /** A request on `slot` answered: its rows, its whole time, and its share of the execution. */
  succeeded(slot: number, rows: number, durationNs: number, queueNs: number, timing: ExecutionTiming): void {
    const words = this.#words(slot);
    const at = this.#at(slot, this.#row);
    this.#add(words, at + ROWS, Math.max(rows, 1));
    this.#add(words, at + SUCCESS_NS, durationNs);
    this.#add(words, at + QUEUE_NS, queueNs);
    this.#add(words, at + INPUT_NS, timing.computeInputNs);
    this.#add(words, at + INFER_NS, timing.computeInferNs);
    this.#add(words, at + OUTPUT_NS, timing.computeOutputNs);
    const bucket = durationBucket(durationNs);
    if (bucket >= 0) this.#add(words, at + BUCKETS + bucket, 1);
    Atomics.store(words, at + LAST_MS, BigInt(Date.now()));
    this.#add(words, at + SUCCESS, 1); // last: a reader that sees the count sees its durations
  }

  /** A request on `slot` failed, for `reason`, after `durationNs`. */
  failed(slot: number, reason: FailureReason, durationNs: number): void {
    const words = this.#words(slot);
    const at = this.#at(slot, this.#row);
    this.#add(words, at + FAIL_NS, durationNs);
    this.#add(words, at + REASONS + FAILURE_REASONS.indexOf(reason), 1);
    Atomics.store(words, at + LAST_MS, BigInt(Date.now()));
    this.#add(words, at + FAIL, 1);
  }

  /** `slot`'s counts now, over every edge. */
  read(slot: number): SlotCounts {
    const words = this.#words(slot);
    const sum = (field: number) => {
      let n = 0n;
      for (let row = 0; row < this.#rows; row++) n += Atomics.load(words, this.#at(slot, row) + field);
      return Number(n);
    };
    let lastMs = 0n;
    for (let row = 0; row < this.#rows; row++) {
      const t = Atomics.load(words, this.#at(slot, row) + LAST_MS);
      if (t > lastMs) lastMs = t;
    }
    return {
      success: { count: sum(SUCCESS), ns: sum(SUCCESS_NS) },
      fail: { count: sum(FAIL), ns: sum(FAIL_NS) },
      rows: sum(ROWS),
      queueNs: sum(QUEUE_NS),
      computeInputNs: sum(INPUT_NS),
      computeInferNs: sum(INFER_NS),
      computeOutputNs: sum(OUTPUT_NS),
      lastMs: Number(lastMs),
      failures: new Map(FAILURE_REASONS.map((r, i) => [r, sum(REASONS + i)])),
      durations: DURATION_BUCKETS_MS.map((_, i) => sum(BUCKETS + i)),
      routes: Array.from({ length: this.#devices }, (_, d) => sum(ROUTES + d)),
    };
  }

  /**
   * `slot`'s counts, and the slot zeroed: only once no edge holds a lease on it (its requests are
   * all counted) and before it stands for another instance.
   */
  take(slot: number): SlotCounts {
    const counts = this.read(slot);
    const words = this.#words(slot);
    for (let row = 0; row < this.#rows; row++) {
      const at = this.#at(slot, row);
      for (let field = 0; field < ROUTES + this.#devices; field++) Atomics.store(words, at + field, 0n);
    }
    return counts;
  }

  /** Requests edge `row` routed itself, ever. */
  servedOf(row: number): number {
    return Number(Atomics.load(this.#totals, row));
  }
}
