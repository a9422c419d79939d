/**
 * The device's scheduler: per-model queues, the discipline that picks which
 * model runs next, and coalescing of that model's queued requests into one
 * batch. Pure: it owns no thread, no timer and no ONNX Runtime; the device
 * actor feeds it requests and runs what `next()` returns, and tests drive it
 * with a fake clock.
 *
 * Ownership: a request belongs to the scheduler from `enqueue` until `next()`
 * hands it out (in a batch, or shed) or `cancel()` returns it. The scheduler
 * queues the requests themselves (the device's InferCommand): it reads only
 * the fields of `Queued`. Queues are per loaded instance (`instance`).
 *
 * Disciplines (the seeds' `scheduler.discipline`):
 * - fair: each model carries the device time it has been charged, divided by
 *   its weight; the least-charged model with queued work goes next, and each
 *   execution is charged the model's learned cost for that batch size. A
 *   model that was idle re-enters at the current charge level, so idleness
 *   banks no credit and a flood on one model cannot starve another. With the
 *   weight cache on (`resident` given), a model whose weights are on the
 *   device may go before a less-charged one whose weights are not, while its
 *   charge is within what that one's coming on would cost (its last cold
 *   load and one execution): serving the queued models strictly in turn is a
 *   cycle over more models than the budget may hold, LRU's worst case (every
 *   call cold), and the detour is bounded by that much device time.
 * - fifo: the model whose oldest queued request is oldest goes next.
 * - edf: the model whose most urgent request has the earliest deadline goes
 *   next; a request whose remaining time is below the model's learned cost is
 *   shed instead of run late.
 * In every discipline a request past its deadline, or queued longer than
 * `dispatch_timeout_seconds`, is shed and never runs.
 *
 * Requests on their way: a request whose preprocess hook is still running on a hook thread is
 * announced (`expect`) before its inputs arrive (`arrived`). A model with such requests is held
 * back for a moment: its queue is not picked while it has room in its batch and its oldest
 * request has waited less than one execution of what is queued would take (the learned cost, at
 * most MAX_HOLD_FOR_INPUTS_MS), so that the rows on their way ride in the same execution instead
 * of each costing one of their own. The hold ends at once when the last expected request arrives
 * or is withdrawn, so a lone request is never delayed; other models' queues run meanwhile;
 * `next()` says when the first hold ends (`heldUntilMs`).
 */
import type { Discipline } from '../../shared/config-schema.js';
import { errors } from '../../shared/errors.js';
import { MAX_HOLD_FOR_INPUTS_MS } from '../../shared/constants.js';
import type { CostModel } from './cost-model.js';

export type { Discipline };

export interface QueuePolicy {
  /** Share of device time under `fair` (the seeds' scheduler.models.<name>.weight). */
  weight: number;
  /** Most rows one execution may carry: the largest compiled size, capped by max_batch_size; 1 if unbatched. */
  maxBatchRows: number;
}

/** What the scheduler reads of a queued request. */
export interface Queued {
  readonly id: number;
  /** The loaded instance whose queue it joins. */
  readonly instance: string;
  /** Rows on the batch axis (1 for an unbatched model). */
  readonly rows: number;
  readonly enqueuedAtMs: number;
  /** Absolute deadline from the client; Infinity when it set none. */
  readonly deadlineMs: number;
}

export type ShedReason = 'deadline' | 'waited' | 'laxity';

export interface Pick<T extends Queued> {
  /** Requests of one model to run as one execution, in order; empty when nothing is queued or every queue is held. */
  batch: T[];
  /** Requests dropped instead of run, with why. */
  shed: { request: T; reason: ShedReason }[];
  /** When `batch` is empty because queues are held for rows on their way: when the first hold ends (the clock of `now`). */
  heldUntilMs?: number;
}

/** `Id`: what names a queue (the device's InstanceKey; tests use plain strings). */
export interface SchedulerOptions<Id extends string = string> {
  discipline: Discipline;
  /** Per-model queue cap (scheduler.max_queue_depth). */
  maxQueueDepth: number;
  /** Longest a request may wait in the queue, ms (scheduler.dispatch_timeout_seconds). */
  maxWaitMs: number;
  costs: CostModel;
  now: () => number;
  /** Whether a model's weights are on the device now (the weight cache); absent: all are. */
  resident?: (instance: Id) => boolean;
}

interface ModelQueue<T extends Queued> {
  policy: QueuePolicy;
  /** Arrival order (fair, fifo) or deadline order (edf). */
  requests: T[];
  /** Device time charged so far, divided by the weight (fair). */
  charged: number;
  /** When this model was last picked, to rotate among equals. */
  lastPicked: number;
  /** Requests announced whose inputs have not arrived (a preprocess hook still running). */
  expected: number;
  /** Device ms its last cold load took (chargeTime), 0 before one: part of the fair detour's bound. */
  lastLoadMs: number;
}

