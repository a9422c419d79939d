/**
 * The hook pool on the main thread: a Piscina pool of threads that run bundles' model.js hooks,
 * in parallel with each other and with the device actor. Every call settles: with the hook's
 * tensors, with INTERNAL naming the model, the hook and what went wrong, or with
 * DEADLINE_EXCEEDED after `hooks.timeout_seconds` (Piscina then replaces the thread that ran it).
 * A call still waiting for a thread when its request is cancelled or passes its deadline is taken
 * out of the pool's queue and never runs: under a burst, the threads go to requests still wanted.
 */
import { availableParallelism } from 'node:os';
import { Piscina } from 'piscina';
import type { WireTensor } from '../../shared/channels/inference.js';
import type { HookBound, SubInfer } from '../../shared/request-path.js';
import type { BundleHooks } from '../../shared/model-spec.js';
import { MessageChannel, type MessagePort, type Worker } from 'node:worker_threads';
import { WORKER_YOUNG_GENERATION_MIB } from '../../shared/constants.js';
import { ERROR_CODES, errors, StowageError, type ErrorCode, toErrorData } from '../../shared/errors.js';
import { HOOK_NAMES, META_HOOK_NAMES, type HookPoolOptions, type HookAnswer, type HookCalls, type HookCallType, type HookContext, type HookFeed, type HookName, type HookStart, type HookTask, type SubCall, type SubCallReply } from '../../shared/channels/hooks.js';
import { after, nowMs } from '../../shared/timers.js';
import { HookStarts } from './hook-starts.js';

export type { SubInfer };

/**
 * Default pool size: half the cores (the device actor and the gRPC thread need the rest), but at
 * least two, so that one request's hook never waits behind another's thread hop: on 2 cores one
 * thread held the hooked convnet to 0.79x of the unhooked throughput, two reached 0.89x.
 */
export function defaultHookThreads(): number {
  return Math.max(2, Math.floor(availableParallelism() / 2));
}

/**
 * Each edge thread's share of `hooks.threads` (0: the default) for its own pool: the edges' pools
 * together hold about the threads one pool would (the kernel spreads connections, so hooked
 * requests, over the edges evenly), but each at least two, as the default pool: a meta model's run
 * hook holds its thread while its sub-calls run, and a sub-model's own hook needs another.
 */
export function edgeHookThreads(threads: number, edges: number): number {
  return Math.max(2, Math.ceil((threads > 0 ? threads : defaultHookThreads()) / edges));
}

/** A channel whose port2 goes with a run task: sub-calls arrive on port1 and are answered there. */
function serveSubCalls(subInfer: SubInfer): MessageChannel {
  const channel = new MessageChannel();
  channel.port1.on('message', (call: SubCall) => {
    subInfer(call.model, call.tensors, call.outputs).then((tensors) => {
      // A request's outputs are its own (shared/channels/inference.ts): they go on as they are.
      channel.port1.postMessage({ type: 'inferred', id: call.id, tensors } satisfies SubCallReply, [...new Set(tensors.map((t) => t.data.buffer as ArrayBuffer))]);
    }, (err: unknown) => {
      channel.port1.postMessage({ type: 'inferFailed', id: call.id, error: toErrorData(err) } satisfies SubCallReply);
    });
  });
  return channel;
}

export type { HookPoolOptions };

export class HookPool {
  readonly #pool: Piscina;
  readonly #timeoutMs: number;
  readonly #importTimeoutMs: number;
  /** When each call in flight began to run on its thread (the timeout counts from there). */
  readonly #starts = new HookStarts();

