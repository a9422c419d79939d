/**
 * Registered shared-memory regions (Triton's extensions), on the main thread. A system region
 * names a byte range of a POSIX shared-memory object; requests then name a region, an offset in
 * it and a byte size instead of carrying tensor bytes. The main thread checks names and bounds
 * and holds each object open; the device actor maps it from that descriptor and reads inputs
 * straight from the mapping, so a tensor's bytes never pass through this thread.
 *
 * A CUDA region (backend cuda) is a client's GPU allocation, named by its CUDA IPC handle: the
 * device actors of its GPU open the handle when it is registered (a handle they cannot open is
 * refused then), and any other device actor opens it the first time a request brings it
 * (regions.ts). System and CUDA regions share one namespace, as in Triton; each kind's status and
 * unregister see only their own.
 *
 * Lifetime: a region's descriptor stays open while the region is registered or any request that
 * named it is still in flight (`hold` when the request is decoded, `release` when it is answered). Unregistering a
 * region in use is therefore safe: the requests finish on it, then it is closed.
 */
import { errors, quote } from '../shared/errors.js';
import { closeSharedMemory, openSharedMemory } from '../native/shm.js';
import type { RegionSlice } from '../shared/channels/inference.js';

export type { RegionSlice };

export type RegionKind = 'system' | 'cuda';

export interface Region {
  /** Unique per registration: a name registered again is a new region. */
  readonly id: number;
  readonly kind: RegionKind;
  readonly name: string;
  /** System: the shared-memory object's key. CUDA: '' (the handle names the memory). */
  readonly key: string;
  /** CUDA: the GPU the memory is on and its IPC handle. */
  readonly cuda?: { gpu: number; handle: Uint8Array };
  /** Where the region starts in the shared-memory object, and its size. */
  readonly offset: number;
  readonly byteSize: number;
}

interface OpenRegion extends Region {
  /** System: the object's descriptor, held open; CUDA: -1. */
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
    this.#checkNew(name, offset, byteSize);
    const { fd, size } = openSharedMemory(key);
    if (offset + byteSize > size) {
      closeSharedMemory(fd);
      throw errors.sharedMemoryInvalid(`region ${quote(name)}: key ${quote(key)} holds ${size} bytes, fewer than offset ${offset} + byte_size ${byteSize}`);
    }
    return this.#add({ id: this.#nextId++, kind: 'system', name, key, offset, byteSize, fd, holds: 0, registered: true });
  }

  /**
   * A CUDA region: `open` has the device actors of its GPU open the handle, given the whole region
   * as a slice (it rejects when they cannot: the registration is refused with why). The name is
   * taken while they do.
   */
  async registerCuda(name: string, gpu: number, handle: Uint8Array, byteSize: number, open: (whole: RegionSlice) => Promise<void>): Promise<Region> {
    this.#checkNew(name, 0, byteSize);
    // copy: the 64-byte handle, kept apart from the request message it came in
    const region: OpenRegion = { id: this.#nextId++, kind: 'cuda', name, key: '', cuda: { gpu, handle: Uint8Array.from(handle) }, offset: 0, byteSize, fd: -1, holds: 0, registered: true };
    this.#add(region);
    try {
      await open(this.slice('the region', name, 0, byteSize));
    } catch (err) {
      this.#regions.delete(name);
      region.registered = false;
      this.#closeIfIdle(region); // the devices that opened it drop their mapping
      throw err;
    }
    return region;
  }

  #checkNew(name: string, offset: number, byteSize: number): void {
    if (name === '') throw errors.sharedMemoryInvalid('a shared-memory region needs a name');
    if (name.startsWith('triton_')) throw errors.sharedMemoryInvalid(`region names starting with "triton_" are reserved, as in Triton: ${quote(name)}`);
    if (this.#regions.has(name)) throw errors.sharedMemoryExists(name);
    if (!Number.isSafeInteger(offset) || !Number.isSafeInteger(byteSize) || offset < 0 || byteSize <= 0) {
      throw errors.sharedMemoryInvalid(`region ${quote(name)}: offset ${offset} and byte_size ${byteSize} must be whole numbers, byte_size > 0`);
    }
  }

  #add(region: OpenRegion): OpenRegion {
    this.#regions.set(region.name, region);
    this.#byId.set(region.id, region);
    return region;
  }

  /** One region of `kind`, or every one of that kind for an empty name. */
  status(name: string, kind: RegionKind = 'system'): Region[] {
    if (name === '') return [...this.#regions.values()].filter((r) => r.kind === kind);
    const region = this.#regions.get(name);
    if (!region || region.kind !== kind) throw errors.sharedMemoryNotFound(name);
    return [region];
  }

  /** One region of `kind`, or every one of that kind for an empty name; an unknown name is not an error (Triton's rule). */
  unregister(name: string, kind: RegionKind = 'system'): void {
    const named = name === '' ? [...this.#regions.values()] : [this.#regions.get(name)].filter((r) => r !== undefined);
    const gone = named.filter((r) => r.kind === kind);
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
    // A CUDA region's key, for telling whether two slices overlap, is its registration's own.
    const common = { regionId: region.id, fd: region.fd, regionOffset: region.offset, regionByteSize: region.byteSize, offset, byteSize };
    return region.cuda ? { ...common, key: `cuda:${region.id}`, cuda: region.cuda } : { ...common, key: region.key };
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
    if (r.fd >= 0) closeSharedMemory(r.fd);
  }
}
