/**
 * When each hook call began to run on its hook thread, in shared memory: hooks.timeout_seconds is a
 * hook's own running time, not the time its call waited for a thread. Timed from when the call was
 * handed to the pool, calls queued behind a busy or restarting thread were refused as hooks that
 * "ran longer" than the limit without having run at all, on a loaded machine four at once (CI beside
 * a benchmark, 2026-11-30), and a queued call's abort replaces no thread, as that message said.
 *
 * A slot per call in flight: the hook thread stores Date.now() in it as the call begins (0: still
 * queued); the caller's timer reads it. Past SLOTS calls in flight, a call gets no slot and is timed
 * from when it was handed over, as before.
 */
import type { HookStart } from '../../shared/channels/hooks.js';

const SLOTS = 1024;

export class HookStarts {
  readonly #buffer = new SharedArrayBuffer(8 * SLOTS);
  readonly #words = new BigInt64Array(this.#buffer);
  readonly #free = Array.from({ length: SLOTS }, (_, i) => SLOTS - 1 - i);

  /** A slot for one call, marked not started; undefined when every slot is taken. */
  take(): HookStart | undefined {
    const slot = this.#free.pop();
    if (slot === undefined) return undefined;
    Atomics.store(this.#words, slot, 0n);
    return { buffer: this.#buffer, slot };
  }

  /** When the call began to run (Date.now() on its thread), or 0 while it waits for a thread. */
  startedAt(start: HookStart): number {
    return Number(Atomics.load(this.#words, start.slot));
  }

  give(start: HookStart): void {
    this.#free.push(start.slot);
  }
}

/**
 * The hook thread's view of its pool's words, made at its first call: a thread serves one pool, so
 * every call brings the same memory (each message a new SharedArrayBuffer object over it).
 */
let words: BigInt64Array | undefined;

/** The hook thread: the call in `start` begins now. */
export function markStarted(start: HookStart | undefined): void {
  if (!start) return;
  words ??= new BigInt64Array(start.buffer);
  Atomics.store(words, start.slot, BigInt(Date.now()));
}
