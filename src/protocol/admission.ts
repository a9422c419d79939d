/**
 * Load shedding at the edges, on what costs memory: the bytes of the inference requests in flight
 * (`endpoints.max_inflight_bytes`, default 1 GiB), and optionally their count
 * (`endpoints.max_concurrent_requests`, default 0: uncapped). A burst of a thousand small requests
 * from one client queues and is answered, as Triton's clients expect; a burst whose tensors would
 * hold more memory than the cap is refused RESOURCE_EXHAUSTED at once, naming the bytes. A request
 * alone is always admitted (the message limits bound its size), so a cap below the largest
 * message never refuses everything. Per model, the device's queue depth bounds waiting requests
 * (scheduler.max_queue_depth). Health and metadata RPCs are never shed, so probes keep working.
 *
 * One count for the whole process: the counters live in a SharedArrayBuffer that every edge
 * (the gRPC and REST edges of the main thread, or of each edge thread: actors/edge/) updates with
 * atomic operations, so the caps hold for all of them together. Two edges admitting at once may
 * both refuse where one of them alone would have passed; none ever admits past a cap. Each edge
 * also counts its own share in a slot of its own, so that when an edge thread dies with requests
 * in flight its share is given back (`forget`) instead of holding the caps for ever.
 */
import { Counter, Gauge, type Registry } from 'prom-client';
import { errors } from '../shared/errors.js';

/**
 * The counters in the shared memory: the process's, then each edge's own share (INFLIGHT and BYTES from EDGE_BASE + 2 ×
 * slot).
 */
const INFLIGHT = 0;
const BYTES = 1;
const SHED = 2;
const EDGE_BASE = 3;
/** Edges that may count: the main thread (slot 0) and up to 64 edge threads. */
export const ADMISSION_SLOTS = 65;

export class Admission {
  readonly #cap: number;
  readonly #maxBytes: number;
  readonly #counters: BigInt64Array;
  /** This edge's own share: its slot's INFLIGHT, and BYTES after it. */
  readonly #own: number;

  /**
   * `cap` and `maxBytes` 0 mean uncapped. `memory`: the counters another thread made
   * (`admission.memory`), to count with it; none: counters of its own. `slot`: the edge's own
   * share's slot (0: the main thread; edge thread k: k + 1).
   */
  constructor(cap: number, maxBytes: number, memory?: SharedArrayBuffer, slot = 0) {
    this.#cap = cap;
    this.#maxBytes = maxBytes;
    this.#counters = new BigInt64Array(memory ?? new SharedArrayBuffer((EDGE_BASE + 2 * ADMISSION_SLOTS) * BigInt64Array.BYTES_PER_ELEMENT));
    this.#own = EDGE_BASE + 2 * slot;
  }

  /** The shared counters, for another thread's Admission (the same caps) to count with. */
  get memory(): SharedArrayBuffer {
    return this.#counters.buffer as SharedArrayBuffer;
  }

  get inflight(): number {
    return Number(Atomics.load(this.#counters, INFLIGHT));
  }

  /** Bytes of the requests in flight (their tensors' bytes as received). */
  get inflightBytes(): number {
    return Number(Atomics.load(this.#counters, BYTES));
  }

  /** Requests refused so far, by every edge. */
  get shed(): number {
    return Number(Atomics.load(this.#counters, SHED));
  }

  #refuse(err: Error): never {
    Atomics.add(this.#counters, SHED, 1n);
    throw err;
  }

  /** Add `requests` and `bytes` to the process's counts and this edge's share. */
  #count(requests: bigint, bytes: bigint): void {
    const c = this.#counters;
    Atomics.add(c, INFLIGHT, requests);
    Atomics.add(c, BYTES, bytes);
    Atomics.add(c, this.#own, requests);
    Atomics.add(c, this.#own + 1, bytes);
  }

  /**
   * Take a place for a request of `bytes` or throw STOWAGE_SERVER_BUSY; every enter() needs one leave() with the same
   * bytes.
   */
  enter(bytes = 0): void {
    const c = this.#counters;
    const before = Number(Atomics.add(c, INFLIGHT, 1n));
    if (this.#cap > 0 && before >= this.#cap) {
      Atomics.sub(c, INFLIGHT, 1n);
      this.#refuse(errors.serverBusy(this.#cap));
    }
    // A request is alone, and passes whatever its size, when no bytes were held as it added its own:
    // judged from the bytes word itself. Judged from the requests word (`before`), a first request
    // whose bytes came after three others had been admitted beside it (each seeing the bytes before
    // its own) passed as alone too, taking the process past the cap (1,200 of 1,000 bytes, seen on
    // four threads).
    const held = Number(Atomics.add(c, BYTES, BigInt(bytes)));
    if (this.#maxBytes > 0 && held > 0 && held + bytes > this.#maxBytes) {
      Atomics.sub(c, BYTES, BigInt(bytes));
      Atomics.sub(c, INFLIGHT, 1n);
      this.#refuse(errors.serverBusyBytes(this.#maxBytes, held, bytes));
    }
    Atomics.add(c, this.#own, 1n);
    Atomics.add(c, this.#own + 1, BigInt(bytes));
  }

  /**
   * A request already admitted brings `bytes` more (a REST body arriving in chunks, counted as it
   * comes rather than after it is whole); throws STOWAGE_SERVER_BUSY, leaving the count as it
   * was, when that takes the bytes in flight past the cap and other requests are in flight. Its
   * leave() gives back every byte it was admitted and grew by.
   */
  grow(bytes: number): void {
    const c = this.#counters;
    const held = Number(Atomics.add(c, BYTES, BigInt(bytes)));
    if (this.#maxBytes > 0 && this.inflight > 1 && held + bytes > this.#maxBytes) {
      Atomics.sub(c, BYTES, BigInt(bytes));
      this.#refuse(errors.serverBusyBytes(this.#maxBytes, held, bytes));
    }
    Atomics.add(c, this.#own + 1, BigInt(bytes));
  }

  leave(bytes = 0): void {
    this.#count(-1n, -BigInt(bytes));
  }

  /**
   * Edge `slot` is gone (its thread died with requests in flight, whose leave() will never come):
   * give its share back to the process's counts.
   */
  forget(slot: number): void {
    const c = this.#counters;
    const at = EDGE_BASE + 2 * slot;
    const requests = Atomics.exchange(c, at, 0n);
    const bytes = Atomics.exchange(c, at + 1, 0n);
    Atomics.sub(c, INFLIGHT, requests);
    Atomics.sub(c, BYTES, bytes);
  }
}

/** The admission's metrics, registered once per process by whoever made its counters. */
export function admissionMetrics(admission: Admission, registry: Registry): void {
  let counted = 0;
  new Counter({
    name: 'stowage_grpc_shed_total', help: 'Inference requests refused because the requests in flight held endpoints.max_inflight_bytes (or numbered endpoints.max_concurrent_requests)', registers: [registry],
    collect() {
      const shed = admission.shed;
      this.inc(shed - counted);
      counted = shed;
    },
  });
  new Gauge({
    name: 'stowage_grpc_inflight_requests', help: 'Inference requests in flight (ModelInfer calls, open streams, REST inferences)', registers: [registry],
    collect() {
      this.set(admission.inflight);
    },
  });
  new Gauge({
    name: 'stowage_grpc_inflight_bytes', help: 'Bytes of tensors the inference requests in flight hold (what endpoints.max_inflight_bytes caps)', registers: [registry],
    collect() {
      this.set(admission.inflightBytes);
    },
  });
}
