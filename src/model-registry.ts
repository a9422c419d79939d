/**
 * The main thread's table of models: what the repository holds, the state of
 * each, and why a model is not ready. The codec and the metadata RPCs read
 * specs from here; only READY models are routed to a device.
 */
import { MODEL_VERSION } from './constants.js';
import { errors } from './errors.js';
import type { ModelSpec } from './bundle/model-spec.js';

/** Lifecycle of a model, in Triton's RepositoryIndex vocabulary. */
export enum ModelState {
  /** Sessions are being created on the device. */
  LOADING = 'LOADING',
  /** Serving requests. */
  READY = 'READY',
  /** Refused (bad bundle) or failed to load; `reason` says why. */
  UNAVAILABLE = 'UNAVAILABLE',
}

export interface ModelRecord {
  readonly name: string;
  state: ModelState;
  /** Absent when the manifest itself could not be parsed. */
  spec?: ModelSpec;
  /** Why the model is not ready; empty when READY. */
  reason: string;
}

interface Inflight {
  count: number;
  /** Resolved when count drops to zero (unload waits on it). */
  drained: (() => void)[];
}

export class ModelRegistry {
  #records = new Map<string, ModelRecord>();
  #inflight = new Map<string, Inflight>();

  set(record: ModelRecord): void {
    this.#records.set(record.name, record);
  }

  get(name: string): ModelRecord | undefined {
    return this.#records.get(name);
  }

  all(): ModelRecord[] {
    return [...this.#records.values()].sort((a, b) => a.name.localeCompare(b.name));
  }

  /** True once no model is still LOADING. */
  settled(): boolean {
    return this.all().every((r) => r.state !== ModelState.LOADING);
  }

  /** The record of a known model at a version we serve; NOT_FOUND otherwise. */
  find(name: string, version = ''): ModelRecord {
    const record = this.#records.get(name);
    if (!record) throw errors.modelNotFound(name, this.all().map((r) => r.name));
    if (version !== '' && version !== MODEL_VERSION) throw errors.modelVersionNotFound(name, version, [MODEL_VERSION]);
    return record;
  }

  /** The spec of a model that can serve now; NOT_FOUND or UNAVAILABLE otherwise. */
  ready(name: string, version = ''): ModelSpec {
    const record = this.find(name, version);
    if (record.state !== ModelState.READY || !record.spec) throw errors.modelNotReady(name, record.state, record.reason);
    return record.spec;
  }

  /**
   * Take a ready model's spec for one request; the caller must `release` it
   * when the request is answered, so that an unload can wait for it.
   */
  acquire(name: string, version = ''): ModelSpec {
    const spec = this.ready(name, version);
    let f = this.#inflight.get(name);
    if (!f) this.#inflight.set(name, (f = { count: 0, drained: [] }));
    f.count++;
    return spec;
  }

  release(name: string): void {
    const f = this.#inflight.get(name);
    if (!f) return;
    if (--f.count === 0) {
      this.#inflight.delete(name);
      for (const resolve of f.drained) resolve();
    }
  }

  /** Requests in flight per model. */
  pending(): Map<string, number> {
    return new Map([...this.#inflight].map(([name, f]) => [name, f.count]));
  }

  /** Resolves once no request holds the model. */
  drained(name: string): Promise<void> {
    const f = this.#inflight.get(name);
    if (!f) return Promise.resolve();
    return new Promise((resolve) => f.drained.push(resolve));
  }

  /** A model's spec for metadata: available even when not ready, as long as the manifest parsed. */
  described(name: string, version = ''): ModelSpec {
    const record = this.find(name, version);
    if (!record.spec) throw errors.modelNotReady(name, record.state, record.reason);
    return record.spec;
  }
}
