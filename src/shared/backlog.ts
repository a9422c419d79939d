/**
 * A device's predicted backlog, published where every thread that holds requests reads it (issue
 * 65: deadlines kept or refused at once). The device thread alone writes it (`BacklogLedger`,
 * below): the predicted end of the batch it runs now, and the predicted milliseconds of the work
 * waiting at each priority level (what came through its doors and is not yet running).
 * A thread admitting a request reads how long the work at its level and above would keep it waiting
 * (`aheadMs`), adds the run its model takes, and refuses at once a request that would miss its
 * deadline (`DeadlineAdmission`, below), before anything of it runs.
 *
 * It also carries each level's deadline guard: the tightest slack (time to the deadline on arrival,
 * less the request's own run) of that level's requests with deadlines lately, noted by every thread
 * that admits one, and by the device for those that reach it. The device keeps a lower level's
 * batches within half of it (actors/device/scheduler.ts): a batch is not preempted, and a request
 * that arrives as one starts waits all of it. Noted at admission too, so that a higher level whose
 * requests are all refused there (the lower level's long batches leaving no room) still shortens
 * those batches, instead of being refused for as long as the device never sees one of its requests.
 *
 * Words of a SharedArrayBuffer (BigInt64, microseconds, atomic loads and stores): the running
 * batch's predicted end on nowMs's clock (0: idle; the device writes it), then one word per level, 1
 * the highest (the device writes them), then per level the guard's slack and when it was noted (0:
 * never; any thread writes them, a lost race between two notes only delays the next one).
 */
import type { InferCommand } from './channels/device.js';
import type { ExecutionTiming } from './channels/inference.js';
import { errors, type StowageError } from './errors.js';
import type { ModelSpec } from './model-spec.js';
import { nowMs } from './timers.js';

const RUNNING_UNTIL = 0;
const LEVELS = 1;

/**
 * How long a level's guard keeps the batches of the levels below it short; the slack held is
 * replaced by the next one noted after half of this, so it follows a change.
 */
export const DEADLINE_GUARD_MS = 10_000;

/**
 * The share of the guard's slack a lower level's batch may run: the rest is room for the higher
 * level's own queue (requests that came during the batch run one after another, or in one batch).
 */
export const GUARD_SHARE = 0.5;

/** What the device's scheduler notes and reads of the levels' deadline guards. */
export type DeadlineGuard = Pick<Backlog, 'noteSlack' | 'runCapMs'>;

export class Backlog {
  readonly #words: BigInt64Array;
  readonly #levels: number;

  /** `memory`: made by `Backlog.create` for `levels` priority levels. */
  constructor(memory: SharedArrayBuffer) {
    this.#words = new BigInt64Array(memory);
    this.#levels = (this.#words.length - LEVELS) / 3;
  }

  /** The shared memory of a device's backlog for `levels` priority levels (scheduler.priority_levels). */
  static create(levels: number): SharedArrayBuffer {
    return new SharedArrayBuffer((LEVELS + 3 * Math.max(1, levels)) * BigInt64Array.BYTES_PER_ELEMENT);
  }

  get memory(): SharedArrayBuffer {
    return this.#words.buffer as SharedArrayBuffer;
  }

