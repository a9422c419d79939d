/**
 * A device's weight budget, from the node file: the device's memory
 * (`runtime.cpu_device_memory_bytes` on backend cpu), of which `mem_fraction`
 * is the pool, of which `weight_cache_fraction` is the weight arena, of which
 * `weight_cache_wiggle_fraction` is kept free. `weight_cache_fraction: 0`
 * turns the cache off.
 */
import type { WeightCacheInit } from '../actors/messages.js';
import { WEIGHT_THRASH_WINDOW_SECONDS } from '../constants.js';
import type { NodeConfig } from './schema.js';

export function weightCacheInit(config: NodeConfig): WeightCacheInit | null {
  const r = config.global.runtime;
  if (r.weight_cache_fraction === 0) return null;
  const arena = r.cpu_device_memory_bytes * r.mem_fraction * r.weight_cache_fraction;
  return {
    budgetBytes: Math.floor(arena * (1 - r.weight_cache_wiggle_fraction)),
    preallocate: r.preallocate,
    compactionInterval: config.global.scheduler.compaction_interval,
    cacheDir: config.cache_dir,
    thrashWindowSeconds: WEIGHT_THRASH_WINDOW_SECONDS,
  };
}
