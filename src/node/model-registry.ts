/**
 * The main thread's table of models: what the repository holds, the state of each, why a model
 * is not ready, and which loaded instance serves it. The codec and the metadata RPCs read specs
 * from here; only READY models are routed to a device (each model's route, which the rooms of every
 * thread that holds requests lease by: actors/rooms/rooms.ts).
 *
 * Instances make a reload atomic: a new version loads on the device under a new instance key
 * beside the old one; switching the record's instance is one assignment, after which new requests
 * go to the new version while requests already holding the old instance finish on it.
 */
import { MODEL_VERSION } from '../shared/constants.js';
import { errors } from '../shared/errors.js';
import { modelOf, type InstanceKey, type ModelSpec } from '../shared/model-spec.js';
import { Leases } from '../shared/leases.js';
import type { EdgeRoute } from '../shared/channels/edge.js';
import { ModelSlots, type Serving } from './model-slots.js';

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

export class ModelRegistry {
  #records = new Map<string, ModelRecord>();
  /** Told of every change of a model's state (null: forgotten), in order: the gRPC health service. */
  #watchers: ((name: string, state: ModelState | null) => void)[] = [];
  /** Each serving instance's lease slot, and the routes the edges take by them (model-slots.ts). */
  readonly #slots: ModelSlots;
  #routeWatchers: ((model: string, route: EdgeRoute | null) => void)[] = [];

  /**
   * `leases`: where every thread that runs requests holds the instances it runs on (the main
   * thread's, Leases.create: without edge threads, its row alone); `slotFreed` hears of a slot
   * freed, its leases drained, before it stands for another instance.
   */
  constructor(leases: Leases = Leases.create(0), slotFreed?: (instance: InstanceKey, slot: number) => void) {
    this.#slots = new ModelSlots(leases, slotFreed);
  }

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

  /** Every lease slot in use (open, or closed and not yet drained), and the instance it stands for. */
  slots(): IterableIterator<[InstanceKey, number]> {
    return this.#slots.slots();
  }

  /** Every model an edge may route now. */
  routes(): EdgeRoute[] {
    return [...this.#records.keys()].map((name) => this.routeOf(name)).filter((r): r is EdgeRoute => r !== null);
  }

  /** Call `watcher` with each change of a model's route (null: edges send it to the main thread). */
  watchRoutes(watcher: (model: string, route: EdgeRoute | null) => void): void {
    this.#routeWatchers.push(watcher);
  }

  /** The model's route now, or null when edges must send its requests to the main thread (not ready). */
  routeOf(name: string): EdgeRoute | null {
    return this.#slots.routeOf(name, this.#serving(name));
  }

  /** The instance serving a ready model, with its spec. */
  #serving(name: string): Serving | undefined {
    const record = this.#records.get(name);
    return record?.state === ModelState.READY && record.spec && record.instance ? { instance: record.instance, spec: record.spec } : undefined;
  }

  /**
   * A model's record changed: its lease slots and the edges' routes follow (model-slots.ts), and the watchers are told.
   */
  #route(name: string): void {
    const route = this.#slots.changed(name, this.#serving(name));
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
   * Resolves once no request holds the instance, on any thread (the record's change that precedes
   * an unload closed its slot already).
   */
  async drained(instance: InstanceKey): Promise<void> {
    await this.#slots.drained(instance);
  }

  /**
   * Leases were given back (a thread's last on a closed slot, or an edge died): whoever waits for a slot to drain looks
   * again.
   */
  released(): void {
    this.#slots.released();
  }

  /** Requests in flight per model, all instances together, on every thread. */
  pending(): Map<string, number> {
    const out = new Map<string, number>();
    const add = (instance: InstanceKey, n: number) => {
      if (n > 0) out.set(modelOf(instance), (out.get(modelOf(instance)) ?? 0) + n);
    };
    for (const [instance, n] of this.#slots.held()) add(instance, n);
    return out;
  }

  /** A model's spec for metadata: available even when not ready, as long as the manifest parsed. */
  described(name: string, version = ''): ModelSpec {
    const record = this.find(name, version);
    if (!record.spec) throw errors.modelNotReady(name, record.state, record.reason);
    return record.spec;
  }
}