  /** The device's writer: the batch running now ends about `untilMs` (0: none runs). */
  running(untilMs: number): void {
    Atomics.store(this.#words, RUNNING_UNTIL, BigInt(Math.round(untilMs * 1000)));
  }

  /** The device's writer: `ms` more (or, negative, less) predicted work waiting at `level`. */
  add(level: number, ms: number): void {
    Atomics.add(this.#words, LEVELS + this.#index(level), BigInt(Math.round(ms * 1000)));
  }

  /** Forget everything (a new worker starts with nothing queued). */
  clear(): void {
    this.#words.fill(0n);
  }

  /**
   * Milliseconds a request of `level` would wait from `now` before its batch starts: what runs now,
   * and what waits at its level and above (a lower level waits behind it).
   */
  aheadMs(level: number, now = nowMs()): number {
    const words = this.#words;
    const until = Number(Atomics.load(words, RUNNING_UNTIL)) / 1000;
    let ahead = until > now ? until - now : 0;
    const last = this.#index(level);
    for (let i = 0; i <= last; i++) ahead += Math.max(0, Number(Atomics.load(words, LEVELS + i)) / 1000);
    return ahead;
  }

  /**
   * A request with a deadline at `level` had `slackMs` to spare (its time to the deadline less its
   * own run): the level's guard when it is the tightest lately. One that cannot make its deadline
   * anyway guards nothing (it is refused).
   */
  noteSlack(level: number, slackMs: number, now = nowMs()): void {
    if (!(slackMs > 0)) return;
    const words = this.#words;
    const at = this.#guardWord(this.#index(level));
    const heldMs = Number(Atomics.load(words, at)) / 1000;
    const notedMs = Number(Atomics.load(words, at + 1)) / 1000;
    if (notedMs === 0 || slackMs <= heldMs || now - notedMs > DEADLINE_GUARD_MS / 2) {
      Atomics.store(words, at, BigInt(Math.round(slackMs * 1000)));
      Atomics.store(words, at + 1, BigInt(Math.max(1, Math.round(now * 1000))));
    }
  }

  /**
   * The longest a batch of `level` may run: GUARD_SHARE of the tightest slack noted at the levels
   * above it in the last DEADLINE_GUARD_MS; Infinity when none has had deadlines.
   */
  runCapMs(level: number, now = nowMs()): number {
    const words = this.#words;
    let cap = Infinity;
    for (let i = 0; i < this.#index(level); i++) {
      const at = this.#guardWord(i);
      const notedMs = Number(Atomics.load(words, at + 1)) / 1000;
      if (notedMs > 0 && now - notedMs <= DEADLINE_GUARD_MS) cap = Math.min(cap, (Number(Atomics.load(words, at)) / 1000) * GUARD_SHARE);
    }
    return cap;
  }

  /** The first of level index `i`'s two guard words. */
  #guardWord(i: number): number {
    return LEVELS + this.#levels + 2 * i;
  }

  /** Level 1..levels as a word index; a level above the levels counts as the lowest. */
  #index(level: number): number {
    return Math.min(Math.max(1, level), this.#levels) - 1;
  }
}

/** Assumed cost of a model never run at any batch size, in ms: small, so new models get tried. */
export const UNKNOWN_COST_MS = 1;

interface Ema {
  ms: number;
  updatedAtMs: number;
}

/**
 * What executions cost, learned per model and batch size: by the device for its scheduler and
 * placement (actors/device/worker.ts), and by every thread that admits requests for its own
 * (`DeadlineAdmission`, below). An exponential moving average of measured execution time per
 * executed batch size, with a half-life in time (`ema_halflife_seconds`), so a model whose speed
 * changes (a new version, a busier machine) is re-learned at a known rate. Here beside the backlog
 * it predicts with, not in a file of its own: a request's walk is held to 25 files (docs/architecture.md).
 */
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

