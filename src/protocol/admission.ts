/**
 * Load shedding at the gRPC edge: at most `endpoints.max_concurrent_requests` inference RPCs
 * (ModelInfer calls and open ModelStreamInfer streams) in flight; past it a request is answered
 * RESOURCE_EXHAUSTED at once, before any of its bytes are decoded, so a burst cannot grow the
 * server's memory without bound. Health and metadata RPCs are never shed, so probes keep
 * working under load.
 */
import { errors } from '../shared/errors.js';

export class Admission {
  readonly #cap: number;
  readonly #onShed: () => void;
  #inflight = 0;

  /** `cap` 0 means uncapped. */
  constructor(cap: number, onShed: () => void = () => undefined) {
    this.#cap = cap;
    this.#onShed = onShed;
  }

  get inflight(): number {
    return this.#inflight;
  }

  /** Take a place or throw STOWAGE_SERVER_BUSY; every successful enter() needs one leave(). */
  enter(): void {
    if (this.#cap > 0 && this.#inflight >= this.#cap) {
      this.#onShed();
      throw errors.serverBusy(this.#cap);
    }
    this.#inflight++;
  }

  leave(): void {
    this.#inflight--;
  }
}
