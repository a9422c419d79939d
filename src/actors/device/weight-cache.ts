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
 *
 * Uploads beside execution (`beginUpload`, runtime.upload_beside_execution): a
 * model queued behind other work may have its missing tensors copied in while
 * the device runs another model's batch — on a GPU on the arena's upload
 * stream, in host memory by the device thread while a run goes on one of
 * libuv's threads. Such an upload evicts only least-recently-used models that
 * neither run nor wait ahead of it (the caller names those), never compacts
 * (blocks may not move under a run), and copies only from host RAM (not
 * `unpinned` models). Until its model's batch waits for it (`ensureResident`),
 * its blocks are the arena's but its model is not resident; anything that
 * could read or move a block still being written (another model's cold load,
 * compaction, removal) first waits for every upload in flight (`#settle`).
 * The load is reported at the model's next use, with the copy time that its
 * batch did not wait for (`hiddenMs`).
 */
import { errors } from '../../shared/errors.js';
import type { Residency, WeightLoad } from '../../shared/channels/device.js';
import type { DeviceSlice } from '../../native/ort.js';
import { alignUp, type Arena, type Block, type UploadMark } from './arena.js';

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
  /** Its missing tensors on their way beside execution (beginUpload); it is not resident until they land. */
  upload?: Upload<string>;
  /** Uploaded beside execution and landed before its batch waited for it: the load its next use reports. */
  landed?: { bytes: number; copyMs: number; evicted: string[] };
}

interface Upload<Id extends string> {
  mark: UploadMark;
  bytes: number;
  evicted: Id[];
  /** Keys of the tensors it placed (being written) and of those it claimed (there already), to undo if it fails. */
  placed: string[];
  claimed: string[];
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

/** What a load has claimed so far, to give back if it fails part way. */
interface LoadClaims {
  /** Tensors already on the device it took a reference on. */
  claimed: string[];
  /** Tensors it copied in. */
  placed: string[];
  /** The block being filled, not yet recorded. */
  pending: Block | null;
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
  /** Models whose uploads are in flight. */
  #uploading = new Set<Id>();

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
    if (model.upload) this.#settle();
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

  /** Whether the instance's weights are on their way beside execution (beginUpload). */
  isUploading(instance: Id): boolean {
    return this.#models.get(instance)?.upload !== undefined;
  }

  /** Uploads beside execution in flight. */
  get uploadsInFlight(): number {
    return this.#uploading.size;
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
    if (model.upload) this.#settle();
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
    if (model.upload) return this.#arrive(instance, model, now);
    if (model.resident) {
      const landed = model.landed;
      if (!landed) return { hit: true, loadedBytes: 0, diskBytes: 0, loadMs: 0, evicted: [], compactedBytes: 0 };
      // Its upload landed while another load waited for it: its batch waited for none of it.
      model.landed = undefined;
      return { hit: false, loadedBytes: landed.bytes, diskBytes: 0, loadMs: 0, hiddenMs: landed.copyMs, evicted: landed.evicted as Id[], compactedBytes: 0, thrash: this.#thrash(now) };
    }
    // Uploads in flight may be writing tensors this load would claim, or blocks it would evict.
    this.#settle();

    const started = performance.now();
    if (model.bytes > this.arena.capacity) throw errors.weightsTooLarge(model.name, model.bytes, this.arena.capacity, 0);
    // Every claim this load makes, to undo if any step of it throws (a tensor that cannot be read,
    // a copy the device refuses): the cache is left as it was, but for the models it evicted.
    const load: LoadClaims = { claimed: [], placed: [], pending: null };
    let loaded: { needed: number; evicted: Id[]; compactedBytes: number; diskBytes: number };
    try {
      // Claim what is already there first, so no eviction below can free a tensor this model needs.
      const missing = this.#claimPresent(model, load);
      const needed = missing.reduce((sum, t) => sum + alignUp(t.byteLength), 0);
      const evicted = this.#makeRoom(model, needed);
      const copied = this.#copyIn(missing, load);
      this.arena.flush();
      loaded = { needed, evicted, ...copied };
    } catch (err) {
      this.#undo(load);
      throw err;
    }
    model.resident = true;
    model.epoch = ++this.#epochs;
    return {
      hit: false,
      loadedBytes: loaded.needed,
      diskBytes: loaded.diskBytes,
      loadMs: performance.now() - started,
      evicted: loaded.evicted,
      compactedBytes: loaded.compactedBytes + this.#loaded(),
      thrash: this.#thrash(now),
    };
  }

  /** A load's tensors already on the device, claimed (`load.claimed`); what is missing. */
  #claimPresent(model: CachedModel, load: LoadClaims): TensorSource[] {
    const missing: TensorSource[] = [];
    for (const t of model.tensors.values()) {
      const onDevice = this.#device.get(t.key);
      if (onDevice) {
        onDevice.refs++;
        load.claimed.push(t.key);
      } else missing.push(t);
    }
    return missing;
  }

