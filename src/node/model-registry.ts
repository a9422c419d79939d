/**
 * The main thread's table of models: what the repository holds, the state of each, why a model
 * is not ready, and which loaded instance serves it. The codec and the metadata RPCs read specs
 * from here; only READY models are routed to a device.
 *
 * Instances make a reload atomic: a new version loads on the device under a new instance key
 * beside the old one; switching the record's instance is one assignment, after which new requests
 * go to the new version while requests already holding the old instance finish on it.
 */
import { MODEL_VERSION } from '../shared/constants.js';
import { errors } from '../shared/errors.js';
import { modelOf, type InstanceKey, type ModelSpec } from '../shared/model-spec.js';
import { LEASE_SLOTS, type Leases } from '../shared/leases.js';
import type { EdgeRoute } from '../shared/channels/edge.js';

/** Lifecycle of a model, in Triton's RepositoryIndex vocabulary. */
export enum ModelState {
  /** Sessions are being created on the device (a first load; a reload keeps serving as READY). */
  LOADING = 'LOADING',
  /** Serving requests. */
  READY = 'READY',
  /** Refusing new requests while those in flight finish; then UNAVAILABLE, or gone if its bundle was removed. */
  UNLOADING = 'UNLOADING',
  /** Refused (bad bundle), failed to load, or unloaded; `reason` says why. */
  UNAVAILABLE = 'UNAVAILABLE',
}

export interface ModelRecord {
  readonly name: string;
  state: ModelState;
  /** Absent when the manifest itself could not be parsed. */
  spec?: ModelSpec;
  /** The loaded version serving the model; absent when none is loaded. */
  instance?: InstanceKey;
  /** Why the model is not ready, or why its latest reload failed; empty otherwise. */
  reason: string;
}

/** What one request holds: the spec it was decoded with and the instance it runs on. */
export interface ModelLease {
  spec: ModelSpec;
  instance: InstanceKey;
}

interface Inflight {
  count: number;
  /** Resolved when count drops to zero (an unload waits on it). */
  drained: (() => void)[];
}

export class ModelRegistry {
  #records = new Map<string, ModelRecord>();
  /** Told of every change of a model's state (null: forgotten), in order: the gRPC health service. */
  #watchers: ((name: string, state: ModelState | null) => void)[] = [];
  /** Requests in flight by instance. */
  #inflight = new Map<InstanceKey, Inflight>();
  /**
   * Edge threads' direct path (shareLeases): the leases they take in shared memory, each routed
   * instance's slot there (`open` while new requests may take it), the slots free, and who is told
   * of each model's route.
   */
  #leases: Leases | null = null;
  #slots = new Map<InstanceKey, { slot: number; tag: number; open: boolean }>();
  #freeSlots: number[] = [];
  #nextTag = 1;
  /** Told when a slot is freed (its leases drained), before it may stand for another instance. */
  #slotFreed: ((instance: InstanceKey, slot: number) => void) | null = null;
  #routeWatchers: ((model: string, route: EdgeRoute | null) => void)[] = [];
  /** Drains waiting for edges to give back their leases on a closed slot. */
  #edgeWaiters: (() => void)[] = [];

