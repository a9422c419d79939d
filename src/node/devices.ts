/**
 * The node's devices, on the main thread: the pool of device actors, what each holds, and where
 * each model's requests may go. Every device loads every model (a loaded model costs a weightless
 * session; its weights come onto a device only when that device runs it), and the node file's
 * `gateway.scheduling.mode` (the device pool's routing) decides where requests go; the choice for
 * each request is made by the rooms of the thread that holds it (actors/rooms/rooms.ts), from
 * the model's route, which carries what this pool decides:
 *
 * - `round_robin`: every device in turn;
 * - `least_outstanding`: the device with the fewest calls in flight (both in routing/routing.ts);
 * - `lpt_packing`: each model is placed on `replicas` devices by longest-processing-time packing
 *   of measured compute and weight bytes (routing/placement.ts), and its requests go only there, so its
 *   weights stay resident on few devices and its batches fill. Among a model's replicas, requests
 *   fill one replica's batch (its largest batch × `routing_fill_factor` in flight) before the next
 *   opens: `fill_rr` opens the next in turn, `fill_least` the least busy. After every
 *   `rebalance_compute_seconds` of device time the models are packed again from the new
 *   measurements; a model that moves is made resident on its new devices before requests switch,
 *   and its old devices keep serving what they have, so no request fails.
 *
 * With one device every mode is a pass-through.
 */
import { errors, type StowageError } from '../shared/errors.js';
import type { Logger } from 'pino';
import { modelOf, type InstanceKey, type ModelSpec } from '../shared/model-spec.js';
import type { FillPolicy, GatewayMode } from '../shared/config-schema.js';
import type { Compiler } from '../actors/compiler/handle.js';
import type { HostWeights } from './host-weights.js';
import type { DeviceHandle, LoadOutcome } from '../actors/device/handle.js';
import type { DeviceReport, InstanceStatus, ModelPolicyUpdate, Residency } from '../shared/channels/device.js';
import type { RegionSlice } from '../shared/channels/inference.js';
import type { EdgePlacement, EdgeRoute } from '../shared/channels/edge.js';
import type { ModelPolicies } from './model-policies.js';
import { pack, type Placement } from '../routing/placement.js';


export interface LptOptions {
  defaultReplicas: number | 'all';
  /** Per-model replica counts. */
  replicas: Readonly<Record<string, number | 'all'>>;
  fillFactor: number;
  policy: FillPolicy;
  /** Repack after this many device-seconds of work; 0: only at start-up and on request. */
  rebalanceSeconds: number;
  /** Each device's weight budget in bytes (0: unknown). */
  budgets: ReadonlyMap<number, number>;
}

export interface DevicesOptions {
  mode: GatewayMode;
  /** Every model's policy, the one its device handles read: set/residency changes go through it. */
  policies: ModelPolicies;
  hostWeights?: HostWeights;
  /**
   * Compiles a model before its devices load it; absent when the weight cache is off (devices open the files as they
   * are).
   */
  compiler?: Pick<Compiler, 'compile'>;
  lpt?: LptOptions;
  logger?: Logger;
  /** Told of every placement applied. */
  onPlacement?: (placement: Placement) => void;
  /** Told when a loaded model moves to other devices (the edges route it there themselves). */
  onModelMoved?: (model: string) => void;
}

interface Placed {
  instance: InstanceKey;
  /** Rows of one full batch: the model's largest batch (1 without a batch axis). */
  batchRows: number;
  bytes: number;
  devices: DeviceHandle[];
}

export class Devices {
  /** The device actors' handles, in device order. */
  readonly handles: readonly DeviceHandle[];
  readonly #o: DevicesOptions;
  /** lpt_packing: each loaded model's placement and what packing needs to know of it. */
  #placed = new Map<string, Placed>();
  /** Device-seconds of work per model since the last packing, and in all. */
  #work = new Map<string, number>();
  #workSinceRepack = 0;
  #repacking: Promise<void> | null = null;

  constructor(devices: readonly DeviceHandle[], options: DevicesOptions) {
    if (devices.length === 0) throw new Error('a node needs at least one device');
    this.handles = devices;
    this.#o = options;
  }

  get mode(): GatewayMode {
    return this.#o.mode;
  }

  /**
   * Resolves once every device has reported every execution it answered before now (statistics read after it count
   * them).
   */
  async reported(): Promise<void> {
    await Promise.all(this.handles.map((d) => d.reported()));
  }

  /** The device actor of id `deviceId`. */
  device(deviceId: number): DeviceHandle {
    const device = this.handles.find((d) => d.deviceId === deviceId);
    if (!device) throw new Error(`no device ${deviceId}`);
    return device;
  }

