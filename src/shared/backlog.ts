/**
 * A device's predicted backlog, published where every thread that holds requests reads it (issue
 * 65: deadlines kept or refused at once). The device thread alone writes it (actors/device/
 * backlog-ledger.ts): the predicted end of the batch it runs now, and the predicted milliseconds of
 * the work waiting at each priority level (what came through its doors and is not yet running).
 * A thread admitting a request reads how long the work at its level and above would keep it waiting
 * (`aheadMs`), adds the run its model takes, and refuses at once a request that would miss its
 * deadline (shared/deadline-admission.ts), before anything of it runs.
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
import { nowMs } from './channels/inference.js';

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
