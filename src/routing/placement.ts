/**
 * Where each model lives under `lpt_packing`: longest-processing-time-first
 * packing of the models' measured compute load and weight bytes onto the
 * devices. Each model (or each of its replicas, which share its load) goes,
 * heaviest first, to the device where it leaves the device least loaded,
 * counting both resources: compute as a share of an even split of the total,
 * weight bytes as a share of the device's budget; the larger share is the
 * device's load. Pure: the device pool (node/devices.ts) feeds it measurements and applies the result.
 *
 * Repacking from scratch could move many models for a small gain, and every
 * move costs a cold load; a model's current device is therefore preferred
 * unless another is better by more than STICKINESS (5%).
 */

/** A device whose load is within this fraction of the best keeps the model it already holds. */
export const STICKINESS = 0.05;

export interface PlacementItem {
  model: string;
  /** Measured device-seconds of work since the last packing (any unit, the same for every model). */
  load: number;
  /** Bytes of its weights. */
  bytes: number;
  /** Distinct devices it goes on (capped at the device count). */
  replicas: number;
  /** Devices it is on now, if any. */
  current?: readonly number[];
}

export interface PlacementDevice {
  id: number;
  /** Weight budget in bytes (0: unknown, memory then balanced by bytes alone). */
  budget: number;
}

export interface Placement {
  /** Model -> the devices it is placed on. */
  devices: Map<string, number[]>;
  /** Per device: the compute load and weight bytes placed on it. */
  load: Map<number, number>;
  bytes: Map<number, number>;
  /** Devices whose placed weights exceed their budget: they will thrash. */
  oversubscribed: { device: number; bytes: number; budget: number }[];
}

export function pack(items: readonly PlacementItem[], devices: readonly PlacementDevice[]): Placement {
  const load = new Map(devices.map((d) => [d.id, 0]));
  const bytes = new Map(devices.map((d) => [d.id, 0]));
  const placed = new Map<string, number[]>();
  const totalLoad = items.reduce((s, i) => s + i.load, 0);
  const totalBytes = items.reduce((s, i) => s + i.bytes * Math.min(i.replicas, devices.length), 0);
  const evenLoad = totalLoad / devices.length;
  const evenBytes = totalBytes / devices.length;

  // One unit per replica, each carrying its share of the model's load; heaviest first.
  const units = items.flatMap((item) => {
    const n = Math.max(1, Math.min(item.replicas, devices.length));
    return Array.from({ length: n }, () => ({ item, load: item.load / n }));
  });
  units.sort((a, b) => b.load - a.load || b.item.bytes - a.item.bytes || a.item.model.localeCompare(b.item.model));

  const share = (d: PlacementDevice, addLoad: number, addBytes: number) => {
    const compute = evenLoad > 0 ? (load.get(d.id)! + addLoad) / evenLoad : 0;
    const memory = d.budget > 0 ? (bytes.get(d.id)! + addBytes) / d.budget : evenBytes > 0 ? (bytes.get(d.id)! + addBytes) / evenBytes : 0;
    return Math.max(compute, memory);
  };

  for (const { item, load: unitLoad } of units) {
    const taken = placed.get(item.model) ?? [];
    const candidates = devices.filter((d) => !taken.includes(d.id));
    let best = candidates[0];
    let bestScore = Infinity;
    for (const d of candidates) {
      const score = share(d, unitLoad, item.bytes);
      if (score < bestScore - 1e-12 || (Math.abs(score - bestScore) <= 1e-12 && load.get(d.id)! < load.get(best.id)!)) {
        best = d;
        bestScore = score;
      }
    }
    // Stay where it is unless moving is clearly better.
    const here = candidates.find((d) => item.current?.includes(d.id));
    if (here && here !== best && share(here, unitLoad, item.bytes) <= bestScore * (1 + STICKINESS)) best = here;
    placed.set(item.model, [...taken, best.id]);
    load.set(best.id, load.get(best.id)! + unitLoad);
    bytes.set(best.id, bytes.get(best.id)! + item.bytes);
  }

  const oversubscribed = devices
    .filter((d) => d.budget > 0 && bytes.get(d.id)! > d.budget)
    .map((d) => ({ device: d.id, bytes: bytes.get(d.id)!, budget: d.budget }));
  return { devices: placed, load, bytes, oversubscribed };
}
