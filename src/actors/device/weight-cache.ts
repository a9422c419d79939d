/**
 * The on-demand weight cache of one device: which models' weights are on the
 * device, which must come on before a run, and which leave to make room.
 *
 * Two tiers, both keyed by tensor content (a SHA-256 of datatype, dims and
 * bytes), so a tensor that several models hold is stored once in each tier:
 * - host: one copy in host RAM per distinct tensor of every loaded model with
 *   residency `system` or `device` (a SharedArrayBuffer the main thread's
 *   HostWeights shares with the other devices); `unpinned` models keep nothing
 *   there and re-read their tensors from the compile cache each time they come on;
 * - device: blocks of the device's arena (arena.ts), counted by the resident
 *   models that use them; a block is freed with its last user.
 *
 * Making a model resident claims the tensors it shares with resident models,
 * evicts least-recently-used models (never `device` ones, never itself) until
 * the rest fits, compacts if the room is there but in pieces, and copies the
 * missing tensors in: one host-to-device copy, no disk and no recompilation
 * for `system` models. The budget is the arena's capacity, so it cannot be
 * exceeded. Single-threaded by construction: only the device actor calls it,
 * between executions.
 */
import { errors } from '../../shared/errors.js';
import type { Residency, WeightLoad } from '../../shared/channels/device.js';
import type { DeviceSlice } from '../../native/ort.js';
import { alignUp, type Arena, type Block } from './arena.js';

/** One distinct tensor of a model, and the compile cache file holding its bytes. */
export interface TensorSource {
  key: string;
  byteLength: number;
  file: string;
}

/** Reads a tensor's bytes from the compile cache on disk. */
export type ReadTensor = (source: TensorSource, into: Uint8Array) => void;

/** Host memory for a tensor: `fresh` memory must be filled from disk; otherwise it holds the bytes already. */
export type HostBuffer = (source: TensorSource) => { bytes: Uint8Array; fresh: boolean };

interface HostTensor {
  bytes: Uint8Array;
  refs: number;
  /** Its registration with the GPU (backend cuda), released with it. */
  pin?: { release(): void };
}

interface DeviceTensor {
  block: Block;
  byteLength: number;
  refs: number;
}

interface CachedModel {
  name: string;
  residency: Residency;
  /** Distinct tensors by key. */
  tensors: Map<string, TensorSource>;
  /** Its share of the arena if it were alone: aligned bytes of its distinct tensors. */
  bytes: number;
  resident: boolean;
  /** When it was last made resident or run (a counter, not a clock): the LRU order. */
  lastUsed: number;
  /** Changes whenever its tensors may have moved (made resident, compaction): views made before are stale. */
  epoch: number;
}

/** What making a model resident cost (the channel's WeightLoad, by instance), and what only the device needs of it. */
export interface ResidencyOutcome<Id extends string = string> extends WeightLoad<Id> {
  /** Bytes moved by compaction during this load. */
  compactedBytes: number;
  /** Set when the models used within the thrash window need more than the budget. */
  thrash?: ThrashReport;
}

export interface ThrashReport {
  windowSeconds: number;
  models: number;
  bytes: number;
  budget: number;
}

export interface WeightCacheOptions {
  readTensor: ReadTensor;
  /** Compact the arena after every this many on-demand loads; 0 never. */
  compactionInterval: number;
  /** Window over which thrash is judged, ms. */
  thrashWindowMs: number;
  now?: () => number;
  /**
   * Register host weights for fast copies to the device (backend cuda: page-locked, so a cold load
   * copies at the bus's speed); released when the cache lets go of them.
   */
  pinHost?: (bytes: Uint8Array) => { release(): void } | undefined;
}

export class WeightCache<Id extends string = string> {
  readonly arena: Arena;
  #options: WeightCacheOptions;
  #now: () => number;
  #models = new Map<Id, CachedModel>();
  #host = new Map<string, HostTensor>();
  #device = new Map<string, DeviceTensor>();
  #clock = 0;
  #epochs = 0;
  #onDemandLoads = 0;
  /** When each model was last touched, for thrash detection. */
  #touched = new Map<Id, number>();
  #lastThrashWarning = -Infinity;

  constructor(arena: Arena, options: WeightCacheOptions) {
    this.arena = arena;
    this.#options = options;
    this.#now = options.now ?? (() => performance.now());
  }

  /** The budget in bytes: the arena's capacity. */
  get budget(): number {
    return this.arena.capacity;
  }

  /** Bytes on the device: distinct tensors, each counted once. */
  get residentBytes(): number {
    return this.arena.used;
  }