  set(record: ModelRecord): void {
    this.#records.set(record.name, record);
    this.#route(record.name);
    for (const w of this.#watchers) w(record.name, record.state);
  }

  /** Forget a model entirely (its bundle was removed): it answers NOT_FOUND from now on. */
  delete(name: string): void {
    this.#records.delete(name);
    this.#route(name);
    for (const w of this.#watchers) w(name, null);
  }

  /**
   * Let edge threads run ready models' requests themselves (actors/edge/edge-path.ts):
   * each instance that serves gets a slot in `leases`, where an edge counts the requests it holds
   * on it, so that an unload or the end of a reload waits for them too (`drained`).
   */
  shareLeases(leases: Leases, slotFreed?: (instance: InstanceKey, slot: number) => void): void {
    this.#leases = leases;
    this.#slotFreed = slotFreed ?? null;
    this.#freeSlots = Array.from({ length: LEASE_SLOTS }, (_, i) => LEASE_SLOTS - 1 - i);
    for (const name of this.#records.keys()) this.#route(name);
  }

  /** Every lease slot in use (open, or closed and not yet drained), and the instance it stands for. */
  *slots(): IterableIterator<[InstanceKey, number]> {
    for (const [instance, s] of this.#slots) yield [instance, s.slot];
  }

  /** Every model an edge may route now. */
  routes(): EdgeRoute[] {
    return [...this.#records.keys()].map((name) => this.routeOf(name)).filter((r): r is EdgeRoute => r !== null);
  }

  /** Call `watcher` with each change of a model's route (null: edges send it to the main thread). */
  watchRoutes(watcher: (model: string, route: EdgeRoute | null) => void): void {
    this.#routeWatchers.push(watcher);
  }

  /** The model's route now, or null when edges must send its requests to the main thread. */
  routeOf(name: string): EdgeRoute | null {
    const record = this.#records.get(name);
    if (record?.state !== ModelState.READY || !record.spec || !record.instance) return null;
    const s = this.#slots.get(record.instance);
    return s?.open ? { model: name, spec: record.spec, instance: record.instance, slot: s.slot, tag: s.tag } : null;
  }

  /**
   * A model's record changed: the instance that serves it has an open slot (one is given when free;
   * none left, its requests go through the main thread), every other instance of it is closed to
   * new leases at once (the state word is cleared before this returns), and the edges are told.
   */
  #route(name: string): void {
    const leases = this.#leases;
    if (!leases) return;
    const record = this.#records.get(name);
    const serving = record?.state === ModelState.READY && record.spec ? record.instance : undefined;
    for (const [instance, s] of this.#slots) {
      if (s.open && instance !== serving && modelOf(instance) === name) {
        leases.close(s.slot);
        s.open = false;
      }
    }
    if (serving && !this.#slots.get(serving)?.open) {
      const slot = this.#slots.get(serving)?.slot ?? this.#freeSlots.pop();
      if (slot !== undefined) {
        const s = { slot, tag: this.#nextTag++, open: true };
        this.#slots.set(serving, s);
        leases.open(slot, s.tag);
      }
    }
    const route = this.routeOf(name);
    for (const w of this.#routeWatchers) w(name, route);
  }

  /** Call `watcher` with every model's state now, then with each change. */
  watch(watcher: (name: string, state: ModelState | null) => void): void {
    this.#watchers.push(watcher);
    for (const r of this.#records.values()) watcher(r.name, r.state);
  }

  get(name: string): ModelRecord | undefined {
    return this.#records.get(name);
  }

  all(): ModelRecord[] {
    return [...this.#records.values()].sort((a, b) => a.name.localeCompare(b.name));
  }

  /** The record of a known model at a version we serve; NOT_FOUND otherwise. */
  find(name: string, version = ''): ModelRecord {
    const record = this.#records.get(name);
    if (!record) throw errors.modelNotFound(name, this.all().map((r) => r.name));
    if (version !== '' && version !== MODEL_VERSION) throw errors.modelVersionNotFound(name, version, [MODEL_VERSION]);
    return record;
  }

  /**
   * Take a ready model for one request; the caller must `release(lease)` when the request is
   * answered, so that an unload or the end of a reload can wait for it.
   */
  acquire(name: string, version = ''): ModelLease {
    const record = this.find(name, version);
    if (record.state !== ModelState.READY || !record.spec || !record.instance) {
      throw errors.modelNotReady(name, record.state, record.reason);
    }
    let f = this.#inflight.get(record.instance);
    if (!f) this.#inflight.set(record.instance, (f = { count: 0, drained: [] }));
    f.count++;
    return { spec: record.spec, instance: record.instance };
  }

  release(lease: ModelLease): void {
    const f = this.#inflight.get(lease.instance);
    if (!f) return;
    if (--f.count === 0) {
      this.#inflight.delete(lease.instance);
      for (const resolve of f.drained) resolve();
    }
  }

  /**
   * Resolves once no request holds the instance: none of the main thread's, and none an edge
   * thread took on its slot (the record's change that precedes an unload closed the slot already).
   */
  async drained(instance: InstanceKey): Promise<void> {
    const f = this.#inflight.get(instance);
    if (f) await new Promise<void>((resolve) => f.drained.push(resolve));
    const s = this.#slots.get(instance);
    if (!s || !this.#leases) return;
    // An edge's last release on the closed slot says so (`edgesReleased`), as does an edge's death.
    while (this.#leases.held(s.slot) > 0) await new Promise<void>((resolve) => this.#edgeWaiters.push(resolve));
    // Closed and drained: the slot may stand for another instance (under another tag).
    if (!s.open && this.#slots.get(instance) === s) {
      this.#slots.delete(instance);
      this.#slotFreed?.(instance, s.slot);
      this.#freeSlots.push(s.slot);
    }
  }

  /** Edges gave leases back (the last on a closed slot, or an edge died): whoever waits for a slot to drain looks again. */
  edgesReleased(): void {
    const waiting = this.#edgeWaiters;
    this.#edgeWaiters = [];
    for (const resolve of waiting) resolve();
  }

  /** Requests in flight per model, all instances together, the edge threads' direct ones included. */
  pending(): Map<string, number> {
    const out = new Map<string, number>();
    const add = (instance: InstanceKey, n: number) => {
      if (n > 0) out.set(modelOf(instance), (out.get(modelOf(instance)) ?? 0) + n);
    };
    for (const [instance, f] of this.#inflight) add(instance, f.count);
    if (this.#leases) for (const [instance, s] of this.#slots) add(instance, this.#leases.held(s.slot));
    return out;
  }

  /** A model's spec for metadata: available even when not ready, as long as the manifest parsed. */
  described(name: string, version = ''): ModelSpec {
    const record = this.find(name, version);
    if (!record.spec) throw errors.modelNotReady(name, record.state, record.reason);
    return record.spec;
  }
}
