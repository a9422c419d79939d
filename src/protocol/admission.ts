/**
 * Load shedding at the gRPC edge, on what costs memory: the bytes of the inference requests in
 * flight (`endpoints.max_inflight_bytes`, default 1 GiB), and optionally their count
 * (`endpoints.max_concurrent_requests`, default 0: uncapped). A burst of a thousand small requests
 * from one client queues and is answered, as Triton's clients expect; a burst whose tensors would
 * hold more memory than the cap is refused RESOURCE_EXHAUSTED at once, naming the bytes. A request
 * alone is always admitted (the message limits bound its size), so a cap below the largest
 * message never refuses everything. Per model, the device's queue depth bounds waiting requests
 * (scheduler.max_queue_depth). Health and metadata RPCs are never shed, so probes keep working.
 */
import { errors } from '../shared/errors.js';

export class Admission {
  readonly #cap: number;
  readonly #maxBytes: number;
  readonly #onShed: () => void;
  #inflight = 0;
  #bytes = 0;

  /** `cap` and `maxBytes` 0 mean uncapped. */
  constructor(cap: number, maxBytes: number, onShed: () => void = () => undefined) {
    this.#cap = cap;
    this.#maxBytes = maxBytes;
    this.#onShed = onShed;
  }

  get inflight(): number {
    return this.#inflight;
  }

  /** Bytes of the requests in flight (their tensors' bytes as received). */
  get inflightBytes(): number {
    return this.#bytes;
  }

  /** Take a place for a request of `bytes` or throw STOWAGE_SERVER_BUSY; every enter() needs one leave() with the same bytes. */
  enter(bytes = 0): void {
    if (this.#cap > 0 && this.#inflight >= this.#cap) {
      this.#onShed();
      throw errors.serverBusy(this.#cap);
    }
    if (this.#maxBytes > 0 && this.#inflight > 0 && this.#bytes + bytes > this.#maxBytes) {
      this.#onShed();
      throw errors.serverBusyBytes(this.#maxBytes, this.#bytes, bytes);
    }
    this.#inflight++;
    this.#bytes += bytes;
  }

  /**
   * A request already admitted brings `bytes` more (a REST body arriving in chunks, counted as it
   * comes rather than after it is whole); throws STOWAGE_SERVER_BUSY, leaving the count as it
   * was, when that takes the bytes in flight past the cap and other requests are in flight. Its
   * leave() gives back every byte it was admitted and grew by.
   */
  grow(bytes: number): void {
    if (this.#maxBytes > 0 && this.#inflight > 1 && this.#bytes + bytes > this.#maxBytes) {
      this.#onShed();
      throw errors.serverBusyBytes(this.#maxBytes, this.#bytes, bytes);
    }
    this.#bytes += bytes;
  }

  leave(bytes = 0): void {
    this.#inflight--;
    this.#bytes -= bytes;
  }
}
