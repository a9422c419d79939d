/**
 * The one owner of every model's run-time policy (main thread): its weight
 * under fair scheduling, its batch cap and where its weights live at rest.
 *
 * A policy starts as the node file's `scheduler.models.<name>` for each worker
 * (global's, the worker's block over it, `models:` pins as residency device)
 * and SetModelPolicy / SetModelResidency change it for every device at once.
 * Nothing else keeps a copy: each load a device handle sends carries the
 * policy as it stands (so a replacement worker reloading after a crash gets
 * the current one), a change is pushed to the loaded instances by the
 * gateway, and ModelConfig and ModelControlStatus read it here.
 */
import type { ModelPolicy, ModelPolicyUpdate, Residency } from '../shared/channels/device.js';
import type { ModelSchedulerConfig } from '../shared/config-schema.js';

/** Run-time changes to one model, on top of the node file; absent fields keep the file's value. */
export type PolicyChange = ModelPolicyUpdate & { residency?: Residency };

export class ModelPolicies {
  /** Each device's scheduler.models, as its worker resolved it from the node file. */
  readonly #configured: Map<number, Readonly<Record<string, ModelSchedulerConfig>>>;
  readonly #changed = new Map<string, PolicyChange>();

  constructor(workers: Iterable<{ deviceId: number; models: Readonly<Record<string, ModelSchedulerConfig>> }>) {
    this.#configured = new Map([...workers].map((w) => [w.deviceId, w.models]));
  }

  /** `model`'s policy on `deviceId` now: the node file's for that worker, run-time changes over it. */
  of(deviceId: number, model: string): ModelPolicy {
    const file = this.#configured.get(deviceId)?.[model];
    const changed = this.#changed.get(model);
    const maxBatchSize = changed?.maxBatchSize ?? file?.max_batch_size;
    return {
      weight: changed?.weight ?? file?.weight ?? 1,
      ...(maxBatchSize === undefined ? {} : { maxBatchSize }),
      residency: changed?.residency ?? file?.residency ?? 'system',
      ...(file?.priority === undefined ? {} : { priority: file.priority }),
      ...(file?.warmup === undefined ? {} : { warmup: file.warmup }),
      ...(file?.tf32 === undefined ? {} : { tf32: file.tf32 }),
    };
  }

  /**
   * The batch cap ModelConfig reports: the smallest over the devices, since a request may run on
   * any of them; undefined when no device caps the model (its compiled sizes are the limit).
   */
  maxBatchSize(model: string): number | undefined {
    const caps = [...this.#configured.keys()].map((d) => this.of(d, model).maxBatchSize).filter((c) => c !== undefined);
    return caps.length ? Math.min(...caps) : undefined;
  }

  /** The level of `model`'s requests that name none, where the node file sets it (the first device's). */
  priority(model: string): number | undefined {
    for (const models of this.#configured.values()) if (models[model]?.priority !== undefined) return models[model].priority;
    return undefined;
  }

  /** Change `model` on every device; returns what was changed before, for `restore`. */
  change(model: string, change: PolicyChange): PolicyChange | undefined {
    const before = this.#changed.get(model);
    this.#changed.set(model, { ...before, ...change });
    return before;
  }

  /** Put back the run-time changes `change` returned (a change the devices refused). */
  restore(model: string, before: PolicyChange | undefined): void {
    if (before) this.#changed.set(model, before);
    else this.#changed.delete(model);
  }
}
