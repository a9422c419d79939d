/**
 * Leases: who holds a loaded model instance (or a registered shared-memory region) right now, so
 * that its unload, the end of its reload, or the region's close waits for every request that
 * holds it. Every thread that runs the request path takes its leases here: each edge thread in a
 * row of its own, the main thread in the last row (the requests it runs itself: the only edge, or
 * what an edge sends it). One mechanism, in shared memory, updated with atomic operations:
 *
 * - a state word per slot: the tag of what the slot stands for while it is open (the main thread
 *   gives each instance a slot and a tag of its own; a region's tag is its id), 0 when closed;
 * - a count per slot per row, so that an edge that dies with leases held has them given back
 *   (`forget`) instead of holding an unload for ever.
 *
 * An edge takes a lease by adding to its count and then reading the state word; the main thread
 * closes a slot by clearing the word and then reading the counts. Atomics are sequentially
 * consistent, so at least one of the two sees the other: either the edge sees the slot closed
 * (and gives the lease back, going through the main thread instead), or the main thread sees the
 * count and waits for it. Either way a count given back on a closed slot may be the one the main
 * thread waits for: a release, and a count an acquire took back because the slot closed as it
 * added it, tell `lastOut` when they leave the slot's counts at 0 (the main thread's drain looks
 * again). Both check after their own decrement, so of two threads passing at once the later one
 * sees 0: neither a take-back nor a release that saw another's passing count stays silent.
 * The tag makes a slot reused for another instance never pass for the old one (an edge holding an
 * old route sees a different tag); tags are stored as 32-bit words (`word`), so a tag past 2^31
 * compares as the same word it was stored as. The main thread opens and closes slots itself, so
 * its own leases never race a close.
 *
 * Slots come in segments of SEGMENT_SLOTS, one SharedArrayBuffer each: the main thread adds one
 * when every slot is taken (`take`) and sends it to the edges (`adopt`) before anything names a
 * slot in it, so there is no limit on the instances or regions served.
 */

/** Slots per segment of shared memory. */
export const SEGMENT_SLOTS = 4096;

/**
 * A tag as its slot's 32-bit state word holds it: never 0 (a closed slot's word), whatever the tag
 * (a count of loads or registrations that has passed 2^31, or 2^32, stays a word of its own).
 */
export function word(tag: number): number {
  return ((tag % 0xffffffff) + 1) | 0;
}

/** The leases' shared memory as an edge receives it: the segments so far, and the rows of counts. */
export interface LeasesShape {
  segments: SharedArrayBuffer[];
  rows: number;
}

export class Leases {
  readonly #segments: Int32Array[] = [];
  readonly #rows: number;
  /** This thread's row: an edge's index; the main thread's is the last. */
  readonly #row: number;
  /** The main thread: slots free to take, and who hears of a new segment. */
  readonly #free: number[] = [];
  readonly #grown: ((segment: SharedArrayBuffer) => void) | null;
  readonly #lastOut: ((slot: number) => void) | null;

  /**
   * An edge thread's view of the main thread's leases (`shape`), in row `row`. `lastOut`: this
   * thread gave back what may be the last lease on a closed slot (the main thread's drain waits).
   */
  constructor(shape: LeasesShape, row: number, grown: ((segment: SharedArrayBuffer) => void) | null = null, lastOut: ((slot: number) => void) | null = null) {
    this.#rows = shape.rows;
    this.#row = row;
    this.#grown = grown;
    this.#lastOut = lastOut;
    for (const segment of shape.segments) this.adopt(segment);
  }

  /**
   * The main thread's leases for `edges` edge threads and itself; `grown` hears of each segment
   * added, to send it to the edges (it is not in their shape yet).
   */
  static create(edges: number, grown: ((segment: SharedArrayBuffer) => void) | null = null): Leases {
    return new Leases({ segments: [], rows: edges + 1 }, edges, grown);
  }

