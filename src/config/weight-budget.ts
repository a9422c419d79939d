/**
 * A device's weight budget, from the node file: the device's memory
 * (`runtime.cpu_device_memory_bytes` on backend cpu; on backend cuda the GPU's
 * free memory when the server starts), of which `mem_fraction`
 * is the pool, of which `weight_cache_fraction` is the weight arena, of which
 * `weight_cache_wiggle_fraction` is kept free. `weight_cache_fraction: 0`
 * turns the cache off.
 */
import type { WeightCacheInit } from '../shared/channels/device.js';
import { ARENA_ALIGNMENT, WEIGHT_THRASH_WINDOW_SECONDS } from '../shared/constants.js';
import type { RuntimeConfig, SchedulerConfig } from '../shared/config-schema.js';

/**
 * One device's weight cache, from its (worker's) runtime and scheduler blocks; null when off.
 * `fixedBytes` > 0 (backend cuda: runtime.cuda.weight_cache_bytes) is the budget itself, in place
 * of the fractions of the device's memory.
 */
export function weightCacheInit(r: RuntimeConfig, scheduler: SchedulerConfig, cacheDir: string, deviceMemoryBytes = r.cpu_device_memory_bytes, fixedBytes = 0): WeightCacheInit | null {
  if (r.weight_cache_fraction === 0) return null;
  const arena = fixedBytes > 0 ? fixedBytes : deviceMemoryBytes * r.mem_fraction * r.weight_cache_fraction * (1 - r.weight_cache_wiggle_fraction);
  return {
    // Rounded down to the arena's alignment: the arena's capacity is exactly the budget.
    budgetBytes: Math.floor(arena / ARENA_ALIGNMENT) * ARENA_ALIGNMENT,
    preallocate: r.preallocate,
    compactionInterval: scheduler.compaction_interval,
    cacheDir,
    thrashWindowSeconds: WEIGHT_THRASH_WINDOW_SECONDS,
    // auto: beside a GPU's runs (a copy engine of its own); not beside a CPU's (the same cores).
    uploadBesideExecution: r.upload_beside_execution === 'auto' ? r.backend === 'cuda' : r.upload_beside_execution,
  };
}
