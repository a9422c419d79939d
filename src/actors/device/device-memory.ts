/**
 * The device actor's memory, made once as its worker starts: the weight cache (an arena of the
 * budget's size and what is resident in it) and host pinning for copies to a GPU.
 *
 * On a GPU the arena is one cudaMalloc of the budget, made now, and the host copies of weights
 * and the staging of inputs are pinned, so that a cold load or an input copies at the bus's speed.
 */
import type { DeviceInit } from '../../shared/channels/device.js';
import type { InstanceKey } from '../../shared/model-spec.js';
import { allocateDeviceMemory } from '../../native/ort.js';
import { pinHost } from '../../native/cuda.js';
import { Arena } from './arena.js';
import { readTensor } from './sessions.js';
import { WeightCache } from './weight-cache.js';

/** Pins host memory for copies to the GPU; undefined where the platform refuses (copies then run at pageable speed). */
export type Pin = (view: ArrayBufferView | ArrayBuffer) => { release(): void } | undefined;

/**
 * Pin host memory, or go on without where the platform refuses it (some sandboxes do): `refused`
 * hears why, once; it is not a failure.
 */
export function pinOrNot(refused: (why: string) => void): Pin {
  let off = false;
  return (view) => {
    if (off) return undefined;
    try {
      return pinHost(view);
    } catch (err) {
      off = true;
      refused((err as Error).message);
      return undefined;
    }
  };
}

/**
 * The device's weight cache; null when the cache is off (`weights` null: every model keeps its weights in its
 * sessions).
 */
export function weightCacheOf(init: DeviceInit, pin: Pin): WeightCache<InstanceKey> | null {
  const { weights, cuda } = init;
  if (!weights) return null;
  const arena = cuda
    ? new Arena(weights.budgetBytes, { device: allocateDeviceMemory(weights.budgetBytes, `cuda:${cuda.ordinal}`) })
    : new Arena(weights.budgetBytes, { preallocate: weights.preallocate });
  return new WeightCache<InstanceKey>(arena, {
    readTensor,
    compactionInterval: weights.compactionInterval,
    thrashWindowMs: weights.thrashWindowSeconds * 1000,
    ...(cuda ? { pinHost: pin } : {}),
  });
}