  constructor(options: HookPoolOptions) {
    const size = options.threads > 0 ? options.threads : defaultHookThreads();
    this.#pool = new Piscina({
      filename: new URL('./worker.js', import.meta.url).href,
      minThreads: size,
      maxThreads: size,
      idleTimeout: Infinity,
      // A hook that allocates without bound ends its own thread (ERR_WORKER_OUT_OF_MEMORY, which
      // fails its call; Piscina starts another), never the process.
      resourceLimits: { maxYoungGenerationSizeMb: WORKER_YOUNG_GENERATION_MIB, ...(options.maxHeapMib > 0 ? { maxOldGenerationSizeMb: options.maxHeapMib } : {}) },
    });
    this.#timeoutMs = options.timeoutMs;
    this.#importTimeoutMs = options.importTimeoutMs;
  }

  /**
   * Import a bundle's model.js and check its exports: only hooks (for a meta model, only run), and
   * only functions. An import that throws, exits its thread, runs out of memory or runs past
   * hooks.import_timeout_seconds refuses this bundle only (the thread is replaced).
   */
  async describe(model: string, file: string, version: string, meta = false): Promise<BundleHooks> {
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), this.#importTimeoutMs);
    const answer = await this.#call({ type: 'describe', file, version }, [], abort.signal).catch((err: Error) => {
      if (abort.signal.aborted) throw errors.bundleInvalid(model, 'model.js', `importing it took longer than hooks.import_timeout_seconds (${this.#importTimeoutMs / 1000}); its thread was replaced`);
      throw errors.bundleInvalid(model, 'model.js', `cannot be imported: ${err.message}`);
    }).finally(() => clearTimeout(timer));
    if (answer.type === 'hookFailed') throw errors.bundleInvalid(model, 'model.js', `cannot be imported: ${answer.message}`);
    const result = answer.reply;
    const allowed: readonly string[] = meta ? META_HOOK_NAMES : HOOK_NAMES;
    const what = meta ? 'a meta model\'s model.js exports only run' : `a model.js exports only ${HOOK_NAMES.join(' and ')}`;
    const hooks = { file, version, preprocess: false, postprocess: false, run: false };
    for (const { name, kind } of result.exports) {
      if (!allowed.includes(name)) throw errors.bundleInvalid(model, 'model.js', `exports ${JSON.stringify(name)}, which is not a hook; ${what}`);
      if (kind !== 'function') throw errors.bundleInvalid(model, 'model.js', `export ${JSON.stringify(name)} is a ${kind}, not a function`);
      hooks[name as HookName] = true;
    }
    if (!(hooks.preprocess || hooks.postprocess || hooks.run)) throw errors.bundleInvalid(model, 'model.js', `exports no hook (${allowed.join(', ')})`);
    return hooks;
  }

  /**
   * Run one hook on one request's tensors. Their buffers are transferred to the pool whole: every
   * buffer a request's tensors view belongs to that request (shared/channels/inference.ts), so
   * none is copied here, and the caller must not touch them afterwards.
   */
  async run(model: string, hook: HookName, hooks: BundleHooks, given: WireTensor[], context: HookContext, bound: HookBound, subInfer?: SubInfer): Promise<WireTensor[]> {
    const channel = subInfer ? serveSubCalls(subInfer) : undefined;
    try {
      const task: HookTask<'run'> = { type: 'run', hook, file: hooks.file, version: hooks.version, tensors: given, context, ...(channel ? { port: channel.port2, subCallTimeoutMs: this.#timeoutMs } : {}) };
      // A meta model's sub-call port goes with the task too.
      return (await this.#callHook(model, hook, task, channel ? [channel.port2] : [], bound)).tensors;
    } finally {
      channel?.port1.close();
    }
  }

  /**
   * Run a preprocess hook whose tensors go straight to the device (see HookFeed): resolves once
   * they are on their way, the device answers the request; with the thread's new door to that
   * device when it made one, which the caller hands to the device. Fails as `run` does, and when
   * the tensors are not the model's inputs.
   */
  async preprocessInto(model: string, hooks: BundleHooks, given: WireTensor[], context: HookContext, feed: HookFeed, bound: HookBound): Promise<MessagePort | undefined> {
    return (await this.#callHook(model, 'preprocess', { type: 'feed', file: hooks.file, version: hooks.version, tensors: given, context, feed }, [], bound)).door;
  }

  /**
   * Run a hook task within hooks.timeout_seconds of its start on a hook thread (hook-starts.ts: the
   * time it waits for a thread does not count): its reply, or the hook's failure as an error. While
   * it waits for a thread, its request's cancellation or deadline (`bound`) drops it.
   */
  async #callHook<K extends 'run' | 'feed'>(model: string, hook: HookName, task: HookTask<K>, ports: MessagePort[], bound: HookBound): Promise<HookCalls[K]['reply']> {
    if (bound.signal.aborted) throw errors.cancelled();
    const transfer = [...new Set(task.tensors.map((t) => t.data.buffer as ArrayBuffer))];
    const abort = new AbortController();
    const start = this.#starts.take();
    const handedAt = Date.now();
    const stopTimer = this.#timeLimit(start, handedAt, abort);
    // Dropped while queued: why, for its caller. A call already on its thread runs on (bounded by
    // the timeout), its answer unread; one with no start slot (all taken) cannot be told apart.
    let dropped: StowageError | undefined;
    const dropIfWaiting = (why: () => StowageError) => {
      if (abort.signal.aborted || !start || this.#starts.startedAt(start) !== 0) return;
      dropped = why();
      abort.abort();
    };
    const onCancel = () => dropIfWaiting(() => errors.cancelled());
    bound.signal.addEventListener('abort', onCancel, { once: true });
    const late = Number.isFinite(bound.deadlineMs)
      ? after(bound.deadlineMs - nowMs(), () => dropIfWaiting(() => errors.deadlineExceeded(model, Date.now() - handedAt, `it passed its deadline waiting for a hook thread for its ${hook} hook`)))
      : undefined;
    let answer: HookAnswer<K>;
    try {
      answer = await this.#call(start ? { ...task, start } : task, [...transfer, ...ports], abort.signal);
    } catch (err) {
      if (dropped) throw dropped;
      if (abort.signal.aborted) {
        throw new StowageError('STOWAGE_DEADLINE_EXCEEDED', `model ${JSON.stringify(model)}: ${hook} hook ran longer than hooks.timeout_seconds (${this.#timeoutMs / 1000}); its thread was replaced`);
      }
      throw errors.hookFailed(model, hook, (err as Error).message);
    } finally {
      stopTimer();
      late?.clear();
      bound.signal.removeEventListener('abort', onCancel);
      if (start) this.#starts.give(start);
    }
    if (answer.type === 'hookFailed') {
      // An unhandled sub-call failure keeps its status (a sub-model's NOT_FOUND stays NOT_FOUND).
      if (answer.code && answer.code in ERROR_CODES) throw new StowageError(answer.code as ErrorCode, `model ${JSON.stringify(model)}: the ${hook} hook in model.js failed: ${answer.message}`);
      throw errors.hookFailed(model, hook, answer.message);
    }
    return answer.reply;
  }

  /**
   * hooks.timeout_seconds for one call: `abort` once its hook has run that long on its thread; the
   * function that stops the timer. One timer per call, cleared when the call settles
   * (AbortSignal.timeout would leave every timer pending until it fires: thousands at a few
   * thousand requests a second). When it fires it looks at when the hook began, and waits on while
   * it is queued or has time left.
   */
  #timeLimit(start: HookStart | undefined, handedAt: number, abort: AbortController): () => void {
    let timer: NodeJS.Timeout;
    const check = () => {
      const began = start ? this.#starts.startedAt(start) : handedAt;
      const left = began === 0 ? this.#timeoutMs : began + this.#timeoutMs - Date.now();
      if (left > 0) timer = setTimeout(check, left);
      else abort.abort();
    };
    timer = setTimeout(check, this.#timeoutMs);
    return () => clearTimeout(timer);
  }

  /**
   * Post a task to the pool; its answer is the one its type gets (HookCalls), as the hook thread's handler for it
   * returns.
   */
  #call<K extends HookCallType>(task: HookTask<K>, transferList: (ArrayBuffer | MessagePort)[], signal: AbortSignal | undefined): Promise<HookAnswer<K>> {
    return this.#pool.run(task, { transferList: transferList as ArrayBuffer[], signal }) as Promise<HookAnswer<K>>;
  }

  /** The pool's threads, for their heap statistics (stowage_thread_heap_bytes). */
  get threads(): readonly Worker[] {
    return this.#pool.threads;
  }

  async close(): Promise<void> {
    await this.#pool.destroy();
  }
}
