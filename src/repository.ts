/**
 * The model repository on the main thread: turns bundles on disk into models
 * on the device. Start-up loads every bundle; RepositoryModelLoad and
 * RepositoryModelUnload load, reload or unload one (the default
 * model-control behaviour: act at once). A failing bundle is recorded
 * UNAVAILABLE with its reason and never stops the others.
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import type { Logger } from 'pino';
import type { DeviceActor } from './actors/device-actor.js';
import { MANIFEST_FILE, readManifest } from './bundle/manifest.js';
import type { ModelSpec } from './bundle/model-spec.js';
import { scanRepository } from './bundle/repository.js';
import { errors } from './errors.js';
import { ModelState, type ModelRegistry } from './model-registry.js';

export class ModelRepository {
  readonly #dir: string;
  readonly #registry: ModelRegistry;
  readonly #device: DeviceActor;
  readonly #logger: Logger;

  readonly #onLoaded: (model: string, loadMs: number) => void;

  constructor(dir: string, registry: ModelRegistry, device: DeviceActor, logger: Logger,
    onLoaded: (model: string, loadMs: number) => void = () => undefined) {
    this.#onLoaded = onLoaded;
    this.#dir = dir;
    this.#registry = registry;
    this.#device = device;
    this.#logger = logger;
  }

  /** Start-up: every bundle of the repository, one after the other, with progress in the log. */
  async loadAll(): Promise<void> {
    const bundles = scanRepository(this.#dir);
    this.#logger.info({ model_repo: this.#dir, bundles: bundles.length }, 'loading the model repository');
    for (const b of bundles) {
      this.#registry.set({ name: b.name, state: b.error ? ModelState.UNAVAILABLE : ModelState.LOADING, spec: b.spec, reason: b.error?.message ?? '' });
      if (b.error) this.#logger.error({ model: b.name }, `bundle refused: ${b.error.message}`);
    }
    for (const [i, b] of bundles.entries()) {
      if (b.spec) await this.#loadSpec(b.name, b.spec, `${i + 1}/${bundles.length}`).catch(() => undefined);
    }
  }

  /** Load (or reload) one bundle from disk; rejects with the reason the bundle was refused. */
  async load(name: string): Promise<void> {
    const dir = path.join(this.#dir, name);
    if (name === '' || name.includes('/') || name.startsWith('.') || !existsSync(path.join(dir, MANIFEST_FILE))) {
      throw errors.modelNotFound(name, this.#registry.all().map((r) => r.name));
    }
    let spec: ModelSpec;
    try {
      spec = readManifest(dir);
    } catch (err) {
      this.#registry.set({ name, state: ModelState.UNAVAILABLE, reason: (err as Error).message });
      this.#logger.error({ model: name }, `bundle refused: ${(err as Error).message}`);
      throw err;
    }
    const current = this.#registry.get(name);
    // A reload keeps serving the loaded version until the new one is ready.
    if (current?.state !== ModelState.READY) this.#registry.set({ name, state: ModelState.LOADING, spec, reason: '' });
    await this.#loadSpec(name, spec, 'on request');
  }

  /** Stop routing new requests to the model, let its in-flight requests finish, then free it on the device. */
  async unload(name: string): Promise<void> {
    const record = this.#registry.find(name);
    this.#registry.set({ ...record, state: ModelState.UNAVAILABLE, reason: 'unloaded' });
    await this.#registry.drained(name);
    await this.#device.unload(name);
    this.#logger.info({ model: name }, 'model unloaded');
  }

  async #loadSpec(name: string, spec: ModelSpec, progress: string): Promise<void> {
    try {
      const { loadMs } = await this.#device.load(spec);
      this.#registry.set({ name, state: ModelState.READY, spec, reason: '' });
      this.#onLoaded(name, loadMs);
      this.#logger.info({ model: name, load_ms: Math.round(loadMs), progress }, 'model loaded');
    } catch (err) {
      const reason = (err as Error).message;
      const current = this.#registry.get(name);
      // A failed reload leaves the version that was serving in place.
      if (current?.state !== ModelState.READY) this.#registry.set({ name, state: ModelState.UNAVAILABLE, spec, reason });
      this.#logger.error({ model: name }, `bundle refused: ${reason}`);
      throw err;
    }
  }
}
