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
 *   next.
 * In every discipline a request past its deadline, or queued longer than
 * `dispatch_timeout_seconds`, is shed and never runs; and at dispatch, a
 * request of the batch whose remaining time is below the batch's learned cost
 * (and its model's weights' coming on, when they are off the device) is shed
 * instead of run late (laxity).
 *
 * Priorities (Triton's `priority`, levels 1..`priorityLevels`, 1 the highest; 0 or none: the
 * model's default level): waiting work of a higher level goes first, within a model (its queue is
 * kept in level order, the discipline's order within a level) and across models (the queues whose
 * head has the highest level waiting compete by the discipline, the others wait). A batch starts
 * with its model's highest level and fills spare rows with the next ones of the same model. Lower
 * levels are not starved: while their share of recent device time (a moving sum, half-life
 * LEVEL_SHARE_HALFLIFE_MS) is below `lowerPriorityShare`, the highest of them gets the pick.
 * A running batch is not preempted, so a lower level's batch is kept short enough for the higher
 * levels' deadlines (Clockwork's point: a request that arrives as a long batch starts waits all of
 * it): while a higher level has had requests with deadlines lately, a batch of a lower level takes
 * only as many rows as run, by the learned cost, within half the tightest slack seen there (a
 * request's time to its deadline on arrival, less its own run): the `guard`, shared/backlog.ts,
 * noted also by the threads that admit requests. A batch of at least one request always runs;
 * where a model's run grows with its rows (most vision models on a CPU) the lower level loses
 * little throughput, where it does not (a large MLP) it loses more, and the higher level's
 * deadlines are what the levels are for.
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
import { PROBE_AFTER_MS, type CostModel, type DeadlineGuard } from '../../shared/backlog.js';

export type { Discipline };

export interface QueuePolicy {
  /** Share of device time under `fair` (the seeds' scheduler.models.<name>.weight). */
  weight: number;
  /** Level of its requests that name none (scheduler.models.<name>.priority); absent: the scheduler's default. */
  priority?: number;
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
  /** Its priority level, 1 the highest; 0 or absent: its model's default. */
  readonly priority?: number;
}

export type ShedReason = 'deadline' | 'waited' | 'laxity';

export interface Pick<T extends Queued> {
  /** Requests of one model to run as one execution, in order; empty when nothing is queued or every queue is held. */
  batch: T[];
  /** Requests dropped instead of run, with why. */
  shed: { request: T; reason: ShedReason }[];
  /**
   * When `batch` is empty because queues are held for rows on their way: when the first hold ends (the clock of `now`).
   */
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
  /** Priority levels (scheduler.priority_levels); absent: one, every request alike. */
  priorityLevels?: number;
  /** Level of a request that names none, for a model whose policy names none (scheduler.default_priority). */
  defaultPriority?: number;
  /**
   * Least share of recent device time the levels below the highest waiting one get while they wait
   * (scheduler.lower_priority_share).
   */
  lowerPriorityShare?: number;
  /** The levels' deadline guards (the device's published backlog); absent: no lower level's batch is kept short. */
  guard?: DeadlineGuard;
}

/** Half-life of the device time counted per level, for the lower levels' share. */
export const LEVEL_SHARE_HALFLIFE_MS = 5000;

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
  /** Since when every batch picked of it has been refused whole for laxity (0: the last one ran). */
  laxSinceMs: number;
}

export class Scheduler<T extends Queued> {
  readonly #options: SchedulerOptions<T['instance']>;
  /** Per loaded instance (a model version), under the requests' own key type. */
  readonly #queues = new Map<T['instance'], ModelQueue<T>>();
  /** The charge level of the last model picked: where an idle model re-enters (fair). */
  #virtualMs = 0;
  #picks = 0;
  #queued = 0;
  /**
   * Rows refused because their model's queue was full, per model (counters: a node's rate of a
   * model counts them, load-windows.ts), until the model leaves: a load again is another instance.
   */
  readonly #refusedRows = new Map<T['instance'], number>();
  /** Recent device time per priority level (decayed), and when it was last decayed. */
  readonly #levelMs = new Map<number, number>();
  #levelsAtMs = 0;
  /** The level of the batch last handed out: what its execution's time is counted to. */
  #runningLevel = 1;

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

  /** Rows of `model`'s refused so far because its queue was full (a counter). */
  refusedRowsFor(model: T['instance']): number {
    return this.#refusedRows.get(model) ?? 0;
  }

