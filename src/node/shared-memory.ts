/**
 * Registered system shared-memory regions (Triton's extension), on the main thread. A region
 * names a byte range of a POSIX shared-memory object; requests then name a region, an offset in
 * it and a byte size instead of carrying tensor bytes. The main thread checks names and bounds
 * and holds each object open; the device actor maps it from that descriptor and reads inputs
 * straight from the mapping, so a tensor's bytes never pass through this thread.
 *
 * Lifetime: a region's descriptor stays open while the region is registered or any request that
 * named it is still in flight (`hold` when the request is decoded, `release` when it is answered). Unregistering a
 * region in use is therefore safe: the requests finish on it, then it is closed.
 */
import { errors, quote } from '../shared/errors.js';
import { closeSharedMemory, openSharedMemory } from '../native/shm.js';
import type { RegionSlice } from '../shared/channels/inference.js';

export type { RegionSlice };

export interface Region {
  /** Unique per registration: a name registered again is a new region. */
  readonly id: number;
  readonly name: string;
  readonly key: string;
  /** Where the region starts in the shared-memory object, and its size. */
  readonly offset: number;
  readonly byteSize: number;
}

interface OpenRegion extends Region {
  readonly fd: number;
  /** Requests in flight that named the region. */
  holds: number;
  registered: boolean;
}


export class SharedMemoryRegistry {
  readonly #regions = new Map<string, OpenRegion>();
  readonly #byId = new Map<number, OpenRegion>();
  readonly #onForget: (regionId: number) => void;
  #nextId = 1;

  /** `onForget` tells the device actors to drop their mapping of a region that is gone. */
  constructor(onForget: (regionId: number) => void) {
    this.#onForget = onForget;
  }

  register(name: string, key: string, offset: number, byteSize: number): Region {
    if (name === '') throw errors.sharedMemoryInvalid('a shared-memory region needs a name');
    if (name.startsWith('triton_')) throw errors.sharedMemoryInvalid(`region names starting with "triton_" are reserved, as in Triton: ${quote(name)}`);
    if (this.#regions.has(name)) throw errors.sharedMemoryExists(name);
    if (!Number.isSafeInteger(offset) || !Number.isSafeInteger(byteSize) || offset < 0 || byteSize <= 0) {
      throw errors.sharedMemoryInvalid(`region ${quote(name)}: offset ${offset} and byte_size ${byteSize} must be whole numbers, byte_size > 0`);
    }
    const { fd, size } = openSharedMemory(key);
    if (offset + byteSize > size) {
      closeSharedMemory(fd);
      throw errors.sharedMemoryInvalid(`region ${quote(name)}: key ${quote(key)} holds ${size} bytes, fewer than offset ${offset} + byte_size ${byteSize}`);
    }
    const region: OpenRegion = { id: this.#nextId++, name, key, offset, byteSize, fd, holds: 0, registered: true };
    this.#regions.set(name, region);
    this.#byId.set(region.id, region);
    return region;
  }

  /** One region, or every region for an empty name. */
  status(name: string): Region[] {
    if (name === '') return [...this.#regions.values()];
    const region = this.#regions.get(name);
    if (!region) throw errors.sharedMemoryNotFound(name);
    return [region];
  }

  /** One region, or every region for an empty name; an unknown name is not an error (Triton's rule). */
  unregister(name: string): void {
    const gone = name === '' ? [...this.#regions.values()] : [this.#regions.get(name)].filter((r) => r !== undefined);
    for (const r of gone) {
      this.#regions.delete(r.name);
      r.registered = false;
      this.#closeIfIdle(r);
    }
  }

  /** Where a tensor lives, bounds-checked against its region. */
  slice(what: string, regionName: string, offset: number, byteSize: number): RegionSlice {
    const region = this.#regions.get(regionName);
    if (!region) throw errors.sharedMemoryNotFound(regionName);
    if (offset < 0 || byteSize < 0 || offset + byteSize > region.byteSize) {
      throw errors.sharedMemoryInvalid(`${what}: offset ${offset} + byte_size ${byteSize} is outside region ${quote(regionName)} of ${region.byteSize} bytes`);
    }
    return { regionId: region.id, key: region.key, fd: region.fd, regionOffset: region.offset, regionByteSize: region.byteSize, offset, byteSize };
  }

  /** A request that named these slices is on its way: keep their regions open until `release`. */
  hold(slices: readonly RegionSlice[]): void {
    for (const s of slices) {
      const region = this.#byId.get(s.regionId);
      if (region) region.holds++;
    }
  }

  /** The request that held these slices is answered. */
  release(slices: readonly RegionSlice[]): void {
    for (const s of slices) this.#release(s.regionId);
  }

  #release(regionId: number): void {
    const region = this.#byId.get(regionId);
    if (!region) return;
    region.holds--;
    this.#closeIfIdle(region);
  }

  #closeIfIdle(r: OpenRegion): void {
    if (r.registered || r.holds > 0) return;
    this.#byId.delete(r.id);
    this.#onForget(r.id);
    closeSharedMemory(r.fd);
  }
}
