/**
 * Each model's load and residency over wall-clock windows, as a node reports them to the gateways
 * that pool a fleet's memory (ModelControlStatus with `window_seconds`; remote/fleet-routes.ts).
 *
 * Why the node and not each gateway: two gateways that measured loads themselves would read the
 * node's counters a few milliseconds apart and get slightly different loads, and near a threshold
 * slightly different placements. Here the window the first reader after a wall-clock boundary
 * closes is published until the next boundary: every gateway that reads within one window gets the
 * very same numbers (the load over the window before, and the residency as it ended), so gateways
 * fed the same node set place alike by construction. The gateways read at mid-window, away from
 * the boundaries.
 */

/** A model's counters now. */
export interface ModelReading {
  /** Device time its executions took so far (a counter). */
  computeSeconds: number;
  /** Bytes of its weights on the node's devices now. */
  residentBytes: number;
  /** Rows its executions answered so far (a counter; absent: 0). */
  rows?: number;
  /** Requests waiting in its device queues now (absent: 0). */
  queued?: number;
  /** Rows refused so far because its device queues were full (a counter; absent: 0). */
  refused?: number;
  /** Rows per second one device answers of it at full batches, from its learned costs now (absent: 0). */
  capacity?: number;
  /** Seconds its batches waited for its weights to come onto a device so far (a counter; absent: 0). */
  weightLoadSeconds?: number;
}

/** A model in the last whole window. */
export interface WindowReport {
  /** Device-seconds per second its executions took over the window (0 for the first window read). */
  load: number;
  /** Bytes of its weights on the devices as the window ended. */
  residentBytes: number;
  /**
   * Requests per second that came for it over the window: the rows its executions answered, plus
   * what its queues grew by and what its full queues refused (0 for the first window read). Not
   * what was answered alone: a model whose nodes fall behind answers less than it is asked, and a
   * rate read from answers would give it fewer nodes the further behind they fell. Nor without the
   * refusals: a queue at its cap grows no more, and a model whose popularity jumped past its one
   * node read as that node's capacity, gaining nodes a few at a time while its requests were
   * refused (bench/fleet-sim.js --hot 10 with popularity drifting: ~124,000 refused over 8 s). A
   * request refused here and retried on another holder counts on both: only while nodes refuse.
   */
  rate: number;
  /** Its capacity (ModelReading's) as the window ended. */
  capacity: number;
  /** Device-seconds a second its batches waited for its weights over the window (cold loads; 0 at the first read). */
  weightLoad: number;
}

interface Window {
  /** Which window of its length (wall-clock ms divided by the length) it was taken in. */
  index: number;
  atMs: number;
  taken: Map<string, ModelReading>;
  published: Map<string, WindowReport>;
}

/** Window lengths kept at once: gateways of one fleet ask for one; a few more cost nothing; no caller makes it grow. */
const MAX_LENGTHS = 4;

export class LoadWindows {
  readonly #windows = new Map<number, Window>();

  /**
   * The last whole window of `windowSeconds` before `nowMs`, per model; `current` reads the counters when a window
   * closes.
   */
  read(windowSeconds: number, nowMs: number, current: () => Map<string, ModelReading>): ReadonlyMap<string, WindowReport> {
    const lengthMs = windowSeconds * 1000;
    const index = Math.floor(nowMs / lengthMs);
    const last = this.#windows.get(lengthMs);
    if (last) {
      this.#windows.delete(lengthMs); // most recently used last
      this.#windows.set(lengthMs, last);
      if (last.index === index) return last.published;
    }
    const taken = current();
    const seconds = last ? (nowMs - last.atMs) / 1000 : 0;
    const published = new Map<string, WindowReport>();
    for (const [model, now] of taken) {
      const before = last?.taken.get(model);
      // A counter that went back (the model's statistics began again) gives nothing, never a negative figure.
      const perSecond = (now: number, then: number) => (seconds > 0 && now >= then ? (now - then) / seconds : 0);
      const load = perSecond(now.computeSeconds, before?.computeSeconds ?? 0);
      const rate = perSecond((now.rows ?? 0) + (now.queued ?? 0) + (now.refused ?? 0), (before?.rows ?? 0) + (before?.queued ?? 0) + (before?.refused ?? 0));
      const weightLoad = perSecond(now.weightLoadSeconds ?? 0, before?.weightLoadSeconds ?? 0);
      published.set(model, { load, residentBytes: now.residentBytes, rate, capacity: now.capacity ?? 0, weightLoad });
    }
    this.#windows.set(lengthMs, { index, atMs: nowMs, taken, published });
    if (this.#windows.size > MAX_LENGTHS) this.#windows.delete(this.#windows.keys().next().value!);
    return published;
  }
}