  /** What an edge starts with (segments added later come through `grown`). */
  get shape(): LeasesShape {
    return { segments: this.#segments.map((s) => s.buffer as SharedArrayBuffer), rows: this.#rows };
  }

  /** An edge: a segment the main thread added. */
  adopt(segment: SharedArrayBuffer): void {
    this.#segments.push(new Int32Array(segment));
  }

  /** The main thread: a closed slot to open, adding a segment when every slot is taken. */
  take(): number {
    if (this.#free.length === 0) {
      const base = this.#segments.length * SEGMENT_SLOTS;
      const segment = new SharedArrayBuffer((this.#rows + 1) * SEGMENT_SLOTS * Int32Array.BYTES_PER_ELEMENT);
      this.adopt(segment);
      this.#grown?.(segment);
      for (let i = SEGMENT_SLOTS - 1; i >= 0; i--) this.#free.push(base + i);
    }
    return this.#free.pop()!;
  }

  /** The main thread: `slot`, closed and drained, may stand for something else. */
  give(slot: number): void {
    this.#free.push(slot);
  }

  #segment(slot: number): Int32Array {
    return this.#segments[Math.floor(slot / SEGMENT_SLOTS)];
  }

  /** Where `row`'s count for `slot` is in its segment. */
  #count(row: number, slot: number): number {
    return (row + 1) * SEGMENT_SLOTS + (slot % SEGMENT_SLOTS);
  }

  /** Take a lease on `slot` if it still stands for what is tagged `tag`. */
  acquire(slot: number, tag: number): boolean {
    const words = this.#segment(slot);
    const state = slot % SEGMENT_SLOTS;
    const w = word(tag);
    if (!words || Atomics.load(words, state) !== w) return false;
    const at = this.#count(this.#row, slot);
    Atomics.add(words, at, 1);
    if (Atomics.load(words, state) === w) return true;
    // Closed meanwhile: the main thread may have read this count, and waits for it to go.
    Atomics.sub(words, at, 1);
    this.#tellIfLast(slot, tag);
    return false;
  }

  /** Give a lease on `slot` (tagged `tag`) back; the last on a closed slot tells `lastOut`. */
  release(slot: number, tag: number): void {
    Atomics.sub(this.#segment(slot), this.#count(this.#row, slot), 1);
    this.#tellIfLast(slot, tag);
  }

  #tellIfLast(slot: number, tag: number): void {
    if (this.#lastOut && !this.isOpen(slot, tag) && this.held(slot) === 0) this.#lastOut(slot);
  }

  /** The main thread: `slot` stands for what is tagged `tag` from now on. */
  open(slot: number, tag: number): void {
    Atomics.store(this.#segment(slot), slot % SEGMENT_SLOTS, word(tag));
  }

  /** Whether `slot` still stands for what is tagged `tag`. */
  isOpen(slot: number, tag: number): boolean {
    const words = this.#segment(slot);
    return words !== undefined && Atomics.load(words, slot % SEGMENT_SLOTS) === word(tag);
  }

  /** The main thread: no lease on `slot` is taken from now on (those held stay counted). */
  close(slot: number): void {
    Atomics.store(this.#segment(slot), slot % SEGMENT_SLOTS, 0);
  }

  /** Leases held on `slot`, every thread together. */
  held(slot: number): number {
    const words = this.#segment(slot);
    let sum = 0;
    for (let row = 0; row < this.#rows; row++) sum += Atomics.load(words, this.#count(row, slot));
    return sum;
  }

  /** Leases held on `slot` by this thread's row. */
  heldHere(slot: number): number {
    return Atomics.load(this.#segment(slot), this.#count(this.#row, slot));
  }

  /** An edge thread died: the leases it held are given back. */
  forget(row: number): void {
    // Atomic stores: other threads read these counts with Atomics.load meanwhile.
    for (const words of this.#segments) for (let at = (row + 1) * SEGMENT_SLOTS; at < (row + 2) * SEGMENT_SLOTS; at++) Atomics.store(words, at, 0);
  }
}