  policyOf(model: T['instance']): QueuePolicy | undefined {
    return this.#queues.get(model)?.policy;
  }

  /**
   * Register a model (or change its policy); its queue is kept (in level order again, if its default level changed).
   */
  setModel(model: T['instance'], policy: QueuePolicy): void {
    const q = this.#queues.get(model);
    if (q) {
      const relevel = q.policy.priority !== policy.priority;
      q.policy = policy;
      if (relevel) {
        const queued = q.requests;
        q.requests = [];
        for (const t of queued) this.#insert(q, t);
      }
    } else this.#queues.set(model, { policy, requests: [], charged: this.#virtualMs, lastPicked: -1, expected: 0, lastLoadMs: 0, laxSinceMs: 0 });
  }

  /** Forget a model; its queued requests are returned for the caller to fail. */
  removeModel(model: T['instance']): T[] {
    const q = this.#queues.get(model);
    this.#queues.delete(model);
    this.#refusedRows.delete(model);
    this.#options.costs.forget(model);
    this.#queued -= q?.requests.length ?? 0;
    return q?.requests ?? [];
  }

  /** Queue a request; RESOURCE_EXHAUSTED when the model's queue is full. */
  enqueue(request: T): void {
    const q = this.#queues.get(request.instance);
    if (!q) throw errors.modelNotReady(request.instance, 'UNAVAILABLE', 'not loaded on this device');
    if (q.requests.length >= this.#options.maxQueueDepth) {
      this.#refusedRows.set(request.instance, (this.#refusedRows.get(request.instance) ?? 0) + request.rows);
      throw errors.queueFull(request.instance, this.#options.maxQueueDepth);
    }
    const levels = this.#options.priorityLevels ?? 1;
    if (request.priority !== undefined && request.priority > levels) {
      throw errors.invalidRequest(`priority ${request.priority} is above this server's ${levels} priority level${levels === 1 ? '' : 's'} (scheduler.priority_levels): give 1 (the highest) to ${levels}, or 0 for the model's default`);
    }
    if (q.requests.length === 0) q.charged = Math.max(q.charged, this.#virtualMs);
    this.#insert(q, request);
    this.#queued++;
    const guard = this.#options.guard;
    if (guard && Number.isFinite(request.deadlineMs)) {
      const now = this.#options.now();
      guard.noteSlack(this.#level(q, request), request.deadlineMs - now - this.#options.costs.estimate(request.instance, request.rows), now);
    }
  }

  /** A request's level: its own, else its model's default, else the scheduler's. */
  #level(q: ModelQueue<T>, t: T): number {
    return t.priority || q.policy.priority || this.#options.defaultPriority || 1;
  }

  /**
   * Into its queue in level order; within a level, deadline order (edf; equal deadlines in arrival order) or arrival
   * order.
   */
  #insert(q: ModelQueue<T>, request: T): void {
    const level = this.#level(q, request);
    const edf = this.#options.discipline === 'edf';
    const key = edf ? this.#urgency(request) : 0;
    let at = q.requests.length;
    while (at > 0) {
      const before = q.requests[at - 1];
      const l = this.#level(q, before);
      if (l < level || (l === level && (!edf || this.#urgency(before) <= key))) break;
      at--;
    }
    // At the end, as most are (one level, arrival order): a push, not a splice (~550 instructions a request less).
    if (at === q.requests.length) q.requests.push(request);
    else q.requests.splice(at, 0, request);
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
      const { queue: q, model, heldUntilMs } = this.#pickQueue();
      if (!q) return heldUntilMs === Infinity ? { batch: [], shed } : { batch: [], shed, heldUntilMs };
      const level = this.#level(q, q.requests[0]);
      const batch = this.#coalesce(q, model, this.#options.guard?.runCapMs(level, this.#options.now()) ?? Infinity);
      // In every discipline, a request of the batch that cannot finish by its deadline (the batch's
      // learned cost, and its weights' coming on if they are off the device) is refused now instead
      // of run late, taking device time from requests that can still make theirs.
      const rows = batch.reduce((sum, t) => sum + t.rows, 0);
      const now = this.#options.now();
      // The learned cost that refuses them is learned only from runs: one too high (a slow run
      // after an idle spell) would refuse every request of the model for good. After PROBE_AFTER_MS
      // of refusing every batch of it whole, the first of the next runs anyway (answered late at
      // worst, once a second), and the cost is measured again.
      const probe = q.laxSinceMs > 0 && now - q.laxSinceMs >= PROBE_AFTER_MS ? batch[0] : null;
      const runs = batch.filter((t) => {
        const late = t !== probe && this.#late(t, q, model, rows);
        if (late) shed.push({ request: t, reason: 'laxity' });
        return !late;
      });
      if (runs.length === 0) {
        if (q.laxSinceMs === 0) q.laxSinceMs = now;
        continue;
      }
      q.laxSinceMs = 0;
      q.lastPicked = this.#picks++;
      this.#virtualMs = Math.max(this.#virtualMs, q.charged);
      this.#runningLevel = level;
      return { batch: runs, shed };
    }
  }

  /** Whether `t` would miss its deadline in a batch of `rows` run now (laxity). */
  #late(t: T, q: ModelQueue<T>, model: T['instance'], rows: number): boolean {
    if (!Number.isFinite(t.deadlineMs)) return false;
    const coming = this.#options.resident && !this.#options.resident(model) ? q.lastLoadMs : 0;
    return t.deadlineMs - this.#options.now() < this.#options.costs.estimate(t.instance, rows) + coming;
  }

  /**
   * The models with queued requests, in the order the discipline would pick them if nothing
   * changed (fair: least charged; fifo: oldest head; edf: most urgent head), holds and the resident
   * detour aside: what the device uploads weights ahead for (uploads-ahead.ts).
   */
  upcoming(): T['instance'][] {
    const waiting: [T['instance'], number, number, number][] = [];
    for (const [model, q] of this.#queues) {
      if (q.requests.length === 0) continue;
      const head = q.requests[0];
      waiting.push([model, this.#level(q, head), this.#key(q), q.lastPicked]);
    }
    // Higher levels first; ties as #pickQueue breaks them: the one picked longest ago.
    return waiting.sort((a, b) => a[1] - b[1] || a[2] - b[2] || a[3] - b[3]).map(([model]) => model);
  }

  /** After an execution: learn its cost and charge it to the model (fair) and to its level. */
  charge(model: T['instance'], executedRows: number, executedMs: number): void {
    this.#countLevel(this.#runningLevel, executedMs);
    const cost = this.#options.costs.record(model, executedRows, executedMs, this.#options.now());
    const q = this.#queues.get(model);
    if (q) q.charged += cost / q.policy.weight;
  }

  /** How long bringing `model` on took the last time (0: never measured here). */
  loadMsOf(model: T['instance']): number {
    return this.#queues.get(model)?.lastLoadMs ?? 0;
  }

  /** Charge device time that is not an execution (bringing the model's weights on) to the model (fair). */
  chargeTime(model: T['instance'], ms: number): void {
    const q = this.#queues.get(model);
    if (!q) return;
    q.charged += ms / q.policy.weight;
    q.lastLoadMs = ms;
  }

  /** Device time counted to `level`, every level's count decayed to now first. */
  #countLevel(level: number, ms: number): void {
    const now = this.#options.now();
    const keep = 0.5 ** (Math.max(0, now - this.#levelsAtMs) / LEVEL_SHARE_HALFLIFE_MS);
    for (const [l, v] of this.#levelMs) this.#levelMs.set(l, v * keep);
    this.#levelsAtMs = now;
    this.#levelMs.set(level, (this.#levelMs.get(level) ?? 0) + ms);
  }

  /**
   * Whether the levels below `top` are owed the next pick: their share of recent device time is under
   * lowerPriorityShare.
   */
  #lowerOwed(top: number): boolean {
    let lower = 0;
    let all = 0;
    for (const [l, v] of this.#levelMs) {
      all += v;
      if (l > top) lower += v;
    }
    return lower < (this.#options.lowerPriorityShare ?? 0) * all;
  }

  /**
   * The discipline's order among queues of one level: fair, the least charged; fifo, the oldest head; edf, the most
   * urgent head.
   */
  #key(q: ModelQueue<T>): number {
    const head = q.requests[0];
    return this.#options.discipline === 'fair' ? q.charged : this.#options.discipline === 'fifo' ? head.enqueuedAtMs : this.#urgency(head);
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
      // Most calls shed nothing: the queue is copied only when one of its requests goes.
      if (!q.requests.some((t) => this.#expired(t, now))) continue;
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

  #expired(t: T, now: number): boolean {
    return now > t.deadlineMs || now - t.enqueuedAtMs > this.#options.maxWaitMs;
  }

  /** When a queue's hold for rows on its way ends; -Infinity when it is not held (see the header). */
  #heldUntil(q: ModelQueue<T>, model: T['instance']): number {
    if (q.expected === 0) return -Infinity;
    let rows = 0;
    for (const t of q.requests) rows += t.rows;
    if (rows >= q.policy.maxBatchRows) return -Infinity;
    return q.requests[0].enqueuedAtMs + Math.min(this.#options.costs.estimate(model, rows), MAX_HOLD_FOR_INPUTS_MS);
  }

  #pickQueue(): { queue: ModelQueue<T> | undefined; model: T['instance']; heldUntilMs: number } {
    let heldUntilMs = Infinity;
    const now = this.#options.now();
    const ready: [T['instance'], ModelQueue<T>, number][] = [];
    for (const [model, q] of this.#queues) {
      if (q.requests.length === 0) continue;
      const holdEnds = this.#heldUntil(q, model);
      if (holdEnds > now) {
        heldUntilMs = Math.min(heldUntilMs, holdEnds);
        continue;
      }
      ready.push([model, q, this.#level(q, q.requests[0])]);
    }
    if (ready.length === 0) return { queue: undefined, model: '' as T['instance'], heldUntilMs };
    // One model waiting, as on a quiet device: no level or discipline to weigh.
    if (ready.length === 1) return { queue: ready[0][1], model: ready[0][0], heldUntilMs };
    // The level that picks: the highest waiting, unless the lower ones are owed their share.
    const top = Math.min(...ready.map(([, , l]) => l));
    const lower = ready.filter(([, , l]) => l > top);
    const level = lower.length > 0 && this.#lowerOwed(top) ? Math.min(...lower.map(([, , l]) => l)) : top;
    const eligible = ready.filter(([, , l]) => l === level);
    let best: ModelQueue<T> | undefined;
    let bestModel = '';
    let bestKey = Infinity;
    for (const [model, q] of eligible) {
      const key = this.#key(q);
      if (!best || key < bestKey || (key === bestKey && q.lastPicked < best.lastPicked)) {
        best = q;
        bestModel = model;
        bestKey = key;
      }
    }
    const [model, queue] = best ? this.#residentDetour(best, bestModel, eligible) : ['' as T['instance'], undefined];
    return { queue, model, heldUntilMs };
  }

  /**
   * fair, with the weight cache: `best` if its weights are on the device; else the least-charged
   * queue whose weights are, if its charge is within best's coming on (its last cold load and one
   * execution of its head, in charge units). No detour before best's first load has been seen.
   */
  #residentDetour(best: ModelQueue<T>, bestModel: T['instance'], ready: readonly [T['instance'], ModelQueue<T>, number][]): [T['instance'], ModelQueue<T>] {
    const resident = this.#options.resident;
    if (this.#options.discipline !== 'fair' || !resident || best.lastLoadMs === 0 || resident(bestModel)) return [bestModel, best];
    const limit = best.charged + (best.lastLoadMs + this.#options.costs.estimate(bestModel, best.requests[0].rows)) / best.policy.weight;
    let detour: [T['instance'], ModelQueue<T>] | undefined;
    for (const [model, q] of ready) {
      if (q !== best && q.charged <= limit && (!detour || q.charged < detour[1].charged) && resident(model)) detour = [model, q];
    }
    return detour ?? [bestModel, best];
  }

  /**
   * As many queued requests as fit the model's batch cap and, by its learned cost, run within
   * `capMs` (the higher levels' guard) and before the deadline of every request taken (a row more
   * that would make one of them late waits for the next batch instead), in queue order; never
   * splits one; the first always (the laxity check refuses it if it cannot make its deadline).
   */
  #coalesce(q: ModelQueue<T>, model: T['instance'], capMs: number): T[] {
    const first = q.requests[0];
    const batch = [first];
    let rows = first.rows;
    let taken = 1;
    const now = this.#options.now();
    let limitMs = Math.min(capMs, first.deadlineMs - now);
    const fits = (t: T) => {
      if (rows + t.rows > q.policy.maxBatchRows) return false;
      const within = Math.min(limitMs, t.deadlineMs - now);
      return within === Infinity || this.#options.costs.estimate(model, rows + t.rows) <= within;
    };
    while (taken < q.requests.length && fits(q.requests[taken])) {
      const t = q.requests[taken++];
      rows += t.rows;
      limitMs = Math.min(limitMs, t.deadlineMs - now);
      batch.push(t);
    }
    q.requests.splice(0, taken);
    this.#queued -= taken;
    return batch;
  }
}
