/**
 * The model repository on the main thread: turns bundles on disk into models on the device.
 *
 * - Start-up loads every bundle (`static`, `dynamic`), or none (`explicit`: they are listed
 *   UNAVAILABLE until RepositoryModelLoad asks); `models_include`, when set, limits the set.
 * - `load` loads a model, or reloads it: the new version loads beside the old under a new instance
 *   key and the registry switches to it at once; requests in flight finish on the old version,
 *   which is unloaded when they are done. A version that fails to load leaves the old one serving.
 * - `unload` stops routing new requests, waits for those in flight, then frees the sessions.
 * - `sync` (dynamic mode: the watcher calls it) compares the bundles on disk with what it saw:
 *   new bundles load, changed ones reload, removed ones are unloaded and forgotten (NOT_FOUND).
 *
 * Operations on one model run one at a time, in the order asked.
 */
import { existsSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import type { Logger } from 'pino';
import type { Devices } from './devices.js';
import { MANIFEST_FILE, readManifest, WARMUP_DIR } from '../bundle/manifest.js';
import { instanceKey, type InstanceKey, type ModelSpec } from '../shared/model-spec.js';
import { scanRepository } from '../bundle/scan.js';
import { errors } from '../shared/errors.js';
import type { HookPool } from '../actors/hooks/handle.js';
import { ModelState, type ModelRegistry } from './model-registry.js';

export type ModelControlMode = 'dynamic' | 'static' | 'explicit';

export interface RepositoryOptions {
  dir: string;
  mode: ModelControlMode;
  /** Only these models (empty: every bundle). */
  include: readonly string[];
  registry: ModelRegistry;
  /** Loads and unloads go to every device. */
  devices: Pick<Devices, 'load' | 'unload'>;
  /** The fewest scheduler.priority_levels of any device: a manifest's scheduling.priority must be within them. */
  priorityLevels: number;
  hooks: HookPool;
  logger: Logger;
  onLoaded?: (model: string, loadMs: number) => void;
}

/** What changes when a bundle changes: its manifest, executables and hooks, by size and mtime. */
function fingerprint(dir: string): string {
  try {
    // warmup/: the files manifest warmup.data names (the only place it may name them).
    const warmup = existsSync(path.join(dir, WARMUP_DIR)) ? readdirSync(path.join(dir, WARMUP_DIR)).map((f) => `${WARMUP_DIR}/${f}`) : [];
    return [...readdirSync(dir), ...warmup]
      .filter((f) => f === MANIFEST_FILE || f.endsWith('.onnx') || f === 'model.js' || f.startsWith(`${WARMUP_DIR}/`))
      .sort()
      .map((f) => {
        const st = statSync(path.join(dir, f));
        return `${f}:${st.size}:${st.mtimeMs}`;
      })
      .join('|');
  } catch {
    return '';
  }
}

export class ModelRepository {
  readonly #o: RepositoryOptions;
  #generation = 0;
  /** Per model, the tail of its chain of operations. */
  readonly #chains = new Map<string, Promise<unknown>>();
  /** Bundle fingerprints as last acted on (dynamic mode). */
  readonly #seen = new Map<string, string>();
  /** Why the repository directory could not be read at the last look, while it cannot. */
  #unreadable: string | undefined;

  constructor(options: RepositoryOptions) {
    this.#o = options;
  }

  get mode(): ModelControlMode {
    return this.#o.mode;
  }

  #included(name: string): boolean {
    return this.#o.include.length === 0 || this.#o.include.includes(name);
  }

  /** Run `op` after every earlier operation on `name`; a failure does not stop the chain. */
  #serial<T>(name: string, op: () => Promise<T>): Promise<T> {
    const run = (this.#chains.get(name) ?? Promise.resolve()).catch(() => undefined).then(op);
    this.#chains.set(name, run);
    return run;
  }

  /** Start-up: every bundle of the repository, one after the other, with progress in the log. */
  async loadAll(): Promise<void> {
    const bundles = scanRepository(this.#o.dir).filter((b) => this.#included(b.name));
    this.#o.logger.info({ model_repo: this.#o.dir, bundles: bundles.length, model_control_mode: this.#o.mode }, 'loading the model repository');
    for (const b of bundles) {
      this.#seen.set(b.name, fingerprint(b.dir));
      if (b.error) {
        this.#o.registry.set({ name: b.name, state: ModelState.UNAVAILABLE, reason: b.error.message });
        this.#o.logger.error({ model: b.name }, `bundle refused: ${b.error.message}`);
      } else if (this.#o.mode === 'explicit') {
        this.#o.registry.set({ name: b.name, state: ModelState.UNAVAILABLE, spec: b.spec, reason: 'not loaded: model_control_mode is explicit' });
      } else {
        this.#o.registry.set({ name: b.name, state: ModelState.LOADING, spec: b.spec, reason: '' });
      }
    }
    if (this.#o.mode === 'explicit') return;
    for (const [i, b] of bundles.entries()) {
      if (b.spec) await this.#serial(b.name, () => this.#loadSpec(b.name, b.spec, `${i + 1}/${bundles.length}`)).catch(() => undefined);
    }
  }

  /** Load, or reload, one bundle from disk; rejects with the reason it was refused. */
  load(name: string): Promise<void> {
    return this.#serial(name, async () => {
      const dir = path.join(this.#o.dir, name);
      if (name === '' || name.includes('/') || name.startsWith('.') || !this.#included(name) || !existsSync(path.join(dir, MANIFEST_FILE))) {
        throw errors.modelNotFound(name, this.#o.registry.all().map((r) => r.name));
      }
      this.#seen.set(name, fingerprint(dir));
      let spec: ModelSpec;
      try {
        spec = readManifest(dir);
      } catch (err) {
        this.#refused(name, undefined, err as Error);
        throw err;
      }
      if (this.#o.registry.get(name)?.state !== ModelState.READY) {
        this.#o.registry.set({ name, state: ModelState.LOADING, spec, reason: '' });
      }
      await this.#loadSpec(name, spec, 'on request');
    });
  }

  /**
   * No device holds `instance` any more (every device's replacement worker failed to load it
   * again): if it is still the version serving the model, the model is not ready, saying why,
   * until a load (RepositoryModelLoad, or a change to its bundle in dynamic mode) brings it back.
   */
  lost(name: string, instance: InstanceKey, why: string): Promise<void> {
    return this.#serial(name, async () => {
      const record = this.#o.registry.get(name);
      if (record?.instance !== instance || record.state !== ModelState.READY) return;
      const again = { static: 'restart the server to load it again (model_control_mode is static)', explicit: 'load it again with RepositoryModelLoad', dynamic: 'load it again with RepositoryModelLoad, or change its bundle' }[this.#o.mode];
      const reason = `${why}; ${again}`;
      this.#o.registry.set({ name, state: ModelState.UNAVAILABLE, spec: record.spec, reason });
      this.#o.logger.error({ model: name, instance }, `model not ready: ${reason}`);
    });
  }

  /** Stop routing new requests to the model, let its in-flight requests finish, free it on the device. */
  unload(name: string): Promise<void> {
    return this.#serial(name, () => this.#unload(name, false));
  }

  /**
   * Dynamic mode: act on what changed on disk since the last look. A repository directory that is
   * gone or unreadable (a dropped mount, a deploy swapping it) says nothing about its bundles: the
   * loaded models keep serving, and the look after it is back acts on what changed meanwhile.
   */
  async sync(): Promise<void> {
    let entries;
    try {
      entries = readdirSync(this.#o.dir, { withFileTypes: true });
    } catch (err) {
      const why = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
      if (this.#unreadable !== why) {
        this.#o.logger.error({ model_repo: this.#o.dir, err: why, loaded: this.#seen.size },
          `model_repo cannot be read (${why}): the loaded models keep serving until it is back`);
      } else {
        this.#o.logger.debug({ model_repo: this.#o.dir, err: why }, 'model_repo still cannot be read');
      }
      this.#unreadable = why;
      return;
    }
    if (this.#unreadable) this.#o.logger.info({ model_repo: this.#o.dir }, 'model_repo can be read again: acting on what changed');
    this.#unreadable = undefined;
    const onDisk = new Map<string, string>();
    for (const entry of entries) {
      if (!entry.isDirectory() || entry.name.startsWith('.') || !this.#included(entry.name)) continue;
      const dir = path.join(this.#o.dir, entry.name);
      if (existsSync(path.join(dir, MANIFEST_FILE))) onDisk.set(entry.name, fingerprint(dir));
    }
    const work: Promise<unknown>[] = [];
    for (const [name, print] of onDisk) {
      if (this.#seen.get(name) === print) continue;
      this.#o.logger.info({ model: name }, this.#seen.has(name) ? 'bundle changed on disk: reloading' : 'new bundle on disk: loading');
      work.push(this.load(name).catch(() => undefined)); // a failure is logged and recorded
    }
    for (const name of [...this.#seen.keys()]) {
      if (onDisk.has(name)) continue;
      this.#seen.delete(name);
      this.#o.logger.info({ model: name }, 'bundle removed from disk: unloading');
      work.push(this.#serial(name, () => this.#unload(name, true)).catch(() => undefined));
    }
    await Promise.all(work);
  }

  async #unload(name: string, forget: boolean): Promise<void> {
    const record = this.#o.registry.find(name);
    const instance = record.instance;
    this.#o.registry.set({ ...record, state: ModelState.UNLOADING, reason: forget ? 'its bundle was removed' : 'unloading' });
    this.#o.logger.info({ model: name, inflight: instance ? this.#o.registry.pending().get(name) ?? 0 : 0 }, 'model unloading: new requests are refused, those in flight finish');
    if (instance) {
      await this.#o.registry.drained(instance);
      if (record.spec?.kind !== 'meta') await this.#o.devices.unload(instance);
    }
    if (forget) this.#o.registry.delete(name);
    else this.#o.registry.set({ name, state: ModelState.UNAVAILABLE, spec: record.spec, reason: 'unloaded' });
    this.#o.logger.info({ model: name }, forget ? 'model removed' : 'model unloaded');
  }

  /** Load one version; on success switch the model to it and retire the version it replaces. */
  async #loadSpec(name: string, parsed: ModelSpec, progress: string): Promise<void> {
    const instance = instanceKey(name, ++this.#generation);
    let loadMs: number;
    let session: string | undefined;
    let spec = parsed;
    try {
      const started = performance.now();
      if (parsed.priority !== undefined && parsed.priority > this.#o.priorityLevels) {
        throw errors.bundleInvalid(name, MANIFEST_FILE, `scheduling.priority ${parsed.priority} is above this node's scheduler.priority_levels ${this.#o.priorityLevels}: give 1 (the highest) to ${this.#o.priorityLevels}, or raise priority_levels in the node file`);
      }
      spec = await this.#withHooks(parsed);
      // A meta model has no executable: its instance exists only in the registry.
      ({ loadMs, session } = spec.kind === 'meta' ? { loadMs: performance.now() - started, session: undefined } : await this.#o.devices.load(spec, instance));
    } catch (err) {
      this.#refused(name, spec, err as Error);
      throw err;
    }
    const previous = this.#o.registry.get(name);
    const old = previous?.instance;
    this.#o.registry.set({ name, state: ModelState.READY, spec, instance, reason: '' });
    this.#o.onLoaded?.(name, loadMs);
    this.#o.logger.info({ model: name, instance, load_ms: Math.round(loadMs), progress, ...(session === undefined ? {} : { session }) }, old ? 'model reloaded' : 'model loaded');
    if (old) {
      // Requests that took the old version finish on it; then it goes.
      await this.#o.registry.drained(old);
      if (previous?.spec?.kind !== 'meta') await this.#o.devices.unload(old);
    }
  }

  /** The bundle's model.js, checked by the hook pool, and the client tensors it declares hooks for. */
  async #withHooks(spec: ModelSpec): Promise<ModelSpec> {
    const file = path.join(spec.dir, 'model.js');
    if (spec.kind === 'meta') {
      for (const sub of spec.subModels) {
        if (!this.#included(sub) || !existsSync(path.join(this.#o.dir, sub, MANIFEST_FILE))) {
          throw errors.bundleInvalid(spec.name, 'manifest.yaml', `models lists ${JSON.stringify(sub)}, which is not a bundle of this repository`);
        }
      }
      const st = statSync(file);
      const hooks = await this.#o.hooks.describe(spec.name, file, `${st.size}-${st.mtimeMs}`, true);
      if (!hooks.run) throw errors.bundleInvalid(spec.name, 'model.js', 'a meta model\'s model.js exports run');
      return { ...spec, hooks };
    }
    const declared = (key: 'inputs' | 'outputs') => spec[key === 'inputs' ? 'clientInputs' : 'clientOutputs'] !== spec[key];
    if (!existsSync(file)) {
      for (const [key, hook] of [['inputs', 'preprocess'], ['outputs', 'postprocess']] as const) {
        if (declared(key)) throw errors.bundleInvalid(spec.name, 'manifest.yaml', `client_${key} needs a ${hook} hook in model.js, and the bundle has no model.js`);
      }
      return spec;
    }
    const st = statSync(file);
    const hooks = await this.#o.hooks.describe(spec.name, file, `${st.size}-${st.mtimeMs}`);
    for (const [key, hook] of [['inputs', 'preprocess'], ['outputs', 'postprocess']] as const) {
      if (declared(key) && !hooks[hook]) throw errors.bundleInvalid(spec.name, 'model.js', `manifest.yaml declares client_${key}, but model.js exports no ${hook}`);
    }
    return { ...spec, hooks };
  }

  /** A version failed: a serving model keeps serving (the reason says the reload failed); otherwise UNAVAILABLE. */
  #refused(name: string, spec: ModelSpec | undefined, err: Error): void {
    const current = this.#o.registry.get(name);
    if (current?.state === ModelState.READY) {
      this.#o.registry.set({ ...current, reason: `reload failed, still serving the loaded version: ${err.message}` });
      this.#o.logger.error({ model: name }, `reload refused, the loaded version keeps serving: ${err.message}`);
    } else {
      this.#o.registry.set({ name, state: ModelState.UNAVAILABLE, spec, reason: err.message });
      this.#o.logger.error({ model: name }, `bundle refused: ${err.message}`);
    }
  }
}
