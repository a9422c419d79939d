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
 *
 * The memory is host memory (backend cpu: a Uint8Array JavaScript reads and
 * writes) or one allocation on a GPU (backend cuda: device memory reached by
 * explicit copies, native/ort.ts DeviceMemory). Either way the owner writes
 * blocks with `write`/`fill` and binds `data(block)` as tensor data.
 */

/**
 * Block offsets and sizes are multiples of ARENA_ALIGNMENT: every typed-array view is aligned, and so are SIMD loads.
 */
import { ARENA_ALIGNMENT } from '../../shared/constants.js';
import type { DeviceMemory, DeviceSlice } from '../../native/ort.js';

export { ARENA_ALIGNMENT };

export interface Block {
  offset: number;
  readonly size: number;
}

interface Hole {
  offset: number;
  size: number;
}

/**
 * A group of uploads issued together (one model's missing tensors, `Arena.upload`), waited for
 * once: `wait()` answers how long its copies took (on a GPU, on the upload stream).
 */
export interface UploadMark {
  wait(): number;
}

export function alignUp(bytes: number): number {
  return Math.ceil(bytes / ARENA_ALIGNMENT) * ARENA_ALIGNMENT;
}

export class Arena {
  readonly capacity: number;
  /** Host memory (backend cpu), or null when the arena lives on a GPU. */
  readonly #host: Uint8Array | null;
  readonly #device: DeviceMemory | null;
  /** Free ranges, sorted by offset, never adjacent (freeing merges neighbours). */
  #holes: Hole[];
  #live = new Set<Block>();
  #used = 0;
  /** Milliseconds of host-memory uploads since the last mark. */
  #hostUploadMs = 0;

  /**
   * `preallocate` touches every page now, so the first loads do not pay the page faults. `device`:
   * the arena's memory is that allocation (its capacity at most the allocation's size).
   */
  constructor(capacity: number, options: { preallocate?: boolean; device?: DeviceMemory } = {}) {
    this.#device = options.device ?? null;
    const size = this.#device ? Math.min(capacity, this.#device.bytes) : capacity;
    this.capacity = Math.floor(size / ARENA_ALIGNMENT) * ARENA_ALIGNMENT;
    this.#host = this.#device ? null : new Uint8Array(this.capacity);
    if (this.#host && options.preallocate) for (let at = 0; at < this.capacity; at += 4096) this.#host[at] = 1;
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

  /** Where the arena lives: 'cpu', or the GPU's device name. */
  get device(): string {
    return this.#device?.device ?? 'cpu';
  }

  /** The whole arena's host memory (backend cpu only). */
  get bytes(): Uint8Array {
    if (!this.#host) throw new Error(`arena: its memory is on ${this.device}, which JavaScript cannot read`);
    return this.#host;
  }

  /** The bytes of a live block (backend cpu only). */
  view(block: Block): Uint8Array {
    return this.bytes.subarray(block.offset, block.offset + block.size);
  }

  /** A block's first `length` bytes as tensor data: a view of host memory, or a slice of the GPU allocation. */
  data(block: Block, length: number): Uint8Array | DeviceSlice {
    if (this.#device) return { memory: this.#device, offset: block.offset };
    return this.bytes.subarray(block.offset, block.offset + length);
  }

  /**
   * Copy `src` into the start of a block (on a GPU: one host-to-device copy, fastest from pinned
   * memory, only issued: `flush()` waits for every write; `src` must stay unchanged until then).
   */
  write(block: Block, src: Uint8Array): void {
    // copy: weights into the arena, host to GPU: the one copy a cold load pays
    if (this.#device) this.#device.copyFromHost(src, block.offset, false);
    else this.bytes.set(src, block.offset); // copy: weights into the arena: the one copy a cold load pays
  }

  /** Wait for the writes issued (one wait for a model's tensors, not one per tensor). */
  flush(): void {
    this.#device?.synchronize();
  }

  /**
   * Copy `src` into the start of a block beside execution (weight-cache.ts beginUpload): on a GPU
   * issued on the arena's upload stream, which the device's runs do not wait for; in host memory
   * copied now (the device thread copies while a run goes on one of libuv's threads). `src` must
   * stay unchanged until the group's mark (`markUpload`) has been waited for.
   */
  upload(block: Block, src: Uint8Array): void {
    if (this.#device) {
      // copy: weights into the arena beside execution (the cold load's one copy, moved earlier)
      this.#device.uploadFromHost(src, block.offset);
      return;
    }
    const started = performance.now();
    this.bytes.set(src, block.offset); // copy: (as above)
    this.#hostUploadMs += performance.now() - started;
  }

  /** Close the group of uploads issued since the last mark. */
  markUpload(): UploadMark {
    const device = this.#device;
    if (device) {
      const id = device.markUpload();
      return { wait: () => device.waitUpload(id) };
    }
    const ms = this.#hostUploadMs;
    this.#hostUploadMs = 0;
    return { wait: () => ms };
  }

  /** Fill a block's first `length` bytes with what `read` writes into the buffer it is given. */
  fill(block: Block, length: number, read: (into: Uint8Array) => void): void {
    if (!this.#device) {
      read(this.bytes.subarray(block.offset, block.offset + length));
      return;
    }
    // A GPU's memory is not addressable here: read into host memory, then copy it over.
    const staging = new Uint8Array(length);
    read(staging);
    // copy: an unpinned model's weights, read from disk into host memory, then onto the GPU
    this.#device.copyFromHost(staging, block.offset);
  }

  /** Slide every live block down to close the holes; returns the bytes moved. Views made before are stale. */
  compact(): number {
    let cursor = 0;
    let moved = 0;
    for (const block of [...this.#live].sort((a, b) => a.offset - b.offset)) {
      if (block.offset !== cursor) {
        // copy: compaction slides a live block down (counted in `moved`)
        if (this.#device) this.#device.moveWithin(cursor, block.offset, block.size);
        else this.bytes.copyWithin(cursor, block.offset, block.offset + block.size); // copy: (as above)
        moved += block.size;
        block.offset = cursor;
      }
      cursor += block.size;
    }
    this.#holes = cursor < this.capacity ? [{ offset: cursor, size: this.capacity - cursor }] : [];
    return moved;
  }
}
