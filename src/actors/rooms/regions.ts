/**
 * The shared-memory regions as a thread that holds requests takes those that name them (an edge
 * thread without asking the main thread, and the main thread): each registered region as the
 * main thread's registry tells it (node/shared-memory.ts `watch`), and a hold on it, counted in
 * shared memory in this thread's row, for every request that reads or writes it until that
 * request is answered, so that unregistering it (which closes its slot first) closes it only once
 * every thread's requests are done with it. The device actors map the region
 * themselves from its descriptor (actors/device/regions.ts), for every thread's requests alike.
 *
 * A hold is taken as a model lease is (shared/leases.ts): a region unregistered between the
 * request's check and its hold fails the request as one that names no region. The last hold
 * given back on an unregistered region tells the main thread's registry, which closes it.
 */
import type { EdgeRegion } from '../../shared/channels/edge.js';
import type { RegionSlice } from '../../shared/channels/inference.js';
import { errors } from '../../shared/errors.js';
import { Leases, type LeasesShape } from '../../shared/leases.js';
import type { PathRegions } from '../../shared/request-path.js';
import { holdRegions, sliceOf } from '../../shared/request-check.js';

export class Regions implements PathRegions {
  readonly #byName = new Map<string, EdgeRegion>();
  /** Regions by id, with their names, kept while this thread holds them (an unregistered one included). */
  readonly #byId = new Map<number, EdgeRegion & { name: string }>();
  readonly #holds: Leases;

  /** `row`: this thread's row in the holds. `idle`: the last hold on an unregistered region was given back. */
  constructor(holds: LeasesShape, row: number, idle: () => void) {
    // The last hold given back on an unregistered region tells the registry, a release's or an
    // acquire's that found the region unregistered as it took its hold.
    this.#holds = new Leases(holds, row, null, () => idle());
  }

  /** The main thread added a segment of hold slots. */
  adopt(segment: SharedArrayBuffer): void {
    this.#holds.adopt(segment);
  }

  /** Region `name` was registered, or (null) unregistered. */
  set(name: string, region: EdgeRegion | null): void {
    const before = this.#byName.get(name);
    if (before) {
      this.#byName.delete(name);
      if (this.#holds.heldHere(before.slot) === 0) this.#byId.delete(before.id); // else at its last release here
    }
    if (region) {
      this.#byName.set(name, region);
      this.#byId.set(region.id, { ...region, name });
    }
  }

  /**
   * Whether this thread knows region `name` (one an edge does not, registered a moment ago through another edge, is
   * the main thread's to find).
   */
  knows(name: string): boolean {
    return this.#byName.has(name);
  }

  /** Where a tensor lives, bounds-checked against its region, as the main thread's registry words it. */
  slice(what: string, name: string, offset: number, byteSize: number): RegionSlice {
    const region = this.#byName.get(name);
    if (!region) throw errors.sharedMemoryNotFound(name);
    return sliceOf(what, name, region, offset, byteSize);
  }

  /** Hold every slice's region until `release`; a region unregistered meanwhile fails it, holding nothing. */
  hold(slices: readonly RegionSlice[]): void {
    holdRegions(this.#holds, slices, (id) => this.#byId.get(id), (taken) => this.release(taken));
  }

  /** The request that held these slices is answered. */
  release(slices: readonly RegionSlice[]): void {
    for (const s of slices) {
      const region = this.#byId.get(s.regionId);
      if (!region) continue;
      this.#holds.release(region.slot, region.id);
      // Unregistered: forgotten here with this thread's last hold (the last of all told the registry).
      if (!this.#holds.isOpen(region.slot, region.id) && this.#holds.heldHere(region.slot) === 0) this.#byId.delete(region.id);
    }
  }
}