  /** The devices a model's requests go to (lpt_packing), or every device. */
  placementOf(model: string): number[] {
    return (this.#placed.get(model)?.devices ?? this.handles).map((d) => d.deviceId);
  }

  /**
   * A registry route as every thread's rooms take it (actors/rooms/rooms.ts): with the model's placement under
   * lpt_packing over several devices, and the devices that hold its instance when not every device in service does.
   * `edges`: the edge threads, among which a replica's full batch in flight is shared.
   */
  routed(route: EdgeRoute, edges: number): EdgeRoute {
    const placement = this.#placement(route.model, edges);
    const holders = this.#holdersOf(route.instance);
    return placement || holders ? { ...route, ...(placement ? { placement } : {}), ...(holders ? { devices: holders } : {}) } : route;
  }

  /**
   * Where `model`'s requests go under lpt_packing over several devices (its replicas, and each edge's share of a
   * replica's full batch in flight); undefined in the other modes, with one device, or for a model not placed yet.
   */
  #placement(model: string, edges: number): EdgePlacement | undefined {
    if (this.#o.mode !== 'lpt_packing' || this.handles.length === 1) return undefined;
    const placed = this.#placed.get(model);
    if (!placed || placed.devices.length === 0) return undefined;
    const capacity = Math.max(1, Math.round((placed.batchRows * (this.#o.lpt?.fillFactor ?? 1)) / Math.max(1, edges)));
    return { devices: placed.devices.map((d) => d.deviceId), capacity, policy: this.#o.lpt?.policy ?? 'fill_rr' };
  }

  /**
   * Make an instance's weights resident now on the devices its requests go to (its placement under
   * lpt_packing, else every device in service that holds it): PrefetchModel, which a gateway pooling
   * a fleet's memory sends before it switches a model's requests to this node.
   */
  async prefetch(model: string, instance: InstanceKey): Promise<void> {
    const placed = this.#placed.get(model)?.devices;
    const targets = (placed ?? this.#holding(instance)).filter((d) => d.serving);
    await Promise.all(targets.map((d) => d.prefetch(instance)));
  }

  /** The devices in service: not stopped, not taken out (a poisoned GPU: actors/device/out-of-service.ts). */
  get #serving(): DeviceHandle[] {
    return this.handles.filter((d) => d.serving);
  }

  /** The devices in service that hold `instance`, in device order. */
  #holding(instance: InstanceKey): DeviceHandle[] {
    return this.handles.filter((d) => d.serving && d.holds(instance));
  }

  /**
   * The devices a model's instance may be routed to, when that is not every device in service (a
   * device lost it: its replacement worker could not load it again); undefined when it is every one.
   */
  #holdersOf(instance: InstanceKey): number[] | undefined {
    const holding = this.#holding(instance);
    return holding.length === this.#serving.length ? undefined : holding.map((d) => d.deviceId);
  }

  /**
   * Why no device takes a request for `instance` (the main thread's rooms found none: node/refusals.ts): none of the
   * node's is in service, or none in service holds it.
   */
  unavailable(instance: InstanceKey): StowageError {
    const serving = this.#serving;
    if (serving.length === 0) return errors.deviceUnavailable(this.handles[0].deviceId, `no device of this node is in service (${this.handles.map((d) => `device ${d.deviceId}: ${d.state}`).join(', ')})`);
    if (this.#holding(instance).length === 0) return errors.modelNotReady(modelOf(instance), 'UNAVAILABLE', `no device in service holds it (${serving.map((d) => `device ${d.deviceId}`).join(', ')} could not load it)`);
    return errors.modelNotReady(modelOf(instance), 'UNAVAILABLE', 'its devices take nothing now: they are starting or stopping');
  }

  /** Told of every execution: the model's measured work, and a repack when enough has been done. */
  recordExecution(model: string, computeNs: number): void {
    if (this.#o.mode !== 'lpt_packing') return;
    const seconds = computeNs / 1e9;
    this.#work.set(model, (this.#work.get(model) ?? 0) + seconds);
    this.#workSinceRepack += seconds;
    const every = this.#o.lpt?.rebalanceSeconds ?? 0;
    if (every > 0 && this.#workSinceRepack >= every && !this.#repacking) void this.repack('rebalance');
  }

  /**
   * Pack every model again from the work measured since the last packing and apply the result:
   * a model moving to a device is made resident there first, then its requests switch.
   */
  repack(why: string): Promise<void> {
    if (this.#o.mode !== 'lpt_packing' || this.handles.length === 1) return Promise.resolve();
    if (this.#repacking) return this.#repacking;
    this.#repacking = this.#repack(why).finally(() => {
      this.#repacking = null;
    });
    return this.#repacking;
  }

  async #repack(why: string): Promise<void> {
    const work = this.#work;
    this.#work = new Map();
    this.#workSinceRepack = 0;
    const placement = this.#pack([...this.#placed.keys()], work);
    const moves: Promise<unknown>[] = [];
    for (const [model, ids] of placement.devices) {
      const placed = this.#placed.get(model);
      if (!placed) continue;
      const before = placed.devices.map((d) => d.deviceId);
      const added = ids.filter((id) => !before.includes(id));
      if (added.length === 0 && ids.length === before.length) continue;
      moves.push((async () => {
        // Weights onto the new devices first; requests follow once they are there.
        await Promise.allSettled(added.map((id) => this.#device(id).prefetch(placed.instance)));
        if (this.#placed.get(model) !== placed) return; // unloaded or reloaded meanwhile
        placed.devices = ids.map((id) => this.#device(id));
        this.#o.onModelMoved?.(model);
        this.#o.logger?.info({ model, from: before, to: ids }, 'model moved');
      })());
    }
    await Promise.all(moves);
    this.#report(placement, why);
  }

  #device(id: number): DeviceHandle {
    return this.handles.find((d) => d.deviceId === id)!;
  }

  #replicas(model: string): number {
    const lpt = this.#o.lpt;
    const r = lpt?.replicas[model] ?? lpt?.defaultReplicas ?? 1;
    return r === 'all' ? this.handles.length : Math.min(r, this.handles.length);
  }

  #pack(models: string[], work: ReadonlyMap<string, number>): Placement {
    return pack(
      models.map((model) => {
        const p = this.#placed.get(model);
        return { model, load: work.get(model) ?? 0, bytes: p?.bytes ?? 0, replicas: this.#replicas(model), current: p?.devices.map((d) => d.deviceId) };
      }),
      this.handles.map((d) => ({ id: d.deviceId, budget: this.#o.lpt?.budgets.get(d.deviceId) ?? 0 })),
    );
  }

  #report(placement: Placement, why: string): void {
    this.#o.onPlacement?.(placement);
    const byDevice = Object.fromEntries(this.handles.map((d) => [d.deviceId, [...placement.devices].filter(([, ids]) => ids.includes(d.deviceId)).map(([m]) => m)]));
    this.#o.logger?.info({ why, placement: byDevice, load: Object.fromEntries(placement.load), bytes: Object.fromEntries(placement.bytes) }, 'models packed onto devices');
    for (const o of placement.oversubscribed) {
      this.#o.logger?.warn(o, `device ${o.device}: the models placed on it need ${o.bytes} bytes of weights, more than its budget of ${o.budget}; it will thrash (fewer replicas, or more memory)`);
    }
  }

  /**
   * Load one version of a model on every device: the compiler compiles it first (off every
   * device's thread, so they keep executing meanwhile) and reads its weights into host RAM, then
   * every device opens its weightless sessions at once. The model's load time is the compile's
   * plus the slowest device's. If any device refuses it, the devices that loaded it unload it
   * again, and the refusal is the answer.
   */
  async load(spec: ModelSpec, instance: InstanceKey): Promise<{ loadMs: number; session: string }> {
    const started = performance.now();
    const compiled = this.#o.compiler ? await this.#o.compiler.compile(spec, this.#o.hostWeights?.keys() ?? []) : null;
    for (const damage of compiled?.repaired ?? []) this.#o.logger?.warn({ model: spec.name, damage }, 'compile cache damaged: compiled again');
    const compileMs = performance.now() - started;
    const targets = this.#serving;
    if (targets.length === 0) throw errors.deviceUnavailable(this.handles[0].deviceId, 'no device of this node is in service');
    const loads = await Promise.allSettled(targets.map((d) => d.load(spec, instance, compiled)));
    const failed = loads.find((l): l is PromiseRejectedResult => l.status === 'rejected');
    if (failed) {
      await Promise.allSettled(targets.filter((_, i) => loads[i].status === 'fulfilled').map((d) => d.unload(instance)));
      this.#o.hostWeights?.release(instance);
      throw failed.reason;
    }
    const results = loads.map((l) => (l as PromiseFulfilledResult<LoadOutcome>).value);
    if (this.#o.mode === 'lpt_packing' && this.handles.length > 1) this.#place(spec, instance, results[0].weightBytes);
    // Which session it shares on each device: the same words on every device, or each device's.
    const sessions = [...new Set(results.map((r) => r.session))];
    return { loadMs: compileMs + Math.max(...results.map((r) => r.loadMs)), session: sessions.length === 1 ? sessions[0] : results.map((r, i) => `device ${targets[i].deviceId}: ${r.session}`).join('; ') };
  }

  /** A newly loaded version: a reload keeps its model's devices; a new model is packed beside the others. */
  #place(spec: ModelSpec, instance: InstanceKey, bytes: number): void {
    const previous = this.#placed.get(spec.name);
    const batchRows = Math.max(1, spec.maxBatchSize);
    if (previous) {
      this.#placed.set(spec.name, { ...previous, instance, batchRows, bytes });
      return;
    }
    // Where this model goes, given the others where they are: pack all, keep theirs, take its own.
    this.#placed.set(spec.name, { instance, batchRows, bytes, devices: [] });
    const placement = this.#pack([...this.#placed.keys()], this.#work);
    const ids = placement.devices.get(spec.name) ?? [this.handles[0].deviceId];
    this.#placed.set(spec.name, { instance, batchRows, bytes, devices: ids.map((id) => this.#device(id)) });
  }

  /**
   * A device lost `instance` (its replacement worker could not load it again): requests go to the
   * devices that have it. Returns whether any device in service still does; when none does, its
   * host copies of weights are let go (the model must be loaded again).
   */
  lost(instance: InstanceKey): boolean {
    if (this.#serving.some((d) => d.holds(instance))) return true;
    this.#o.hostWeights?.release(instance);
    return false;
  }

  async unload(instance: InstanceKey): Promise<void> {
    const model = modelOf(instance);
    if (this.#placed.get(model)?.instance === instance) this.#placed.delete(model);
    try {
      await Promise.all(this.#serving.map((d) => d.unload(instance)));
    } finally {
      this.#o.hostWeights?.release(instance);
    }
  }

  /** Every device's instances, tagged with the device. */
  async status(): Promise<(InstanceStatus & { device: number })[]> {
    return (await this.reports()).flatMap((r) => r.instances.map((s) => ({ ...s, device: r.device })));
  }

  /** Every device's instances and sessions, in one status call each. */
  async reports(): Promise<DeviceReport[]> {
    return Promise.all(this.#serving.map(async (d) => ({ device: d.deviceId, ...(await d.report()) })));
  }

  /** Every model's policy (the node file's per worker, run-time changes over it). */
  get policies(): ModelPolicies {
    return this.#o.policies;
  }

  /** Change a model's weight or batch cap on every device, its queued requests included; later loads carry it. */
  async setPolicy(model: string, update: ModelPolicyUpdate): Promise<void> {
    this.#o.policies.change(model, update);
    await Promise.all(this.#serving.map((d) => d.applyPolicy(model)));
  }

  /** Change a model's residency on every device; if any device refuses, every device goes back to what it had. */
  async setResidency(model: string, residency: Residency): Promise<void> {
    const before = this.#o.policies.change(model, { residency });
    const targets = this.#serving;
    const results = await Promise.allSettled(targets.map((d) => d.applyResidency(model)));
    const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (!failed) return;
    this.#o.policies.restore(model, before);
    await Promise.allSettled(targets.filter((_, i) => results[i].status === 'fulfilled').map((d) => d.applyResidency(model)));
    throw failed.reason;
  }

  /** Compact one device's arena (or every device's, for -1); the bytes moved in all. */
  async compact(device: number): Promise<number> {
    const targets = device < 0 ? this.#serving : this.handles.filter((d) => d.deviceId === device);
    const moved = await Promise.all(targets.map((d) => d.compact()));
    return moved.reduce((a, b) => a + b, 0);
  }

  /**
   * Device `deviceId` was taken out of service, its GPU's context poisoned: every other device
   * actor on that GPU shares the context (one per GPU per process), so it is taken out too.
   * Answers the devices so taken out.
   */
  outOfService(deviceId: number, reason: string, cudaError: number): number[] {
    const gpu = this.device(deviceId).gpu;
    if (gpu === null) return [];
    const sharers = this.handles.filter((d) => d.deviceId !== deviceId && d.gpu === gpu && d.serving);
    for (const d of sharers) d.takeOut(`GPU ${gpu}'s context is poisoned (device ${deviceId}: ${reason})`, cudaError);
    return sharers.map((d) => d.deviceId);
  }

  forgetRegion(regionId: number): void {
    for (const d of this.handles) d.forgetRegion(regionId);
  }

  /**
   * A CUDA shared-memory region on GPU `slice.cuda.gpu`: the device actors that drive that GPU open
   * its handle now, so that a handle that cannot be opened is refused at registration; the others
   * open it when a request first brings it there. INVALID_ARGUMENT when no device drives that GPU.
   */
  async openCudaRegion(slice: RegionSlice): Promise<void> {
    const gpu = slice.cuda?.gpu;
    const owners = this.handles.filter((d) => d.gpu !== null && d.gpu === gpu);
    if (owners.length === 0) {
      const served = [...new Set(this.handles.map((d) => d.gpu).filter((g) => g !== null))];
      throw errors.sharedMemoryInvalid(`device_id ${gpu} is not a GPU this server runs on (it runs on GPU ${served.join(', ') || 'none'}): register the region on one of those`);
    }
    await Promise.all(owners.map((d) => d.openCudaRegion(slice)));
  }

  async stop(): Promise<void> {
    await this.#repacking?.catch(() => undefined);
    await Promise.all(this.handles.map((d) => d.stop()));
  }
}