  /** Bytes the resident models would take without sharing: each model's tensors counted for it. */
  get logicalResidentBytes(): number {
    let sum = 0;
    for (const m of this.#models.values()) if (m.resident) sum += m.bytes;
    return sum;
  }

  get hostBytes(): number {
    let sum = 0;
    for (const t of this.#host.values()) sum += t.bytes.byteLength;
    return sum;
  }

  /** Register a loaded model version; a `device` one comes on now (and the call fails if it cannot fit). */
  add(instance: Id, name: string, residency: Residency, tensors: readonly TensorSource[], host?: HostBuffer): ResidencyOutcome<Id> | undefined {
    if (this.#models.has(instance)) this.remove(instance);
    const distinct = new Map(tensors.map((t) => [t.key, t]));
    const bytes = [...distinct.values()].reduce((sum, t) => sum + alignUp(t.byteLength), 0);
    const model: CachedModel = { name, residency: 'unpinned', tensors: distinct, bytes, resident: false, lastUsed: 0, epoch: 0 };
    this.#models.set(instance, model);
    try {
      return this.setResidency(instance, residency, host);
    } catch (err) {
      this.remove(instance);
      throw err;
    }
  }

  remove(instance: Id): void {
    const model = this.#models.get(instance);
    if (!model) return;
    if (model.resident) this.#evict(instance, model);
    if (model.residency !== 'unpinned') this.#releaseHost(model);
    this.#models.delete(instance);
    this.#touched.delete(instance);
  }

  has(instance: Id): boolean {
    return this.#models.has(instance);
  }

  isResident(instance: Id): boolean {
    return this.#models.get(instance)?.resident ?? false;
  }

  /** Changes whenever the instance's device views may have moved. */
  epoch(instance: Id): number {
    return this.#models.get(instance)?.epoch ?? -1;
  }

  /**
   * Change where a model's weights live at rest. `device` makes it resident now. Host copies it
   * needs come from `host` (the process's shared buffers), else fresh memory read from disk.
   */
  setResidency(instance: Id, residency: Residency, host?: HostBuffer): ResidencyOutcome<Id> | undefined {
    const model = this.#require(instance);
    const before = model.residency;
    if (before === 'unpinned' && residency !== 'unpinned') this.#acquireHost(model, host);
    if (before !== 'unpinned' && residency === 'unpinned') this.#releaseHost(model);
    model.residency = residency;
    if (residency !== 'device') return undefined;
    try {
      return this.ensureResident(instance);
    } catch (err) {
      // It cannot be pinned: it stays on demand, as it was.
      if (before === 'unpinned') this.#releaseHost(model);
      model.residency = before;
      throw err;
    }
  }

  /** The tensor keys the instance keeps in host RAM (none when unpinned). */
  hostKeys(instance: Id): string[] {
    const model = this.#models.get(instance);
    return model && model.residency !== 'unpinned' ? [...model.tensors.keys()] : [];
  }

  residencyOf(instance: Id): Residency | undefined {
    return this.#models.get(instance)?.residency;
  }

  /** Bring the model's weights onto the device if they are not there; mark it used. */
  ensureResident(instance: Id): ResidencyOutcome<Id> {
    const model = this.#require(instance);
    const now = this.#now();
    this.#touched.set(instance, now);
    model.lastUsed = ++this.#clock;
    if (model.resident) return { hit: true, loadedBytes: 0, diskBytes: 0, loadMs: 0, evicted: [], compactedBytes: 0 };

    const started = performance.now();
    if (model.bytes > this.arena.capacity) throw errors.weightsTooLarge(model.name, model.bytes, this.arena.capacity, 0);
    // Every claim this load makes, to undo if any step of it throws (a tensor that cannot be read,
    // a copy the device refuses): the cache is left as it was, but for the models it evicted.
    const claimed: string[] = [];
    const placed: string[] = [];
    let pending: Block | null = null;
    const evicted: Id[] = [];
    let compactedBytes = 0;
    let diskBytes = 0;
    let needed = 0;
    try {
      // Claim what is already there first, so no eviction below can free a tensor this model needs.
      const missing: TensorSource[] = [];
      for (const t of model.tensors.values()) {
        const onDevice = this.#device.get(t.key);
        if (onDevice) {
          onDevice.refs++;
          claimed.push(t.key);
        } else missing.push(t);
      }
      needed = missing.reduce((sum, t) => sum + alignUp(t.byteLength), 0);
      if (this.arena.free < needed) {
        const victims = [...this.#models].filter(([, m]) => m.resident && m.residency !== 'device' && m !== model).sort(([, a], [, b]) => a.lastUsed - b.lastUsed);
        for (const [victimInstance, victim] of victims) {
          if (this.arena.free >= needed) break;
          if (this.#freeable(victim) === 0) continue; // evicting it would free nothing
          this.#evict(victimInstance, victim);
          evicted.push(victimInstance);
        }
      }
      if (this.arena.free < needed) {
        const pinned = [...this.#models.values()].filter((m) => m.resident && m.residency === 'device').reduce((sum, m) => sum + m.bytes, 0);
        throw errors.weightsTooLarge(model.name, model.bytes, this.arena.capacity, pinned);
      }
      for (const t of missing) {
        pending = this.arena.alloc(t.byteLength);
        if (!pending) {
          compactedBytes += this.#compact();
          pending = this.arena.alloc(t.byteLength) as Block;
        }
        const host = this.#host.get(t.key);
        if (host) this.arena.write(pending, host.bytes);
        else {
          this.arena.fill(pending, t.byteLength, (into) => this.#options.readTensor(t, into));
          diskBytes += t.byteLength;
        }
        this.#device.set(t.key, { block: pending, byteLength: t.byteLength, refs: 1 });
        placed.push(t.key);
        pending = null;
      }
      this.arena.flush();
    } catch (err) {
      // Copies already issued may still read their sources (pinned host buffers the caller may
      // let go of next): wait for them before anything is given back.
      try {
        this.arena.flush();
      } catch {
        // The device failed: no copy of it is still running.
      }
      if (pending) this.arena.release(pending);
      for (const key of placed) this.#unref(key);
      for (const key of claimed) this.#unref(key);
      throw err;
    }
    model.resident = true;
    model.epoch = ++this.#epochs;
    this.#onDemandLoads++;
    const interval = this.#options.compactionInterval;
    if (interval > 0 && this.#onDemandLoads % interval === 0) compactedBytes += this.#compact();
    return {
      hit: false,
      loadedBytes: needed,
      diskBytes,
      loadMs: performance.now() - started,
      evicted,
      compactedBytes,
      thrash: this.#thrash(now),
    };
  }

  /** The device bytes of one tensor, backend cpu (valid until the next compaction or its eviction). */
  deviceView(key: string): Uint8Array {
    const data = this.deviceData(key);
    if (!(data instanceof Uint8Array)) throw errors.internal(`weight ${key.slice(0, 12)} is on ${this.arena.device}, not in host memory`);
    return data;
  }

  /** One tensor's data on the device, to bind (valid until the next compaction or its eviction). */
  deviceData(key: string): Uint8Array | DeviceSlice {
    const t = this.#device.get(key);
    if (!t) throw errors.internal(`weight ${key.slice(0, 12)} is not on the device`);
    return this.arena.data(t.block, t.byteLength);
  }

  /** Close the arena's holes now (CompactMemory); returns the bytes moved. */
  compact(): number {
    return this.#compact();
  }

  /** Aligned bytes of the instance's distinct weight tensors (what it takes on the device alone). */
  weightBytes(instance: Id): number {
    return this.#models.get(instance)?.bytes ?? 0;
  }

  #require(instance: Id): CachedModel {
    const model = this.#models.get(instance);
    if (!model) throw errors.internal(`weight cache: ${instance} is not registered`);
    return model;
  }

  #compact(): number {
    const moved = this.arena.compact();
    if (moved > 0) for (const m of this.#models.values()) if (m.resident) m.epoch = ++this.#epochs;
    return moved;
  }

  /** Bytes that evicting this model would really free: its tensors no other resident model uses. */
  #freeable(model: CachedModel): number {
    let sum = 0;
    for (const key of model.tensors.keys()) {
      const t = this.#device.get(key);
      if (t && t.refs === 1) sum += t.block.size;
    }
    return sum;
  }

  #evict(_instance: Id, model: CachedModel): void {
    for (const key of model.tensors.keys()) this.#unref(key);
    model.resident = false;
  }

  #unref(key: string): void {
    const t = this.#device.get(key);
    if (!t) return;
    if (--t.refs === 0) {
      this.arena.release(t.block);
      this.#device.delete(key);
    }
  }

  #acquireHost(model: CachedModel, hostBuffer?: HostBuffer): void {
    for (const t of model.tensors.values()) {
      const host = this.#host.get(t.key);
      if (host) {
        host.refs++;
        continue;
      }
      const { bytes, fresh } = hostBuffer?.(t) ?? { bytes: new Uint8Array(t.byteLength), fresh: true };
      if (fresh) this.#options.readTensor(t, bytes);
      this.#host.set(t.key, { bytes, refs: 1, pin: this.#options.pinHost?.(bytes) });
    }
  }

  #releaseHost(model: CachedModel): void {
    for (const key of model.tensors.keys()) {
      const host = this.#host.get(key);
      if (host && --host.refs === 0) {
        host.pin?.release();
        this.#host.delete(key);
      }
    }
  }

  /** Report thrash at most once per window: the models touched within it need more than the budget. */
  #thrash(now: number): ThrashReport | undefined {
    const windowMs = this.#options.thrashWindowMs;
    const keys = new Set<string>();
    let bytes = 0;
    let models = 0;
    for (const [instance, at] of this.#touched) {
      if (now - at > windowMs) {
        this.#touched.delete(instance);
        continue;
      }
      models++;
      for (const t of this.#models.get(instance)?.tensors.values() ?? []) {
        if (keys.has(t.key)) continue;
        keys.add(t.key);
        bytes += alignUp(t.byteLength);
      }
    }
    if (bytes <= this.arena.capacity || now - this.#lastThrashWarning < windowMs) return undefined;
    this.#lastThrashWarning = now;
    return { windowSeconds: windowMs / 1000, models, bytes, budget: this.arena.capacity };
  }
}
