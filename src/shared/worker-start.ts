/**
 * Starting an actor's worker thread, as every supervisor does it (the device actors'
 * handle, actors/device/handle.ts, and the edge threads', actors/edge/handle.ts): spawn it with
 * the young generation every worker gets, hand its messages to the supervisor, and settle its
 * start exactly once:
 *
 * - it says it has started (the supervisor recognises the message and calls `markStarted`);
 * - it does not within `startTimeoutMs` (times STOWAGE_START_TIMEOUT_SCALE, below): `onStartTimeout`
 *   makes the error from the limit used (and fails whatever was sent to it meanwhile), and the worker
 *   is terminated;
 * - it exits first: `exitedBeforeStart` makes the error, from its exit code and the last error it
 *   reported.
 *
 * Every exit is told to `onExit` with whether it had started: a crash after its start is the
 * supervisor's to handle (a restart, or not); its own generation guards are its own too.
 */
import { Worker } from 'node:worker_threads';
import { WORKER_YOUNG_GENERATION_MIB } from './constants.js';

/**
 * Every worker's start limit times STOWAGE_START_TIMEOUT_SCALE, when that is a number above 0
 * (anything else: 1), and at least 1 ms. One knob for every kind of worker (device, edge,
 * placement): a server run ~50x slower than it is, under valgrind (bench/instructions.js), needs
 * all of them longer, not one (its device worker missed 30 s beside a busy machine).
 */
export function scaledStartTimeoutMs(ms: number, env: NodeJS.ProcessEnv = process.env): number {
  const value = env.STOWAGE_START_TIMEOUT_SCALE;
  const scale = Number(value);
  const valid = value !== undefined && value.trim() !== '' && Number.isFinite(scale) && scale > 0;
  return Math.max(1, Math.round(ms * (valid ? scale : 1)));
}

export interface WorkerStart<M, S> {
  url: URL;
  /** The thread's name (device-0, edge-1): in heap metrics and debuggers. */
  name: string;
  workerData: unknown;
  /** Its young generation's size; default WORKER_YOUNG_GENERATION_MIB. */
  youngGenerationMib?: number;
  /** Its start limit before STOWAGE_START_TIMEOUT_SCALE (scaledStartTimeoutMs). */
  startTimeoutMs: number;
  /** Every message it sends; `markStarted` settles the start with what the start message carried. */
  onMessage: (msg: M, markStarted: (value: S) => void) => void;
  /** It did not start within `limitMs` (the limit used, scaled): the error its start fails with. */
  onStartTimeout: (limitMs: number) => Error;
  /** It exited before it started: the error its start fails with. */
  exitedBeforeStart: (code: number, lastError: Error | undefined) => Error;
  /** It exited (after its start, or before: then its start has failed already). */
  onExit: (code: number, lastError: Error | undefined, started: boolean) => void;
}

/** Spawn the worker; `started` settles once, as the header says. */
export function startWorker<M, S>(o: WorkerStart<M, S>): { worker: Worker; started: Promise<S> } {
  const worker = new Worker(o.url, {
    workerData: o.workerData,
    name: o.name,
    resourceLimits: { maxYoungGenerationSizeMb: o.youngGenerationMib ?? WORKER_YOUNG_GENERATION_MIB },
  });
  let lastError: Error | undefined;
  let started = false;
  const limitMs = scaledStartTimeoutMs(o.startTimeoutMs);
  const start = new Promise<S>((resolve, reject) => {
    const timer = setTimeout(() => {
      reject(o.onStartTimeout(limitMs));
      void worker.terminate();
    }, limitMs);
    const markStarted = (value: S) => {
      if (started) return;
      started = true;
      clearTimeout(timer);
      resolve(value);
    };
    worker.on('message', (msg: M) => o.onMessage(msg, markStarted));
    worker.on('error', (err) => {
      lastError = err;
    });
    worker.on('messageerror', (err) => {
      lastError = err;
    });
    worker.on('exit', (code) => {
      clearTimeout(timer);
      if (!started) reject(o.exitedBeforeStart(code, lastError));
      o.onExit(code, lastError, started);
    });
  });
  return { worker, started: start };
}