export class Scheduler<T extends Queued> {
  readonly #options: SchedulerOptions<T['instance']>;
  /** Per loaded instance (a model version), under the requests' own key type. */
  readonly #queues = new Map<T['instance'], ModelQueue<T>>();
  /** The charge level of the last model picked: where an idle model re-enters (fair). */
  #virtualMs = 0;
  #picks = 0;
  #queued = 0;

  constructor(options: SchedulerOptions<T['instance']>) {
    this.#options = options;
  }

  /** Requests waiting, across models. */
  get queued(): number {
    return this.#queued;
  }

  queuedFor(model: T['instance']): number {
    return this.#queues.get(model)?.requests.length ?? 0;
  }

  policyOf(model: T['instance']): QueuePolicy | undefined {
    return this.#queues.get(model)?.policy;
  }

  /** Register a model (or change its policy); its queue is kept. */
  setModel(model: T['instance'], policy: QueuePolicy): void {
    const q = this.#queues.get(model);
    if (q) q.policy = policy;
    else this.#queues.set(model, { policy, requests: [], charged: this.#virtualMs, lastPicked: -1, expected: 0, lastLoadMs: 0 });
  }

  /** Forget a model; its queued requests are returned for the caller to fail. */
  removeModel(model: T['instance']): T[] {
    const q = this.#queues.get(model);
    this.#queues.delete(model);
    this.#options.costs.forget(model);
    this.#queued -= q?.requests.length ?? 0;
    return q?.requests ?? [];
  }

