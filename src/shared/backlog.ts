/**
 * A device's predicted backlog, published where every thread that holds requests reads it (issue
 * 65: deadlines kept or refused at once). The device thread alone writes it (actors/device/
 * backlog-ledger.ts): the predicted end of the batch it runs now, and the predicted milliseconds of
 * the work waiting at each priority level (what came through its doors and is not yet running).
 * A thread admitting a request reads how long the work at its level and above would keep it waiting
 * (`aheadMs`), adds the run its model takes, and refuses at once a request that would miss its
 * deadline (shared/deadline-admission.ts), before anything of it runs.
 *
 * Words of a SharedArrayBuffer (BigInt64, microseconds, atomic loads and stores, one writer): the
 * running batch's predicted end on nowMs's clock (0: idle), then one word per level, 1 the highest.
 */
import { nowMs } from './channels/inference.js';

const RUNNING_UNTIL = 0;
const LEVELS = 1;

export class Backlog {
  readonly #words: BigInt64Array;
  readonly #levels: number;

  /** `memory`: made by `Backlog.create` for `levels` priority levels. */
  constructor(memory: SharedArrayBuffer) {
    this.#words = new BigInt64Array(memory);
    this.#levels = this.#words.length - LEVELS;
  }

  /** The shared memory of a device's backlog for `levels` priority levels (scheduler.priority_levels). */
  static create(levels: number): SharedArrayBuffer {
    return new SharedArrayBuffer((LEVELS + Math.max(1, levels)) * BigInt64Array.BYTES_PER_ELEMENT);
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

  /** Level 1..levels as a word index; a level above the levels counts as the lowest. */
  #index(level: number): number {
    return Math.min(Math.max(1, level), this.#levels) - 1;
  }
}
