/**
 * The main thread's handle on the compiler: one Piscina thread (worker.ts)
 * that compiles bundles into the compile cache, one model at a time, so that
 * no device actor's dispatch loop ever waits for a compile. A compile that
 * runs past the model load timeout is aborted (Piscina ends its thread and
 * starts another) and the load fails with that reason; a compile that fails
 * answers with the bundle's error.
 */
import type { Worker } from 'node:worker_threads';
import { Piscina } from 'piscina';
import type { CompiledModel, CompileResult, CompileTask, ReadyTask } from '../../shared/channels/compiler.js';
import { MODEL_LOAD_TIMEOUT_MS } from '../../shared/constants.js';
import { errors, fromErrorData } from '../../shared/errors.js';
import type { ModelSpec } from '../../shared/model-spec.js';

/** How long `close` waits for a thread still loading (it loads in well under a second). */
const COMPILER_LOAD_WAIT_MS = 10_000;

export class Compiler {
  readonly #pool: Piscina;
  readonly #cacheDir: string;
  readonly #timeoutMs: number;
  readonly #backend: 'cpu' | 'cuda';

  constructor(cacheDir: string, timeoutMs = MODEL_LOAD_TIMEOUT_MS, backend: 'cpu' | 'cuda' = 'cpu') {
    this.#cacheDir = cacheDir;
    this.#backend = backend;
    this.#timeoutMs = timeoutMs;
    // One thread: compiles are CPU-heavy, and on a small machine the cores belong to serving.
    this.#pool = new Piscina({ filename: new URL('./worker.js', import.meta.url).href, minThreads: 1, maxThreads: 1, idleTimeout: Infinity });
    this.#loaded = this.#pool.run({ type: 'ready' } satisfies ReadyTask).then(() => undefined, () => undefined);
  }

  /** Settles once the thread has loaded (or failed to): see ReadyTask. */
  readonly #loaded: Promise<void>;

  /**
   * Compile every ONNX file of `spec`; `inHostRam` lists the tensor keys the process holds already.
   * `repaired` says what damage in the cache was found and compiled again, for the log.
   */
  async compile(spec: ModelSpec, inHostRam: Iterable<string>): Promise<CompiledModel & { repaired: string[] }> {
    const task: CompileTask = { type: 'compile', model: spec.name, files: spec.executables.map((e) => e.path), cacheDir: this.#cacheDir, inHostRam: [...inHostRam], backend: this.#backend };
    // One timer per compile, cleared when it settles (AbortSignal.timeout would keep it pending).
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), this.#timeoutMs);
    let result: CompileResult;
    try {
      result = await this.#pool.run(task, { signal: abort.signal }) as CompileResult;
    } catch (err) {
      if (abort.signal.aborted) throw errors.bundleInvalid(spec.name, 'model.onnx', `compiling took longer than ${this.#timeoutMs} ms`);
      throw errors.bundleInvalid(spec.name, 'model.onnx', `the compiler failed: ${(err as Error).message}`);
    } finally {
      clearTimeout(timer);
    }
    if (result.type === 'compileFailed') throw fromErrorData(result.error);
    if (result.type === 'ready') throw errors.internal('the compiler answered a compile with ready');
    return { executables: result.executables, host: result.host, repaired: result.repaired };
  }

  /** The pool's threads, for their heap statistics (stowage_thread_heap_bytes). */
  get threads(): readonly Worker[] {
    return this.#pool.threads;
  }

  /**
   * End the thread. Not while it is still loading onnxruntime-node (ReadyTask: a server stopped
   * right after it started, as `bundle check` does with a refused bundle, aborted the process):
   * wait for that first, for at most COMPILER_LOAD_WAIT_MS (a thread busy compiling is past it).
   */
  async close(): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.#loaded, new Promise<void>((resolve) => { timer = setTimeout(resolve, COMPILER_LOAD_WAIT_MS); })]);
    clearTimeout(timer);
    await this.#pool.destroy();
  }
}