  /** Queue a request; RESOURCE_EXHAUSTED when the model's queue is full. */
  enqueue(request: T): void {
    const q = this.#queues.get(request.instance);
    if (!q) throw errors.modelNotReady(request.instance, 'UNAVAILABLE', 'not loaded on this device');
    if (q.requests.length >= this.#options.maxQueueDepth) throw errors.queueFull(request.instance, this.#options.maxQueueDepth);
    if (q.requests.length === 0) q.charged = Math.max(q.charged, this.#virtualMs);
    if (this.#options.discipline === 'edf') {
      // Keep deadline order; equal deadlines stay in arrival order.
      const key = this.#urgency(request);
      let at = q.requests.length;
      while (at > 0 && this.#urgency(q.requests[at - 1]) > key) at--;
      q.requests.splice(at, 0, request);
    } else {
      q.requests.push(request);
    }
    this.#queued++;
  }

  /** A request of `model` is on its way: its inputs come later (see the header). */
  expect(model: T['instance']): void {
    const q = this.#queues.get(model);
    if (q) q.expected++;
  }

  /** An expected request arrived (it is enqueued next) or was withdrawn. */
  arrived(model: T['instance']): void {
    const q = this.#queues.get(model);
    if (q && q.expected > 0) q.expected--;
  }

  /** Take a queued request out; undefined if it is not queued (already running or answered). */
  cancel(id: number): T | undefined {
    for (const q of this.#queues.values()) {
      const at = q.requests.findIndex((t) => t.id === id);
      if (at >= 0) {
        this.#queued--;
        return q.requests.splice(at, 1)[0];
      }
    }
    return undefined;
  }

  /** Shed what can no longer run, pick the next model by the discipline, and coalesce its requests. */
  next(): Pick<T> {
    const shed = this.#shedExpired();
    for (;;) {
      const { queue: q, heldUntilMs } = this.#pickQueue();
      if (!q) return heldUntilMs === Infinity ? { batch: [], shed } : { batch: [], shed, heldUntilMs };
      if (this.#options.discipline === 'edf') {
        const head = q.requests[0];
        const remaining = head.deadlineMs - this.#options.now();
        if (remaining < this.#options.costs.estimate(head.instance, head.rows)) {
          q.requests.shift();
          this.#queued--;
          shed.push({ request: head, reason: 'laxity' });
          continue;
        }
      }
      q.lastPicked = this.#picks++;
      this.#virtualMs = Math.max(this.#virtualMs, q.charged);
      return { batch: this.#coalesce(q), shed };
    }
  }

  /**
   * The models with queued requests, in the order the discipline would pick them if nothing
   * changed (fair: least charged; fifo: oldest head; edf: most urgent head), holds and the resident
   * detour aside: what the device uploads weights ahead for (uploads-ahead.ts).
   */
  upcoming(): T['instance'][] {
    const waiting: [T['instance'], number, number][] = [];
    for (const [model, q] of this.#queues) {
      if (q.requests.length === 0) continue;
      const head = q.requests[0];
      waiting.push([model, this.#options.discipline === 'fair' ? q.charged : this.#options.discipline === 'fifo' ? head.enqueuedAtMs : this.#urgency(head), q.lastPicked]);
    }
    // Ties as #pickQueue breaks them: the one picked longest ago.
    return waiting.sort((a, b) => a[1] - b[1] || a[2] - b[2]).map(([model]) => model);
  }

  /** After an execution: learn its cost and charge it to the model (fair). */
  charge(model: T['instance'], executedRows: number, executedMs: number): void {
    const cost = this.#options.costs.record(model, executedRows, executedMs, this.#options.now());
    const q = this.#queues.get(model);
    if (q) q.charged += cost / q.policy.weight;
  }

  /** Charge device time that is not an execution (bringing the model's weights on) to the model (fair). */
  chargeTime(model: T['instance'], ms: number): void {
    const q = this.#queues.get(model);
    if (!q) return;
    q.charged += ms / q.policy.weight;
    q.lastLoadMs = ms;
  }

  /** The queue-wait bound folded into the deadline: what edf orders by. */
  #urgency(t: T): number {
    return Math.min(t.deadlineMs, t.enqueuedAtMs + this.#options.maxWaitMs);
  }

  #shedExpired(): Pick<T>['shed'] {
    const now = this.#options.now();
    const shed: Pick<T>['shed'] = [];
    // A full scan: queues are bounded by max_queue_depth and this runs once per execution.
    for (const q of this.#queues.values()) {
      if (q.requests.length === 0) continue;
      const keep: T[] = [];
      for (const t of q.requests) {
        if (now > t.deadlineMs) shed.push({ request: t, reason: 'deadline' });
        else if (now - t.enqueuedAtMs > this.#options.maxWaitMs) shed.push({ request: t, reason: 'waited' });
        else keep.push(t);
      }
      this.#queued -= q.requests.length - keep.length;
      q.requests = keep;
    }
    return shed;
  }

  /** When a queue's hold for rows on its way ends; -Infinity when it is not held (see the header). */
  #heldUntil(q: ModelQueue<T>, model: T['instance']): number {
    if (q.expected === 0) return -Infinity;
    let rows = 0;
    for (const t of q.requests) rows += t.rows;
    if (rows >= q.policy.maxBatchRows) return -Infinity;
    return q.requests[0].enqueuedAtMs + Math.min(this.#options.costs.estimate(model, rows), MAX_HOLD_FOR_INPUTS_MS);
  }

  #pickQueue(): { queue: ModelQueue<T> | undefined; heldUntilMs: number } {
    let best: ModelQueue<T> | undefined;
    let bestModel = '';
    let bestKey = Infinity;
    let heldUntilMs = Infinity;
    const now = this.#options.now();
    const ready: [T['instance'], ModelQueue<T>][] = [];
    for (const [model, q] of this.#queues) {
      if (q.requests.length === 0) continue;
      const holdEnds = this.#heldUntil(q, model);
      if (holdEnds > now) {
        heldUntilMs = Math.min(heldUntilMs, holdEnds);
        continue;
      }
      ready.push([model, q]);
      const head = q.requests[0];
      const key = this.#options.discipline === 'fair' ? q.charged
        : this.#options.discipline === 'fifo' ? head.enqueuedAtMs
          : this.#urgency(head);
      if (!best || key < bestKey || (key === bestKey && q.lastPicked < best.lastPicked)) {
        best = q;
        bestModel = model;
        bestKey = key;
      }
    }
    return { queue: best && this.#residentDetour(best, bestModel, ready), heldUntilMs };
  }

  /**
   * fair, with the weight cache: `best` if its weights are on the device; else the least-charged
   * queue whose weights are, if its charge is within best's coming on (its last cold load and one
   * execution of its head, in charge units). No detour before best's first load has been seen.
   */
  #residentDetour(best: ModelQueue<T>, bestModel: T['instance'], ready: readonly [T['instance'], ModelQueue<T>][]): ModelQueue<T> {
    const resident = this.#options.resident;
    if (this.#options.discipline !== 'fair' || !resident || best.lastLoadMs === 0 || resident(bestModel)) return best;
    const limit = best.charged + (best.lastLoadMs + this.#options.costs.estimate(bestModel, best.requests[0].rows)) / best.policy.weight;
    let detour: ModelQueue<T> | undefined;
    for (const [model, q] of ready) {
      if (q !== best && q.charged <= limit && (!detour || q.charged < detour.charged) && resident(model)) detour = q;
    }
    return detour ?? best;
  }

  /** As many queued requests as fit the model's batch cap, in queue order; never splits one. */
  #coalesce(q: ModelQueue<T>): T[] {
    const batch = [q.requests[0]];
    let rows = q.requests[0].rows;
    let taken = 1;
    while (taken < q.requests.length && rows + q.requests[taken].rows <= q.policy.maxBatchRows) {
      rows += q.requests[taken].rows;
      batch.push(q.requests[taken++]);
    }
    q.requests.splice(0, taken);
    this.#queued -= taken;
    return batch;
  }
}
