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
 *
 * Edge threads take requests that name a region themselves (`shareHolds`): each region gets a slot
 * in the region holds (shared/leases.ts, tagged with its id), opened before the edges hear of it
 * and closed when it is unregistered, and an edge counts its requests' holds there. A closed
 * region is closed for good once no hold is left anywhere: here, or at an edge's last release
 * (which tells this thread, `edgesReleased`), or when an edge thread dies (its holds are forgotten).
 */
import { errors, quote } from '../shared/errors.js';
import { closeSharedMemory, openSharedMemory } from '../native/shm.js';
import type { RegionSlice } from '../shared/channels/inference.js';
import type { EdgeRegion } from '../shared/channels/edge.js';
import { LEASE_SLOTS, type Leases } from '../shared/leases.js';
import { sliceOf } from '../shared/request-check.js';

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
  /** Requests in flight that named the region, on this thread. */
  holds: number;
  registered: boolean;
  /** Its slot in the edges' region holds, once the edges know it. */
  slot?: number;
}

/** How the edges hear of regions: their holds, and each region as it comes and goes. */
interface EdgeSharing {
  holds: Leases;
  changed: (name: string, region: EdgeRegion | null) => void;
  free: number[];
}


export class SharedMemoryRegistry {
  readonly #regions = new Map<string, OpenRegion>();
  readonly #byId = new Map<number, OpenRegion>();
  readonly #onForget: (regionId: number) => void;
  #nextId = 1;
  #edges: EdgeSharing | null = null;

  /** `onForget` tells the device actors to drop their mapping of a region that is gone. */
  constructor(onForget: (regionId: number) => void) {
    this.#onForget = onForget;
  }

  /**
   * Let edge threads take requests that name regions (actors/edge/edge-regions.ts): `holds` are
   * theirs to count in, `changed` tells them of each region registered (its slot open) and
   * unregistered (its slot closed). A region registered beyond the slots is this thread's alone.
   */
  shareHolds(holds: Leases, changed: (name: string, region: EdgeRegion | null) => void): void {
    this.#edges = { holds, changed, free: Array.from({ length: LEASE_SLOTS }, (_, i) => LEASE_SLOTS - 1 - i) };
    for (const region of this.#regions.values()) this.#share(region);
  }

  /** Every region the edges may take requests for, as a new edge starts with them. */
  edgeRegions(): [string, EdgeRegion][] {
    return [...this.#regions.values()].filter((r) => r.slot !== undefined).map((r) => [r.name, edgeRegion(r)]);
  }

  /** Holds were given back at an edge (its last one on an unregistered region, or the edge died): close what nothing holds. */
  edgesReleased(): void {
    for (const region of [...this.#byId.values()]) this.#closeIfIdle(region);
  }

  /** The edges hear of a registered region: its slot opens, tagged with its id, before they do. */
  #share(region: OpenRegion): void {
    const edges = this.#edges;
    if (!edges || region.slot !== undefined || !region.registered) return;
    const slot = edges.free.pop();
    if (slot === undefined) return;
    region.slot = slot;
    edges.holds.open(slot, region.id);
    edges.changed(region.name, edgeRegion(region));
  }

  register(name: string, key: string, offset: number, byteSize: number): Region {
    this.#checkNew(name, offset, byteSize);
    const { fd, size } = openSharedMemory(key);
    if (offset + byteSize > size) {
      closeSharedMemory(fd);
      throw errors.sharedMemoryInvalid(`region ${quote(name)}: key ${quote(key)} holds ${size} bytes, fewer than offset ${offset} + byte_size ${byteSize}`);
    }
    const region = this.#add({ id: this.#nextId++, kind: 'system', name, key, offset, byteSize, fd, holds: 0, registered: true });
    this.#share(region);
    return region;
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
    this.#share(region); // once its GPU's devices have it open
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
      if (r.slot !== undefined && this.#edges) {
        this.#edges.holds.close(r.slot); // no edge takes a new hold on it
        this.#edges.changed(r.name, null);
      }
      this.#closeIfIdle(r);
    }
  }

  /** Where a tensor lives, bounds-checked against its region. */
  slice(what: string, regionName: string, offset: number, byteSize: number): RegionSlice {
    const region = this.#regions.get(regionName);
    if (!region) throw errors.sharedMemoryNotFound(regionName);
    return sliceOf(what, regionName, region, offset, byteSize);
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
    if (r.slot !== undefined && this.#edges) {
      if (this.#edges.holds.held(r.slot) > 0) return; // an edge's request still reads it: its last release tells
      this.#edges.free.push(r.slot);
      r.slot = undefined;
    }
    this.#byId.delete(r.id);
    this.#onForget(r.id);
    if (r.fd >= 0) closeSharedMemory(r.fd);
  }
}

/** A region as the edges take it. */
function edgeRegion(r: OpenRegion): EdgeRegion {
  return { id: r.id, slot: r.slot!, kind: r.kind, key: r.key, fd: r.fd, ...(r.cuda ? { cuda: r.cuda } : {}), offset: r.offset, byteSize: r.byteSize };
}
