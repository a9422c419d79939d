/**
 * Model leases that edge threads take without asking the main thread: the path on an
 * edge (actors/edge/edge-path.ts) runs a request itself, and the model's unload or
 * the end of its reload must still wait for it, as for a request the main thread's path holds
 * (node/model-registry.ts). One SharedArrayBuffer, updated with atomic operations:
 *
 * - a state word per slot: the tag of the loaded instance the slot stands for while it is open
 *   (the main thread gives each instance it routes a slot and a tag of its own), 0 when closed;
 * - a count per slot per edge thread (a row each), so that an edge that dies with leases held has
 *   them given back (`forget`) instead of holding an unload for ever.
 *
 * An edge takes a lease by adding to its count and then reading the state word; the main thread
 * closes a slot by clearing the word and then reading the counts. Atomics are sequentially
 * consistent, so at least one of the two sees the other: either the edge sees the slot closed
 * (and gives the lease back, going through the main thread instead), or the main thread sees the
 * count and waits for it. The tag makes a slot reused for another instance never pass for the old
 * one (an edge holding an old route sees a different tag).
 */

/**
 * Instances the edges can route at once; one loaded beyond it goes through the main thread. The
 * same class holds the edges' holds on shared-memory regions (node/shared-memory.ts), a slot per
 * region, tagged with the region's id.
 */
export const LEASE_SLOTS = 4096;

export class Leases {
  readonly #words: Int32Array;
  readonly #slots: number;
  readonly #rows: number;
  /** This thread's row (an edge thread's index); -1 on the main thread, which takes no leases here. */
  readonly #row: number;

  /** `memory`: made by `Leases.memory(rows)` on the main thread, shared with each edge thread. */
  constructor(memory: SharedArrayBuffer, row = -1) {
    this.#words = new Int32Array(memory);
    this.#slots = LEASE_SLOTS;
    this.#rows = this.#words.length / this.#slots - 1;
    this.#row = row;
  }

  /** The shared memory for `rows` edge threads. */
  static memory(rows: number): SharedArrayBuffer {
    return new SharedArrayBuffer((rows + 1) * LEASE_SLOTS * Int32Array.BYTES_PER_ELEMENT);
  }

  get buffer(): SharedArrayBuffer {
    return this.#words.buffer as SharedArrayBuffer;
  }

  #count(row: number, slot: number): number {
    return (row + 1) * this.#slots + slot;
  }

  /** An edge: take a lease on `slot` if it still stands for the instance tagged `tag`. */
  acquire(slot: number, tag: number): boolean {
    if (Atomics.load(this.#words, slot) !== tag) return false;
    const at = this.#count(this.#row, slot);
    Atomics.add(this.#words, at, 1);
    if (Atomics.load(this.#words, slot) === tag) return true;
    Atomics.sub(this.#words, at, 1); // closed meanwhile: the main thread may be waiting on the count
    return false;
  }

  /** An edge: give a lease on `slot` back. */
  release(slot: number): void {
    Atomics.sub(this.#words, this.#count(this.#row, slot), 1);
  }

  /** The main thread: `slot` stands for the instance tagged `tag` (not 0) from now on. */
  open(slot: number, tag: number): void {
    Atomics.store(this.#words, slot, tag);
  }

  /** Whether `slot` still stands for the instance (or region) tagged `tag`. */
  isOpen(slot: number, tag: number): boolean {
    return Atomics.load(this.#words, slot) === tag;
  }

  /** The main thread: no lease on `slot` is taken from now on (those held stay counted). */
  close(slot: number): void {
    Atomics.store(this.#words, slot, 0);
  }

  /** Leases held on `slot`, every edge together. */
  held(slot: number): number {
    let sum = 0;
    for (let row = 0; row < this.#rows; row++) sum += Atomics.load(this.#words, this.#count(row, slot));
    return sum;
  }

  /** Leases held on `slot` by this thread's row. */
  heldHere(slot: number): number {
    return Atomics.load(this.#words, this.#count(this.#row, slot));
  }

  /** An edge thread died: the leases it held are given back. */
  forget(row: number): void {
    for (let slot = 0; slot < this.#slots; slot++) Atomics.store(this.#words, this.#count(row, slot), 0);
  }
}
