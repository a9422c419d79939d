/**
 * What edge threads count of the requests they hand to the device actors themselves (the path
 * on the edge, actors/edge/edge-path.ts), in shared memory where it happens: the main thread reads the
 * counts when ModelStatistics or /metrics asks (node/statistics.ts), with no report to wait for.
 *
 * One SharedArrayBuffer of 64-bit integers updated with atomic operations:
 * - per lease slot (shared/leases.ts: a slot stands for one loaded instance of a model while it
 *   is routed) and per edge thread (a row each, so every word has one writer): Triton's
 *   per-request counters (successes and failures with their durations, rows, queue and compute
 *   time, the latest request's time, failures by reason) and the requests sent to each device;
 * - per edge thread: the requests it routed itself, ever (stowage_edge_direct_requests_total).
 *
 * An edge counts a request before it answers it and before it gives its lease back: a client that
 * asks for statistics after its answer finds its request counted (the atomics order the writes
 * before the reads that follow them), and once the main thread has seen a slot's leases drained
 * it may fold the slot's counts into its own (`take`) and reuse the slot for another instance.
 */
import type { ExecutionTiming } from './channels/inference.js';
import { FAILURE_REASONS, type FailureReason } from './failure-reason.js';

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
/** The first of the per-device route counts. */
const ROUTES = REASONS + FAILURE_REASONS.length;

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
  /** Requests sent to each device, by device index (0..devices-1). */
  routes: number[];
}

/** The counters' shared memory and its shape: what the main thread hands each edge (DirectStart). */
export interface CountersShape {
  memory: SharedArrayBuffer;
  /** Lease slots (shared/leases.ts). */
  slots: number;
  /** Edge threads, a row each. */
  rows: number;
  /** Device indexes a request may be routed to (0..devices-1). */
  devices: number;
}

export class RequestCounters {
  readonly shape: CountersShape;
  readonly #words: BigInt64Array;
  readonly #rows: number;
  readonly #devices: number;
  readonly #slots: number;
  /** This thread's row (an edge's index); -1 on the main thread, which only reads and takes. */
  readonly #row: number;

  /** `shape`: made by `RequestCounters.create` on the main thread, shared with each edge. */
  constructor(shape: CountersShape, row = -1) {
    this.shape = shape;
    this.#words = new BigInt64Array(shape.memory);
    this.#slots = shape.slots;
    this.#rows = shape.rows;
    this.#devices = shape.devices;
    this.#row = row;
  }

  /** New counters, all at zero, read from the main thread. */
  static create(slots: number, rows: number, devices: number): RequestCounters {
    return new RequestCounters({ memory: new SharedArrayBuffer(8 * (slots * rows * (ROUTES + devices) + rows)), slots, rows, devices });
  }

  #at(slot: number, row: number): number {
    return (slot * this.#rows + row) * (ROUTES + this.#devices);
  }

  /** The per-edge totals, after every slot's words. */
  #total(row: number): number {
    return this.#slots * this.#rows * (ROUTES + this.#devices) + row;
  }

  #add(index: number, value: number): void {
    Atomics.add(this.#words, index, BigInt(Math.max(0, Math.round(value))));
  }

  /** This edge sent a request on `slot` to device index `device`. */
  routed(slot: number, device: number): void {
    this.#add(this.#at(slot, this.#row) + ROUTES + device, 1);
    this.#add(this.#total(this.#row), 1);
  }

  /** A request on `slot` answered: its rows, its whole time, and its share of the execution. */
  succeeded(slot: number, rows: number, durationNs: number, queueNs: number, timing: ExecutionTiming): void {
    const at = this.#at(slot, this.#row);
    this.#add(at + ROWS, Math.max(rows, 1));
    this.#add(at + SUCCESS_NS, durationNs);
    this.#add(at + QUEUE_NS, queueNs);
    this.#add(at + INPUT_NS, timing.computeInputNs);
    this.#add(at + INFER_NS, timing.computeInferNs);
    this.#add(at + OUTPUT_NS, timing.computeOutputNs);
    Atomics.store(this.#words, at + LAST_MS, BigInt(Date.now()));
    this.#add(at + SUCCESS, 1); // last: a reader that sees the count sees its durations
  }

  /** A request on `slot` failed, for `reason`, after `durationNs`. */
  failed(slot: number, reason: FailureReason, durationNs: number): void {
    const at = this.#at(slot, this.#row);
    this.#add(at + FAIL_NS, durationNs);
    this.#add(at + REASONS + FAILURE_REASONS.indexOf(reason), 1);
    Atomics.store(this.#words, at + LAST_MS, BigInt(Date.now()));
    this.#add(at + FAIL, 1);
  }

  /** `slot`'s counts now, over every edge. */
  read(slot: number): SlotCounts {
    const sum = (field: number) => {
      let n = 0n;
      for (let row = 0; row < this.#rows; row++) n += Atomics.load(this.#words, this.#at(slot, row) + field);
      return Number(n);
    };
    let lastMs = 0n;
    for (let row = 0; row < this.#rows; row++) {
      const t = Atomics.load(this.#words, this.#at(slot, row) + LAST_MS);
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
      routes: Array.from({ length: this.#devices }, (_, d) => sum(ROUTES + d)),
    };
  }

  /**
   * `slot`'s counts, and the slot zeroed: only once no edge holds a lease on it (its requests are
   * all counted) and before it stands for another instance.
   */
  take(slot: number): SlotCounts {
    const counts = this.read(slot);
    for (let row = 0; row < this.#rows; row++) {
      const at = this.#at(slot, row);
      for (let field = 0; field < ROUTES + this.#devices; field++) Atomics.store(this.#words, at + field, 0n);
    }
    return counts;
  }

  /** Requests edge `row` routed itself, ever. */
  directOf(row: number): number {
    return Number(Atomics.load(this.#words, this.#total(row)));
  }
}
