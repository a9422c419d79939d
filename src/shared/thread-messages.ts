/**
 * What one thread says to another and what it waits for: the messages of one event-loop turn sent
 * as one (`Outbox`), and the calls waiting for the other thread's answers, each settled once
 * (`PendingCalls`). A device actor's handle, an edge's doors to the devices and its calls to the
 * main thread, and a meta model's sub-calls use them.
 */
import type { Transferable } from 'node:worker_threads';
import { after, type LongTimer } from './timers.js';

/**
 * Messages to one thread, sent together at the end of this event-loop turn: requests read in one
 * turn (many HTTP/2 streams in one socket read) or answered in one (every request of one
 * execution) cost the receiver one wake-up and one message. Order is kept. The receiver gets an
 * array of messages. (A device actor's handle and the edge threads' both use it.)
 */
export class Outbox<M> {
  readonly #post: (messages: M[], transfer: Transferable[]) => void;
  #messages: M[] = [];
  #transfer: Transferable[] = [];

  /** `post` sends one batch (a worker's or a port's postMessage). */
  constructor(post: (messages: M[], transfer: Transferable[]) => void) {
    this.#post = post;
  }

  /** Forget what is queued (its receiver is gone). */
  clear(): void {
    this.#messages = [];
    this.#transfer = [];
  }

  /** Queue `msg`, its `transfer` buffers (or ports) moving with it; the batch goes at the end of this turn. */
  push(msg: M, transfer: readonly Transferable[] = []): void {
    if (this.#messages.length === 0) setImmediate(this.#flush);
    this.#messages.push(msg);
    for (const buffer of transfer) this.#transfer.push(buffer);
  }

  readonly #flush = (): void => {
    const messages = this.#messages;
    const transfer = this.#transfer;
    this.#messages = [];
    this.#transfer = [];
    if (messages.length) this.#post(messages, transfer);
  };
}

interface Waiting {
  resolve: (value: never) => void;
  reject: (err: Error) => void;
  timer: LongTimer;
}

/**
 * Calls waiting for another thread's answer, by id. Each settles exactly once: by its answer
 * (`resolve`, `reject`), by its timer (`wait`'s timeout), or failed with all the others (`failAll`:
 * the other thread went). A device actor's handle (actors/device/handle.ts), an edge thread's
 * doors to the devices (actors/device/door.ts) and its calls to the main thread
 * (actors/edge/worker.ts), and a meta model's sub-calls (actors/hooks/sub-calls.ts) keep theirs here.
 */
export class PendingCalls {
  readonly #calls = new Map<number, Waiting>();

  /** Calls not yet settled. */
  get size(): number {
    return this.#calls.size;
  }

  /**
   * Wait for call `id`'s answer. After `timeoutMs` it stops waiting: the call is dropped and
   * `onTimeout`'s error is its answer (`onTimeout` may also tell the other thread to drop it).
   * Any `timeoutMs` holds, however far ahead (a client's deadline of weeks; Infinity: never).
   */
  wait<T>(id: number, timeoutMs: number, onTimeout: () => Error): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const timer = after(timeoutMs, () => {
        this.#calls.delete(id);
        reject(onTimeout());
      });
      this.#calls.set(id, { resolve: resolve as (value: never) => void, reject, timer });
    });
  }

  #take(id: number): Waiting | undefined {
    const waiting = this.#calls.get(id);
    if (!waiting) return undefined;
    this.#calls.delete(id);
    waiting.timer.clear();
    return waiting;
  }

  /** Answer call `id`; false when it was settled already (timed out, cancelled). */
  resolve<T>(id: number, value: T): boolean {
    const waiting = this.#take(id);
    (waiting?.resolve as ((value: T) => void) | undefined)?.(value);
    return waiting !== undefined;
  }

  /** Fail call `id`; false when it was settled already. */
  reject(id: number, err: Error): boolean {
    const waiting = this.#take(id);
    waiting?.reject(err);
    return waiting !== undefined;
  }

  /** Fail every call waiting now with `err`. */
  failAll(err: Error): void {
    const all = [...this.#calls.values()];
    this.#calls.clear();
    for (const waiting of all) {
      waiting.timer.clear();
      waiting.reject(err);
    }
  }
}