  /** Whether `model` has been measured at any batch size. */
  knows(model: string): boolean {
    return (this.#emas.get(model)?.size ?? 0) > 0;
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
 * A request's level and predicted share of a run, in ms; `first`: no other request of its model waits,
 * so a load its model needs first is its to carry.
 */
export type Estimate = (cmd: InferCommand, first: boolean) => { level: number; ms: number };

/**
 * The device's ledger: what it publishes of its backlog, kept as its requests come and go:
 * each request that comes through a door is entered at its priority level with its predicted share
 * of a run (its model's learned cost of a full batch, per row, times its rows), and leaves when its
 * batch starts, or it is shed, cancelled or failed; the batch that runs is published with its
 * predicted end. So a thread admitting a request reads, without asking the device, how long the work
 * ahead of it would keep it waiting. A model that must be brought on before it runs (its weights not
 * on the device, or its sessions closed) adds its last measured load to the backlog once, with the
 * first of its requests to wait, and takes it back when that one leaves.
 */
export class BacklogLedger {
  readonly #backlog: Backlog;
  readonly #estimate: Estimate;
  /** What each waiting request added, by the device's id: taken back when it leaves. */
  readonly #entries = new Map<number, { level: number; ms: number; instance: InferCommand['instance'] }>();
  /** Requests waiting, per model instance. */
  readonly #waiting = new Map<InferCommand['instance'], number>();

  constructor(backlog: Backlog, estimate: Estimate) {
    this.#backlog = backlog;
    this.#estimate = estimate;
    backlog.clear(); // a new worker: nothing of its predecessor's waits here
  }

  /** A request came: it waits until its batch starts. */
  queued(cmd: InferCommand): void {
    const waiting = this.#waiting.get(cmd.instance) ?? 0;
    const { level, ms } = this.#estimate(cmd, waiting === 0);
    this.#entries.set(cmd.id, { level, ms, instance: cmd.instance });
    this.#waiting.set(cmd.instance, waiting + 1);
    this.#backlog.add(level, ms);
  }

  /** Request `id` no longer waits (its batch started, or it was shed, cancelled or failed); nothing if not entered. */
  left(id: number): void {
    const entry = this.#entries.get(id);
    if (!entry) return;
    this.#entries.delete(id);
    const waiting = (this.#waiting.get(entry.instance) ?? 1) - 1;
    if (waiting > 0) this.#waiting.set(entry.instance, waiting);
    else this.#waiting.delete(entry.instance);
    this.#backlog.add(entry.level, -entry.ms);
  }

  /** A batch runs until about `untilMs`; 0: the device is idle again. */
  running(untilMs: number): void {
    this.#backlog.running(untilMs);
  }
}

/** What admission reads and notes of a device's published backlog. */
export type AdmissionBacklog = Pick<Backlog, 'aheadMs' | 'noteSlack'>;

/**
 * How long a model's requests are refused here, every one of them, before one is let through: the
 * estimate refusing them learns only from answers, so one too high (runs slowed for a while) would
 * refuse them for good. The device still checks the one let through at dispatch, against its own
 * fresh costs; its own check there probes after as long (actors/device/scheduler.ts), its learned
 * costs being learned only from runs too.
 */
export const PROBE_AFTER_MS = 1_000;

/** Priority levels as the scheduler resolves a request's: its own, else its model's, else the default. */
export interface Levels {
  defaultLevel: number;
  /** scheduler.models.<name>.priority, where set. */
  models: Readonly<Record<string, number>>;
}

/** What admission knows of a request: its priority (0: its model's level), deadline and rows. */
export interface Admitted {
  priority: number;
  /** On nowMs's clock; Infinity: none. */
  deadlineMs: number;
  rows: number;
}

/**
 * Deadlines kept or refused at once, at admission (issue 65 item 2), on the thread that holds the
 * request: a request with a deadline is refused DEADLINE_EXCEEDED before anything of it runs when
 * the work ahead of it on the device (the backlog above: the batch running now and what waits at its
 * priority level and above, as the device publishes it) and its own run would end past its deadline.
 * The device checks again at dispatch for every request of a batch (actors/device/scheduler.ts).
 *
 * Its own run is what this thread learned of its model at the request's rows, as the device learns
 * a batch's cost (`CostModel`, above: a moving average per executed batch size, the nearest size
 * scaled by rows where its own is not measured), from the executions its answers rode in (input,
 * infer and output time, less a weight load or a session open, which the backlog counts when they
 * come again). Not one average of every batch its answers rode in: the requests it would be
 * batched with wait at its level, and the backlog counts them already; under load that average was
 * a batch of several, and a 3x run here refused every interactive request at once, for good (the
 * estimate then learned nothing more, every request being refused). A model this thread has not
 * seen run yet is never refused here (the device's check at dispatch still holds). The work ahead is
 * read on the device its lease leads to (the rooms choose it before admission, by the devices'
 * routing policy).
 */
export class DeadlineAdmission {
  readonly #levels: Levels;
  readonly #costs: CostModel;
  /** Per model, since when every request of it has been refused here (absent: the last one was let through). */
  readonly #refusingSince = new Map<string, number>();

  /** `halflifeMs`: the learned runs' half-life (scheduler.ema_halflife_seconds, as the devices'). */
  constructor(levels: Levels, halflifeMs: number) {
    this.#levels = levels;
    this.#costs = new CostModel(halflifeMs);
  }

  /** An execution a request of `model` rode in: its time joins the model's runs at its batch size. */
  learn(model: string, timing: ExecutionTiming, now = nowMs()): void {
    const ms = (timing.computeInputNs + timing.computeInferNs + timing.computeOutputNs) / 1e6 - (timing.weightLoadMs ?? 0) - (timing.sessionOpenMs ?? 0);
    if (ms > 0) this.#costs.record(model, Math.max(timing.executedBatchSize, 1), ms, now);
  }

  /** The run of `rows` of `model` as learned here; undefined: never seen run. */
  runMs(model: string, rows: number): number | undefined {
    return this.#costs.knows(model) ? this.#costs.estimate(model, rows) : undefined;
  }

  /**
   * The refusal of `request` for `model` (priority 0: its model's level: the node file's, else its
   * manifest's, else the default), or null; `backlog` is that of the device its lease leads to (none
   * known: nothing waits ahead). Its slack is noted there as its level's deadline guard
   * (shared/backlog.ts) whether it is refused or not: the device keeps the lower levels' batches
   * short for it even while every request of its level is refused here. After PROBE_AFTER_MS of
   * refusing every request of the model, the next is let through.
   */
  refusal({ name: model, priority: manifestLevel }: Pick<ModelSpec, 'name' | 'priority'>, { priority, deadlineMs, rows }: Admitted, backlog: AdmissionBacklog | undefined, now = nowMs()): StowageError | null {
    if (!Number.isFinite(deadlineMs)) return null;
    const runMs = this.runMs(model, rows);
    if (runMs === undefined) return null;
    const level = priority || this.#levels.models[model] || manifestLevel || this.#levels.defaultLevel || 1;
    const leftMs = deadlineMs - now;
    backlog?.noteSlack(level, leftMs - runMs, now);
    const ahead = backlog?.aheadMs(level, now) ?? 0;
    if (ahead + runMs <= leftMs) {
      this.#refusingSince.delete(model);
      return null;
    }
    const since = this.#refusingSince.get(model);
    if (since === undefined) this.#refusingSince.set(model, now);
    else if (now - since >= PROBE_AFTER_MS) {
      this.#refusingSince.set(model, now); // the next probe a while after this one, unless one is let through meanwhile
      return null;
    }
    return errors.deadlineUnreachable(model, leftMs, ahead, runMs, level);
  }
}
