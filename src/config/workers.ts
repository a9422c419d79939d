/**
 * One configuration per device actor, from the node file: `workers:` when it
 * is there (one entry per device; its `runtime` and `scheduler` blocks merge
 * over `global`'s), else one worker per device of `gpus` (named worker0,
 * worker1, ...). The top-level `models:` map then pins each listed model to
 * device memory on the workers it names (`residency: device` there).
 *
 * A GPU may be driven by more than one actor (`gpus: [0, 0]`): each runs its
 * own sessions on its own thread, which keeps the GPU busy while the other's
 * thread is queueing, copying or waiting on the CPU side. Those actors split
 * the GPU's free memory between their weight budgets. An actor's deviceId is
 * its identity (placement, statistics, metrics, the control API): the GPU's
 * ordinal when every GPU has one actor, else the actor's position in the list.
 */
import type { WeightCacheInit } from '../shared/channels/device.js';
import { errors } from '../shared/errors.js';
import { weightCacheInit } from './weight-budget.js';
import type { ModelSchedulerConfig, NodeConfig, RuntimeConfig, SchedulerConfig } from '../shared/config-schema.js';

export interface ResolvedWorker {
  name: string;
  /** The actor's identity: unique among the workers (see above). */
  deviceId: number;
  /** The device it drives: a CUDA ordinal on backend cuda; on backend cpu the virtual device's number. */
  gpu: number;
  runtime: RuntimeConfig;
  scheduler: SchedulerConfig;
  /** Its weight cache (budget, compile cache); null when runtime.weight_cache_fraction is 0. */
  weights: WeightCacheInit | null;
}

/** The GPUs the server found (backend cuda): their CUDA ordinals and free memory at start. */
export interface FoundGpus {
  ordinals: number[];
  freeBytes(ordinal: number): number;
}

/** Device ids from gpus: auto is one device on the CPU backend, every GPU found on cuda. */
function gpuIds(gpus: NodeConfig['gpus'], found: FoundGpus | undefined, file: string): number[] {
  if (gpus === 'auto') return found ? [...found.ordinals] : [0];
  const ids = typeof gpus === 'number' ? Array.from({ length: gpus }, (_, i) => i) : [...gpus];
  const absent = found ? ids.filter((id) => !found.ordinals.includes(id)) : [];
  if (found && absent.length > 0) {
    throw errors.configInvalid(`${file}: gpus: ${JSON.stringify(gpus)} names GPU ${absent.join(', ')}, but this process sees ${found.ordinals.length} (CUDA ordinals ${found.ordinals.join(', ') || 'none'}; CUDA_VISIBLE_DEVICES=${process.env.CUDA_VISIBLE_DEVICES ?? 'unset'})`);
  }
  return ids;
}

/** Per-model settings: global's, the worker's over them, and `residency: device` for the models pinned here. */
function mergeModels(base: SchedulerConfig['models'], over: Readonly<Record<string, Partial<ModelSchedulerConfig>>> = {}, pinned: readonly string[] = []): Record<string, ModelSchedulerConfig> {
  const models: Record<string, ModelSchedulerConfig> = { ...base };
  for (const [name, o] of Object.entries(over)) models[name] = { ...(base[name] ?? { weight: 1 }), ...o };
  for (const name of pinned) models[name] = { ...(models[name] ?? { weight: 1 }), residency: 'device' };
  return models;
}

/**
 * Resolve every worker; `file` names the node file in errors. `found`: the GPUs the server found
 * (backend cuda, at start); without it (checking the file) a GPU's memory is not known yet.
 */
export function resolveWorkers(config: NodeConfig, file = 'node file', found?: FoundGpus): ResolvedWorker[] {
  const { runtime, scheduler } = config.global;
  const entries = config.workers ?? gpuIds(config.gpus, found, file).map((gpu, i) => ({ name: `worker${i}`, gpu }));
  const names = entries.map((w) => w.name);
  const pins = new Map<string, string[]>();
  for (const [model, listed] of Object.entries(config.models)) {
    for (const name of listed) {
      if (!names.includes(name)) throw errors.configInvalid(`${file}: models.${model}: no worker named ${JSON.stringify(name)}; workers: ${names.join(', ')}`);
      pins.set(name, [...(pins.get(name) ?? []), model]);
    }
  }
  const gpus = entries.map((w: NonNullable<NodeConfig['workers']>[number], i) => w.gpu ?? i);
  const shared = new Set(gpus).size < gpus.length;
  const sharers = (gpu: number) => gpus.filter((g) => g === gpu).length;
  const workers: ResolvedWorker[] = entries.map((w: NonNullable<NodeConfig['workers']>[number], i) => {
    const merged = { runtime: { ...runtime, ...w.runtime, cuda: { ...runtime.cuda, ...w.runtime?.cuda } }, scheduler: { ...scheduler, ...w.scheduler, models: mergeModels(scheduler.models, w.scheduler?.models, pins.get(w.name)) } };
    const gpu = gpus[i];
    if (found && !found.ordinals.includes(gpu)) {
      throw errors.configInvalid(`${file}: workers.${w.name}: gpu ${gpu} is not among the GPUs this process sees (CUDA ordinals ${found.ordinals.join(', ') || 'none'})`);
    }
    // Actors on one GPU share its free memory; each virtual CPU device has memory of its own.
    const memory = found ? Math.floor(found.freeBytes(gpu) / sharers(gpu)) : merged.runtime.cpu_device_memory_bytes;
    const fixed = found ? merged.runtime.cuda.weight_cache_bytes : 0;
    if (fixed > memory) {
      const share = sharers(gpu) > 1 ? ` shared by the ${sharers(gpu)} actors driving it (${memory} bytes each)` : ` (${memory} bytes)`;
      throw errors.configInvalid(`${file}: runtime.cuda.weight_cache_bytes: ${fixed} is more than GPU ${gpu}'s free memory${share}`);
    }
    return { name: w.name, deviceId: shared ? i : gpu, gpu, ...merged, weights: weightCacheInit(merged.runtime, merged.scheduler, config.cache_dir, memory, fixed) };
  });

  const seen = new Set<string>();
  for (const w of workers) {
    if (seen.has(w.name)) throw errors.configInvalid(`${file}: workers: the name ${JSON.stringify(w.name)} is used twice; each worker needs a name of its own`);
    seen.add(w.name);
    if (w.runtime.backend !== runtime.backend) {
      throw errors.configInvalid(`${file}: workers.${w.name}.runtime.backend: ${JSON.stringify(w.runtime.backend)} differs from global.runtime.backend ${JSON.stringify(runtime.backend)}; one process runs one backend`);
    }
    if (w.runtime.thread_pool !== runtime.thread_pool) {
      throw errors.configInvalid(`${file}: workers.${w.name}.runtime.thread_pool: ${JSON.stringify(w.runtime.thread_pool)} differs from global.runtime.thread_pool ${JSON.stringify(runtime.thread_pool)}; one process has one ONNX Runtime`);
    }
  }
  return workers;
}
