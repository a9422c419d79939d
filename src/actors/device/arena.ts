/**
 * The device's weight memory: one buffer allocated when the device starts,
 * carved into blocks by first fit. Allocating fresh memory for every load
 * costs several times the copy itself (page faults and zeroing: 2.4 GB/s
 * against 19 GB/s into memory already mapped, docs/weight-cache.md), so loads
 * copy into blocks of this arena and evictions hand blocks back.
 *
 * Blocks are handles: compaction slides live blocks down to close the holes
 * and updates each handle's offset, so owners must re-read `offset` (and
 * rebuild their views) after `compact()`.
 */

/** Block offsets and sizes are multiples of ARENA_ALIGNMENT: every typed-array view is aligned, and so are SIMD loads. */
import { ARENA_ALIGNMENT } from '../../shared/constants.js';

export { ARENA_ALIGNMENT };

export interface Block {
  offset: number;
  readonly size: number;
}

interface Hole {
  offset: number;
  size: number;
}

export function alignUp(bytes: number): number {
  return Math.ceil(bytes / ARENA_ALIGNMENT) * ARENA_ALIGNMENT;
}

export class Arena {
  readonly capacity: number;
  readonly bytes: Uint8Array;
  /** Free ranges, sorted by offset, never adjacent (freeing merges neighbours). */
  #holes: Hole[];
  #live = new Set<Block>();
  #used = 0;

  /** `preallocate` touches every page now, so the first loads do not pay the page faults. */
  constructor(capacity: number, options: { preallocate?: boolean } = {}) {
    this.capacity = Math.floor(capacity / ARENA_ALIGNMENT) * ARENA_ALIGNMENT;
    this.bytes = new Uint8Array(this.capacity);
    if (options.preallocate) for (let at = 0; at < this.capacity; at += 4096) this.bytes[at] = 1;
    this.#holes = this.capacity > 0 ? [{ offset: 0, size: this.capacity }] : [];
  }

  /** Bytes in live blocks (block sizes are aligned, so this is what the budget counts). */
  get used(): number {
    return this.#used;
  }

  get free(): number {
    return this.capacity - this.#used;
  }

  get largestHole(): number {
    return this.#holes.reduce((max, h) => Math.max(max, h.size), 0);
  }

  /** A block of at least `bytes`, or null when no hole is large enough (compacting may make one). */
  alloc(bytes: number): Block | null {
    const size = alignUp(Math.max(bytes, 1));
    const at = this.#holes.findIndex((h) => h.size >= size);
    if (at < 0) return null;
    const hole = this.#holes[at];
    const block: Block = { offset: hole.offset, size };
    hole.offset += size;
    hole.size -= size;
    if (hole.size === 0) this.#holes.splice(at, 1);
    this.#live.add(block);
    this.#used += size;
    return block;
  }

  release(block: Block): void {
    if (!this.#live.delete(block)) throw new Error(`arena: block at ${block.offset} is not live`);
    this.#used -= block.size;
    // Insert in offset order, then merge with the neighbours it touches.
    let at = this.#holes.findIndex((h) => h.offset > block.offset);
    if (at < 0) at = this.#holes.length;
    this.#holes.splice(at, 0, { offset: block.offset, size: block.size });
    const next = this.#holes[at + 1];
    if (next && block.offset + block.size === next.offset) {
      this.#holes[at].size += next.size;
      this.#holes.splice(at + 1, 1);
    }
    const prev = this.#holes[at - 1];
    if (prev && prev.offset + prev.size === block.offset) {
      prev.size += this.#holes[at].size;
      this.#holes.splice(at, 1);
    }
  }

  /** The bytes of a live block. */
  view(block: Block): Uint8Array {
    return this.bytes.subarray(block.offset, block.offset + block.size);
  }

  /** Slide every live block down to close the holes; returns the bytes moved. Views made before are stale. */
  compact(): number {
    let cursor = 0;
    let moved = 0;
    for (const block of [...this.#live].sort((a, b) => a.offset - b.offset)) {
      if (block.offset !== cursor) {
        this.bytes.copyWithin(cursor, block.offset, block.offset + block.size);
        moved += block.size;
        block.offset = cursor;
      }
      cursor += block.size;
    }
    this.#holes = cursor < this.capacity ? [{ offset: cursor, size: this.capacity - cursor }] : [];
    return moved;
  }
}
