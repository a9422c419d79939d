/**
 * The hook pool on the main thread: a Piscina pool of threads that run bundles' model.js hooks,
 * in parallel with each other and with the device actor. Every call settles: with the hook's
 * tensors, with INTERNAL naming the model, the hook and what went wrong, or with
 * DEADLINE_EXCEEDED after `hooks.timeout_seconds` (Piscina then replaces the thread that ran it).
 */
import { availableParallelism } from 'node:os';
import { Piscina } from 'piscina';
import type { WireTensor } from '../actors/messages.js';
import type { BundleHooks } from '../bundle/model-spec.js';
import { errors, StowageError } from '../errors.js';
import { HOOK_NAMES, type HookContext, type HookName, type HookResult, type HookTask } from './messages.js';

/**
 * Default pool size: half the cores (the device actor and the gRPC thread need the rest), but at
 * least two, so that one request's hook never waits behind another's thread hop: on 2 cores one
 * thread held the hooked convnet to 0.79x of the unhooked throughput, two reached 0.89x.
 */
export function defaultHookThreads(): number {
  return Math.max(2, Math.floor(availableParallelism() / 2));
}

export class HookPool {
  readonly #pool: Piscina;
  readonly #timeoutMs: number;

  constructor(threads: number, timeoutMs: number) {
    const size = threads > 0 ? threads : defaultHookThreads();
    this.#pool = new Piscina({
      filename: new URL('./hook-worker.js', import.meta.url).href,
      minThreads: size,
      maxThreads: size,
      idleTimeout: Infinity,
    });
    this.#timeoutMs = timeoutMs;
  }

  /** Import a bundle's model.js and check its exports: only hooks, and only functions. */
  async describe(model: string, file: string, version: string): Promise<BundleHooks> {
    const result = await this.#run({ type: 'describe', file, version }, [], undefined).catch((err: Error) => {
      throw errors.bundleInvalid(model, 'model.js', `cannot be imported: ${err.message}`);
    }) as Extract<HookResult, { type: 'described' }>;
    const hooks = { file, version, preprocess: false, postprocess: false };
    for (const { name, kind } of result.exports) {
      if (!(HOOK_NAMES as readonly string[]).includes(name)) {
        throw errors.bundleInvalid(model, 'model.js', `exports ${JSON.stringify(name)}, which is not a hook; a model.js exports only ${HOOK_NAMES.join(' and ')}`);
      }
      if (kind !== 'function') throw errors.bundleInvalid(model, 'model.js', `export ${JSON.stringify(name)} is a ${kind}, not a function`);
      hooks[name as HookName] = true;
    }
    if (!hooks.preprocess && !hooks.postprocess) throw errors.bundleInvalid(model, 'model.js', `exports no hook (${HOOK_NAMES.join(', ')})`);
    return hooks;
  }

  /**
   * Run one hook on one request's tensors. Their buffers are transferred to the pool; a tensor
   * that is a view of a buffer it shares (a request's rows of a coalesced batch) is copied first,
   * since a buffer can be transferred only once.
   */
  async run(model: string, hook: HookName, hooks: BundleHooks, given: WireTensor[], context: HookContext): Promise<WireTensor[]> {
    const tensors = given.map((t) => (t.data.byteOffset === 0 && t.data.byteLength === t.data.buffer.byteLength ? t : { ...t, data: t.data.slice() }));
    const transfer = [...new Set(tensors.map((t) => t.data.buffer as ArrayBuffer))];
    // One timer per call, cleared when the call settles (AbortSignal.timeout would leave every
    // timer pending until it fires: thousands at a few thousand requests a second).
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), this.#timeoutMs);
    let result: HookResult;
    try {
      result = await this.#run({ type: 'run', hook, file: hooks.file, version: hooks.version, tensors, context }, transfer, abort.signal);
    } catch (err) {
      if (abort.signal.aborted) {
        throw new StowageError('STOWAGE_DEADLINE_EXCEEDED', `model ${JSON.stringify(model)}: ${hook} hook ran longer than hooks.timeout_seconds (${this.#timeoutMs / 1000}); its thread was replaced`);
      }
      throw errors.hookFailed(model, hook, (err as Error).message);
    } finally {
      clearTimeout(timer);
    }
    if (result.type === 'hookFailed') throw errors.hookFailed(model, hook, result.message);
    return (result as Extract<HookResult, { type: 'ran' }>).tensors;
  }

  #run(task: HookTask, transferList: ArrayBuffer[], signal: AbortSignal | undefined): Promise<HookResult> {
    return this.#pool.run(task, { transferList, signal }) as Promise<HookResult>;
  }

  async close(): Promise<void> {
    await this.#pool.destroy();
  }
}
