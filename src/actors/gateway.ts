/**
 * The gateway: which device actor serves a request. Every device loads every model (replicas), and
 * the gateway spreads requests over them: `round_robin` in turn, `least_outstanding` to the device
 * with the fewest calls in flight. With one device it is a pass-through that costs one array read.
 * Placement by measured load (`lpt_packing`) comes with the weight cache it packs against.
 */
import type { ModelSpec } from '../bundle/model-spec.js';
import type { HostWeights } from '../weights/host-weights.js';
import type { DeviceActor } from './device-actor.js';
import type { InstanceStatus, ModelPolicyUpdate, Residency, WeightMemory } from './messages.js';

export type GatewayMode = 'round_robin' | 'least_outstanding';

export class Gateway {
  readonly devices: readonly DeviceActor[];
  readonly #mode: GatewayMode;
  readonly #hostWeights?: HostWeights;
  #next = 0;

  constructor(devices: readonly DeviceActor[], mode: GatewayMode, hostWeights?: HostWeights) {
    if (devices.length === 0) throw new Error('a gateway needs at least one device');
    this.devices = devices;
    this.#mode = mode;
    this.#hostWeights = hostWeights;
  }

  /** The device for the next request. */
  pick(): DeviceActor {
    const { devices } = this;
    if (devices.length === 1) return devices[0];
    if (this.#mode === 'least_outstanding') {
      let best = devices[0];
      for (const d of devices) if (d.inflight < best.inflight) best = d;
      return best;
    }
    const d = devices[this.#next];
    this.#next = (this.#next + 1) % devices.length;
    return d;
  }

  /**
   * Load one version of a model on every device: the first device alone (it compiles the model
   * into the compile cache and reads its weights into host RAM), then the others at once (they
   * find both). The model's load time is the first load's plus the slowest of the others. If any
   * device refuses it, the devices that loaded it unload it again, and the refusal is the answer.
   */
  async load(spec: ModelSpec, instance: string): Promise<{ loadMs: number }> {
    const [first, ...rest] = this.devices;
    const loads: PromiseSettledResult<{ loadMs: number }>[] = [(await Promise.allSettled([first.load(spec, instance)]))[0]];
    if (loads[0].status === 'fulfilled') loads.push(...await Promise.allSettled(rest.map((d) => d.load(spec, instance))));
    const failed = loads.find((l): l is PromiseRejectedResult => l.status === 'rejected');
    if (failed) {
      await Promise.allSettled(this.devices.filter((_, i) => loads[i]?.status === 'fulfilled').map((d) => d.unload(instance)));
      this.#hostWeights?.release(instance);
      throw failed.reason;
    }
    const times = loads.map((l) => (l as PromiseFulfilledResult<{ loadMs: number }>).value.loadMs);
    return { loadMs: times[0] + (times.length > 1 ? Math.max(...times.slice(1)) : 0) };
  }

  async unload(instance: string): Promise<void> {
    try {
      await Promise.all(this.devices.map((d) => d.unload(instance)));
    } finally {
      this.#hostWeights?.release(instance);
    }
  }

  /** Every device's instances, tagged with the device. */
  async status(): Promise<(InstanceStatus & { device: number })[]> {
    const reports = await Promise.all(this.devices.map(async (d) => (await d.status()).instances.map((s) => ({ ...s, device: d.deviceId }))));
    return reports.flat();
  }

  /** Each device's weight memory (null where the weight cache is off). */
  async memory(): Promise<{ device: number; memory: WeightMemory | null }[]> {
    return Promise.all(this.devices.map(async (d) => ({ device: d.deviceId, memory: (await d.status()).memory })));
  }

  async setResidency(model: string, residency: Residency): Promise<void> {
    await Promise.all(this.devices.map((d) => d.setResidency(model, residency)));
  }

  /** Compact one device's arena (or every device's, for -1); the bytes moved in all. */
  async compact(device: number): Promise<number> {
    const targets = device < 0 ? this.devices : this.devices.filter((d) => d.deviceId === device);
    const moved = await Promise.all(targets.map((d) => d.compact()));
    return moved.reduce((a, b) => a + b, 0);
  }

  async setPolicy(model: string, policy: ModelPolicyUpdate): Promise<void> {
    await Promise.all(this.devices.map((d) => d.setPolicy(model, policy)));
  }

  forgetRegion(regionId: number): void {
    for (const d of this.devices) d.forgetRegion(regionId);
  }

  async stop(): Promise<void> {
    await Promise.all(this.devices.map((d) => d.stop()));
  }
}
