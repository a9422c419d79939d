/**
 * Messages to one thread, sent together at the end of this event-loop turn: requests read in one
 * turn (many HTTP/2 streams in one socket read) or answered in one (every request of one
 * execution) cost the receiver one wake-up and one message. Order is kept. The receiver gets an
 * array of messages. (A device actor's handle and the edge threads' both use it.)
 */
import type { Transferable } from 'node:worker_threads';

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
