/**
 * The devices' state as ModelControlStatus answers it: a snapshot read again in the background
 * every `periodMs` while someone asks, so that an answer never waits for a device.
 *
 * Why: a device thread answers a status call between its runs and loads, so a status read through
 * it waits behind a burst of prefetches or a long batch; a pooled gateway that reads every node's
 * status each check (remote/remote-node.ts) must not take that wait for a sick node. With the
 * snapshot the answer is immediate and says how old it is; while the devices answer, that is at
 * most about `periodMs`.
 *
 * The background reads run only while callers keep asking (within `idleMs` of the last call): a
 * node behind no pooled gateway pays for none. The first call after a quiet spell has no recent
 * snapshot and waits for one; `fresh` waits for a read begun after the call.
 */

export interface SnapshotOptions {
  /** Between the end of one background read and the start of the next. */
  periodMs: number;
  /** Background reads stop this long after the last call. */
  idleMs: number;
}

export const DEFAULT_SNAPSHOT_OPTIONS: SnapshotOptions = { periodMs: 500, idleMs: 30_000 };

interface Read<T> {
  startedMs: number;
  done: Promise<T>;
}

export class StatusSnapshot<T> {
  readonly #read: () => Promise<T>;
  readonly #o: SnapshotOptions;
  #value: { value: T; atMs: number } | null = null;
  #reading: Read<T> | null = null;
  #timer: NodeJS.Timeout | null = null;
  #askedMs = 0;

  constructor(read: () => Promise<T>, options: SnapshotOptions = DEFAULT_SNAPSHOT_OPTIONS) {
    this.#read = read;
    this.#o = options;
  }

  /**
   * The latest snapshot and its age; `fresh`, one read after this call. Rejects only when a read it
   * waits for fails (no snapshot yet, or `fresh`).
   */
  async get(fresh = false): Promise<{ value: T; ageMs: number }> {
    const now = Date.now();
    this.#askedMs = now;
    // Background reads running (or one in flight): the snapshot is as recent as the devices allow.
    if (!fresh && this.#value && (this.#timer || this.#reading)) return { value: this.#value.value, ageMs: now - this.#value.atMs };
    let read = this.#reading ?? this.#start();
    if (read.startedMs < now) read = await read.done.then(() => this.#reading ?? this.#start(), () => this.#reading ?? this.#start());
    const value = await read.done;
    return { value, ageMs: Math.max(0, Date.now() - (this.#value?.atMs ?? Date.now())) };
  }

  #start(): Read<T> {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
    const startedMs = Date.now();
    const done = this.#read();
    const read: Read<T> = { startedMs, done };
    this.#reading = read;
    const settle = () => {
      if (this.#reading === read) this.#reading = null;
      this.#schedule();
    };
    done.then((value) => {
      if (!this.#value || this.#value.atMs <= startedMs) this.#value = { value, atMs: startedMs };
      settle();
    }, settle);
    return read;
  }

  /** The next background read, while callers keep asking. */
  #schedule(): void {
    if (this.#reading || this.#timer || Date.now() - this.#askedMs > this.#o.idleMs) return;
    this.#timer = setTimeout(() => {
      this.#timer = null;
      if (Date.now() - this.#askedMs <= this.#o.idleMs && !this.#reading) this.#start();
    }, this.#o.periodMs);
    this.#timer.unref();
  }
}
