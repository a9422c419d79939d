/**
 * The main thread's handle on a pooled gateway's placement thread (worker.ts): it starts the
 * thread, passes each check's two halves to it (`read` as the check starts, `place` once the
 * health probes are done), and keeps `routes`, the copy of the placement thread's routes that the
 * proxy reads per request, fed with what changed. A node's served models and a node to drain come
 * back to the gateway through `onServed` and `onSuperseded`.
 *
 * A placement thread that crashes is replaced at the next check, which places every model anew as
 * a restarted gateway does; meanwhile requests keep the routes they had. Its first routes replace
 * the copy whole.
 */
import type { Worker } from 'node:worker_threads';
import type { Logger } from 'pino';
import type { FromPlacement, PlacementMember, PlacementStart, ToPlacement } from './channel.js';
import { errors } from '../../shared/errors.js';
import { startWorker } from '../../shared/worker-start.js';
import { PlacedRoutes } from '../placed-routes.js';

const WORKER_URL = new URL('./worker.js', import.meta.url);
/** It loads the protos and prom-client, nothing heavy. */
const PLACEMENT_START_TIMEOUT_MS = 30_000;
/**
 * A check at 10,000 models makes a table of every model and a placement of it, all garbage by the
 * next check: a young generation larger than the other threads' 16 MiB, so that it dies young. Not
 * measured apart: bench/gateway-checks.js's figures for the thread (79-89 ms a check) ran with it.
 */
const PLACEMENT_YOUNG_GENERATION_MIB = 64;

export interface PlacementHooks {
  logger: Logger;
  /** The models the node at `address` serves ready changed. */
  onServed: (address: string, models: string[]) => void;
  /** Two addresses report one node name: `older` should drain. */
  onSuperseded: (older: string, newer: string) => void;
}

export class PlacementThread {
  /** Where each model's requests go: the placement thread's routes as of its last message. */
  readonly routes = new PlacedRoutes();
  readonly #start: PlacementStart;
  readonly #hooks: PlacementHooks;
  #worker: Worker | null = null;
  /** Its start, while it is (re)starting or running. */
  #started: Promise<void> | null = null;
  /** Whether the next routes message comes from a new thread (it replaces the copy whole). */
  #fresh = true;
  readonly #calls = new Map<number, (answer: FromPlacement | null) => void>();
  #nextId = 1;
  #stopping = false;
  /** Address -> the repository digest of what it serves; digest -> its list (one repository's addresses share it). */
  readonly #digestOf = new Map<string, string>();
  readonly #lists = new Map<string, string[]>();

  private constructor(start: PlacementStart, hooks: PlacementHooks) {
    this.#start = start;
    this.#hooks = hooks;
  }

  static async start(start: PlacementStart, hooks: PlacementHooks): Promise<PlacementThread> {
    const thread = new PlacementThread(start, hooks);
    await thread.#ensure();
    return thread;
  }

  /** The thread, started again if it crashed. */
  #ensure(): Promise<void> {
    if (this.#started) return this.#started;
    this.#fresh = true;
    const { worker, started } = startWorker<FromPlacement, void>({
      url: WORKER_URL,
      name: 'placement',
      workerData: this.#start,
      youngGenerationMib: PLACEMENT_YOUNG_GENERATION_MIB,
      startTimeoutMs: PLACEMENT_START_TIMEOUT_MS,
      onMessage: (msg, markStarted) => (msg.type === 'started' ? markStarted() : this.#message(msg)),
      onStartTimeout: (limitMs) => errors.internal(`the placement thread did not start within ${limitMs} ms`),
      exitedBeforeStart: (code, lastError) => errors.internal(`the placement thread exited (code ${code}) before it started: ${lastError?.message ?? 'no error reported'}`),
      onExit: (code, lastError) => {
        if (this.#worker !== worker) return;
        this.#worker = null;
        this.#started = null;
        for (const settle of this.#calls.values()) settle(null);
        this.#calls.clear();
        if (!this.#stopping) this.#hooks.logger.error({ code, err: lastError }, 'the placement thread ended: requests keep their routes; a new one places every model at the next check');
      },
    });
    this.#worker = worker;
    this.#started = started;
    started.catch(() => {
      if (this.#worker === worker) this.#started = null;
    });
    return started;
  }

  #message(msg: FromPlacement): void {
    switch (msg.type) {
      case 'routes':
        if (this.#fresh) this.routes.clear();
        this.#fresh = false;
        this.routes.apply(msg.change);
        return;
      case 'served':
        this.#served(msg);
        return;
      case 'superseded':
        this.#hooks.onSuperseded(msg.older, msg.newer);
        return;
      case 'placed':
      case 'metrics':
        this.#calls.get(msg.id)?.(msg);
        this.#calls.delete(msg.id);
    }
  }

  /**
   * A node's models, the list of its digest when the thread sent the digest alone. A digest's list is
   * kept while an address has it, as the thread counts (worker.ts's `sentDigests` follows these messages).
   */
  #served(msg: Extract<FromPlacement, { type: 'served' }>): void {
    const models = msg.models ?? this.#lists.get(msg.digest);
    if (!models) {
      this.#hooks.logger.error({ node: msg.address, digest: msg.digest }, 'the placement thread named a models list this thread does not hold: the node keeps what it served');
      return;
    }
    this.#digestOf.set(msg.address, msg.digest);
    if (msg.digest !== '') this.#lists.set(msg.digest, models);
    const used = new Set(this.#digestOf.values());
    for (const digest of this.#lists.keys()) if (!used.has(digest)) this.#lists.delete(digest);
    this.#hooks.onServed(msg.address, models);
  }

  #post(msg: ToPlacement): void {
    this.#worker?.postMessage(msg);
  }

  #call(make: (id: number) => ToPlacement): Promise<FromPlacement | null> {
    if (!this.#worker) return Promise.resolve(null);
    const id = this.#nextId++;
    return new Promise((resolve) => {
      this.#calls.set(id, resolve);
      this.#post(make(id));
    });
  }

  /** A check starts: the placement thread reads these nodes' status while the main thread probes them. */
  async read(addresses: string[]): Promise<void> {
    try {
      await this.#ensure();
    } catch (err) {
      this.#hooks.logger.error({ err }, 'the placement thread could not be started: requests keep their routes');
      return;
    }
    this.#post({ type: 'read', addresses });
  }

  /** The probes are done: place with what they found; resolves once the routes that changed are in `routes`. */
  async place(members: PlacementMember[]): Promise<void> {
    await this.#call((id) => ({ type: 'place', id, members }));
  }

  /** The placement thread's metrics, as Prometheus text ('' while it is not running). */
  async metrics(): Promise<string> {
    const answer = await this.#call((id) => ({ type: 'metrics', id }));
    return answer?.type === 'metrics' ? answer.text : '';
  }

  async stop(): Promise<void> {
    this.#stopping = true;
    const worker = this.#worker;
    if (!worker) return;
    this.#post({ type: 'stop' });
    await worker.terminate();
  }
}