  /** Evict least recently used models until `needed` bytes are free; refused with the figures when they cannot be. */
  #makeRoom(model: CachedModel, needed: number): Id[] {
    const evicted: Id[] = [];
    if (this.arena.free < needed) {
      for (const [victimInstance, victim] of this.#lru(model)) {
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
    return evicted;
  }

  /**
   * Copy the missing tensors into the arena (compacting it when the free space is in pieces), from host RAM or disk.
   */
  #copyIn(missing: TensorSource[], load: LoadClaims): { compactedBytes: number; diskBytes: number } {
    let compactedBytes = 0;
    let diskBytes = 0;
    for (const t of missing) {
      load.pending = this.arena.alloc(t.byteLength);
      if (!load.pending) {
        compactedBytes += this.#compact();
        load.pending = this.arena.alloc(t.byteLength) as Block;
      }
      const block = load.pending;
      const host = this.#host.get(t.key);
      if (host) this.arena.write(block, host.bytes);
      else {
        this.arena.fill(block, t.byteLength, (into) => this.#options.readTensor(t, into));
        diskBytes += t.byteLength;
      }
      this.#device.set(t.key, { block, byteLength: t.byteLength, refs: 1 });
      load.placed.push(t.key);
      load.pending = null;
    }
    return { compactedBytes, diskBytes };
  }

  /** A load that failed part way: every claim it made given back. */
  #undo(load: LoadClaims): void {
    // Copies already issued may still read their sources (pinned host buffers the caller may
    // let go of next): wait for them before anything is given back.
    try {
      this.arena.flush();
    } catch {
      // The device failed: no copy of it is still running.
    }
    if (load.pending) this.arena.release(load.pending);
    for (const key of load.placed) this.#unref(key);
    for (const key of load.claimed) this.#unref(key);
  }

