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
 * named it is still in flight (held when the request is checked, given back when it is answered).
 * Unregistering a region in use is therefore safe: the requests finish on it, then it is closed.
 *
 * A request's hold is a lease (shared/leases.ts): each region gets a slot in the region holds,
 * tagged with its id, opened when it is registered and closed when it is unregistered, and every
 * thread that holds requests counts its requests' holds there, in its row, in its rooms
 * (actors/rooms/regions.ts), once told of the region (`watch`: this thread's rooms first, then the
 * edges'). An unregistered region is closed for good once no hold is left anywhere: at the last
 * release (which tells this registry, `released`), or when an edge thread dies (its holds are
 * forgotten).
 */
import { errors, quote } from '../shared/errors.js';
import { closeSharedMemory, openSharedMemory } from '../native/shm.js';
import type { RegionSlice } from '../shared/channels/inference.js';
import type { EdgeRegion } from '../shared/channels/edge.js';
import { Leases } from '../shared/leases.js';
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
  /** Its slot in the region holds, tagged with its id (open while registered). */
  readonly slot: number;
  registered: boolean;
  /** The rooms were told of it (a CUDA region once its GPU's devices have opened it). */
  told: boolean;
}


export class SharedMemoryRegistry {
  readonly #regions = new Map<string, OpenRegion>();
  readonly #byId = new Map<number, OpenRegion>();
  readonly #onForget: (regionId: number) => void;
  #nextId = 1;
  /** Where every thread's requests hold regions, this thread's row the last (Leases.create). */
  readonly #holds: Leases;
  /** Tells every thread's rooms of each region registered and unregistered; null until they are made. */
  #changed: ((name: string, region: EdgeRegion | null) => void) | null = null;

  /** `onForget` tells the device actors to drop their mapping of a region that is gone. */
  constructor(onForget: (regionId: number) => void, holds: Leases = Leases.create(0)) {
    this.#onForget = onForget;
    this.#holds = holds;
  }

  /**
   * Let the rooms take requests that name regions (actors/rooms/regions.ts): `changed` tells them of each region
   * registered (its slot open) and unregistered (its slot closed).
   */
  watch(changed: (name: string, region: EdgeRegion | null) => void): void {
    this.#changed = changed;
    for (const region of this.#regions.values()) this.#tell(region);
  }

  /** Every region the edges may take requests for, as a new edge starts with them. */
  edgeRegions(): [string, EdgeRegion][] {
    return [...this.#regions.values()].filter((r) => r.told).map((r) => [r.name, edgeRegion(r)]);
  }

  /**
   * Holds were given back (the last one on an unregistered region, or an edge died with holds): close what nothing
   * holds.
   */
  released(): void {
    for (const region of [...this.#byId.values()]) this.#closeIfIdle(region);
  }

  /** The rooms hear of a registered region (its slot is open already). */
  #tell(region: OpenRegion): void {
    if (!this.#changed || region.told || !region.registered) return;
    region.told = true;
    this.#changed(region.name, edgeRegion(region));
  }

  /** Whether requests may name region `name`: registered, and told to the threads that hold requests. */
  serves(name: string): boolean {
    const region = this.#regions.get(name);
    return region !== undefined && region.told;
  }

  register(name: string, key: string, offset: number, byteSize: number): Region {
    this.#checkNew(name, offset, byteSize);
    const { fd, size } = openSharedMemory(key);
    if (offset + byteSize > size) {
      closeSharedMemory(fd);
      throw errors.sharedMemoryInvalid(`region ${quote(name)}: key ${quote(key)} holds ${size} bytes, fewer than offset ${offset} + byte_size ${byteSize}`);
    }
    const region = this.#add({ id: this.#nextId++, kind: 'system', name, key, offset, byteSize, fd });
    this.#tell(region);
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
    const region = this.#add({ id: this.#nextId++, kind: 'cuda', name, key: '', cuda: { gpu, handle: Uint8Array.from(handle) }, offset: 0, byteSize, fd: -1 });
    try {
      await open(this.slice('the region', name, 0, byteSize));
    } catch (err) {
      this.#regions.delete(name);
      this.#unregistered(region); // the devices that opened it drop their mapping
      throw err;
    }
    this.#tell(region); // once its GPU's devices have it open
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

  /** A region registered: its slot in the holds opens under its id. */
  #add(region: Omit<OpenRegion, 'slot' | 'registered' | 'told'>): OpenRegion {
    const open: OpenRegion = { ...region, slot: this.#holds.take(), registered: true, told: false };
    this.#holds.open(open.slot, open.id);
    this.#regions.set(open.name, open);
    this.#byId.set(open.id, open);
    return open;
  }

  /** No new hold is taken on `r` (its slot closed, the edges told); it closes once none is left. */
  #unregistered(r: OpenRegion): void {
    r.registered = false;
    this.#holds.close(r.slot);
    if (r.told) this.#changed?.(r.name, null);
    this.#closeIfIdle(r);
  }

  /** One region of `kind`, or every one of that kind for an empty name. */
  status(name: string, kind: RegionKind = 'system'): Region[] {
    if (name === '') return [...this.#regions.values()].filter((r) => r.kind === kind);
    const region = this.#regions.get(name);
    if (!region || region.kind !== kind) throw errors.sharedMemoryNotFound(name);
    return [region];
  }

  /**
   * One region of `kind`, or every one of that kind for an empty name; an unknown name is not an error (Triton's rule).
   */
  unregister(name: string, kind: RegionKind = 'system'): void {
    const named = name === '' ? [...this.#regions.values()] : [this.#regions.get(name)].filter((r) => r !== undefined);
    const gone = named.filter((r) => r.kind === kind);
    for (const r of gone) {
      this.#regions.delete(r.name);
      this.#unregistered(r);
    }
  }

  /** Where a tensor lives, bounds-checked against its region. */
  slice(what: string, regionName: string, offset: number, byteSize: number): RegionSlice {
    const region = this.#regions.get(regionName);
    if (!region) throw errors.sharedMemoryNotFound(regionName);
    return sliceOf(what, regionName, region, offset, byteSize);
  }

  #closeIfIdle(r: OpenRegion): void {
    if (r.registered || this.#holds.held(r.slot) > 0) return; // a request still reads it: its last release tells
    if (!this.#byId.delete(r.id)) return; // closed already
    this.#holds.give(r.slot);
    this.#onForget(r.id);
    if (r.fd >= 0) closeSharedMemory(r.fd);
  }
}

/** A region as the edges take it. */
function edgeRegion(r: OpenRegion): EdgeRegion {
  return { id: r.id, slot: r.slot, kind: r.kind, key: r.key, fd: r.fd, ...(r.cuda ? { cuda: r.cuda } : {}), offset: r.offset, byteSize: r.byteSize };
}