  /**
   * Start copying a cold model's missing tensors in beside execution (see the header): 'started';
   * 'skipped' when it has nothing to upload this way (resident or on its way already, or `unpinned`:
   * no host copy to copy from); 'no room' when it would have to evict a model in `keep` (what runs
   * and what waits ahead of it) or compact.
   */
  beginUpload(instance: Id, keep: ReadonlySet<Id>): 'started' | 'skipped' | 'no room' {
    const model = this.#models.get(instance);
    if (!model || model.resident || model.upload || model.residency === 'unpinned') return 'skipped';
    const missing = [...model.tensors.values()].filter((t) => !this.#device.has(t.key));
    if (missing.some((t) => !this.#host.has(t.key))) return 'skipped';
    // On a GPU (host copies pinned where the platform allows) a copy from pageable memory is
    // synchronous: issued before the run it would hold the run back for its whole length. Only
    // pinned host copies go beside; the others load at their model's turn.
    if (this.#options.pinHost && missing.some((t) => !this.#host.get(t.key)!.pin)) return 'skipped';
    const needed = missing.reduce((sum, t) => sum + alignUp(t.byteLength), 0);
    if (needed > this.arena.capacity) return 'skipped'; // its turn says why

    // Claimed first, so that the victims' freeable bytes below do not count what this model keeps.
    const claimed = [...model.tensors.keys()].filter((key) => this.#device.has(key));
    for (const key of claimed) this.#device.get(key)!.refs++;
    const victims = this.#victims(model, keep, needed);
    if (!victims) {
      for (const key of claimed) this.#unref(key);
      return 'no room';
    }
    const evicted: Id[] = [];
    for (const [victimInstance, victim] of victims) {
      this.#evict(victimInstance, victim);
      evicted.push(victimInstance);
    }
    const blocks: Block[] = [];
    for (const t of missing) {
      const block = this.arena.alloc(t.byteLength);
      if (!block) {
        // The room is there, in pieces: compacting would move blocks under the run. It loads at its turn.
        for (const b of blocks) this.arena.release(b);
        for (const key of claimed) this.#unref(key);
        return 'no room';
      }
      blocks.push(block);
    }
    try {
      for (const [i, t] of missing.entries()) this.arena.upload(blocks[i], this.#host.get(t.key)!.bytes);
    } catch (err) {
      // The device refused a copy: wait for those issued before the blocks go back.
      try {
        this.arena.markUpload().wait();
      } catch {
        // The device failed: no copy of it is still running.
      }
      for (const b of blocks) this.arena.release(b);
      for (const key of claimed) this.#unref(key);
      throw err;
    }
    missing.forEach((t, i) => this.#device.set(t.key, { block: blocks[i], byteLength: t.byteLength, refs: 1 }));
    model.upload = { mark: this.arena.markUpload(), bytes: needed, evicted, placed: missing.map((t) => t.key), claimed };
    model.lastUsed = ++this.#clock;
    this.#uploading.add(instance);
    return 'started';
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

  /** The model's batch waits for its upload beside execution: the load, with the copy time it did not wait for. */
  #arrive(instance: Id, model: CachedModel, now: number): ResidencyOutcome<Id> {
    const upload = model.upload as Upload<Id>;
    const started = performance.now();
    const copyMs = this.#land(instance, model);
    const loadMs = performance.now() - started;
    const compactedBytes = this.#loaded();
    return { hit: false, loadedBytes: upload.bytes, diskBytes: 0, loadMs, hiddenMs: Math.max(0, copyMs - loadMs), evicted: upload.evicted, compactedBytes, thrash: this.#thrash(now) };
  }

  /** Wait for one model's upload; it is resident after. A failed copy gives back what the upload took, and throws. */
  #land(instance: Id, model: CachedModel): number {
    const upload = model.upload as Upload<Id>;
    model.upload = undefined;
    this.#uploading.delete(instance);
    let copyMs: number;
    try {
      copyMs = upload.mark.wait();
    } catch (err) {
      for (const key of upload.placed) this.#unref(key);
      for (const key of upload.claimed) this.#unref(key);
      throw err;
    }
    model.resident = true;
    model.epoch = ++this.#epochs;
    return copyMs;
  }

  /** Wait for every upload in flight; their models are resident, each reporting its load at its next use. */
  #settle(): void {
    for (const instance of [...this.#uploading]) {
      const model = this.#models.get(instance)!;
      const { bytes, evicted } = model.upload!;
      model.landed = { bytes, copyMs: this.#land(instance, model), evicted };
    }
  }

  /** After a model came on: count the load, and compact when compaction_interval says; the bytes moved. */
  #loaded(): number {
    this.#onDemandLoads++;
    const interval = this.#options.compactionInterval;
    return interval > 0 && this.#onDemandLoads % interval === 0 ? this.#compact() : 0;
  }

  /** Resident models that may be evicted for `model`, least recently used first. */
  #lru(model: CachedModel): [Id, CachedModel][] {
    return [...this.#models].filter(([, m]) => m.resident && m.residency !== 'device' && m !== model).sort(([, a], [, b]) => a.lastUsed - b.lastUsed);
  }

  /**
   * The fewest LRU models outside `keep` whose eviction leaves `needed` bytes free; [] when they are free already, null
   * when those cannot.
   */
  #victims(model: CachedModel, keep: ReadonlySet<Id>, needed: number): [Id, CachedModel][] | null {
    let free = this.arena.free;
    const victims: [Id, CachedModel][] = [];
    for (const [instance, victim] of this.#lru(model)) {
      if (free >= needed) break;
      if (keep.has(instance)) continue;
      const freeable = this.#freeable(victim);
      if (freeable === 0) continue;
      victims.push([instance, victim]);
      free += freeable;
    }
    return free >= needed ? victims : null;
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
    this.#settle(); // blocks still being written must not move
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
    model.landed = undefined; // uploaded and gone before its use: nothing to report
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
