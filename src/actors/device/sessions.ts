/**
 * The ONNX Runtime sessions of one device, shared by graph and opened on demand.
 *
 * What a loaded model pins beside its weights bounds how many models a device holds as much as
 * the weight budget does: each session keeps its graph, kernels and (unless activations are
 * shared) the most its runs ever took. So:
 *
 * - **One session per distinct graph.** Executables whose compiled weightless graphs are equal
 *   (the compile cache's SHA-256 of graph.onnx) and that open with equal options (optimisation
 *   level, provider options such as tf32, CUDA graphs on or off) share one session on this
 *   device. Each keeps a binding of its own on it (ONNX Runtime allows many IoBindings per
 *   session), its weights bound there once per residency, so it runs with its own weights.
 *   Runs of a session go one at a time by construction: the device runs one batch at a time,
 *   and a load's warm-up is a control call the dispatch loop answers between batches (pump.ts).
 * - **Sessions on demand.** With a budget (runtime.session_budget_bytes), opening or reopening a
 *   session beyond it closes the least recently used idle sessions; a closed session reopens
 *   (from the compile cache) on its next call, its models READY throughout. Sessions of
 *   `residency: device` models are never closed.
 *
 * A session's bytes are measured when it opens (`measure`: on the CPU the C heap's growth across
 * the open; on a GPU its free memory's drop): what it holds beside weights and shared activations.
 */
import type { SessionCloseReason, SessionOpenReason, SessionsReport } from '../../shared/channels/device.js';
import { errors } from '../../shared/errors.js';
import { isOutOfMemory, type OrtSession, type OrtTensorInfo } from '../../native/ort.js';

/** What runs on a pooled session: one executable of a loaded model (executables.ts). */
export interface SessionUser {
  /** Its session closed, or it left the session: it lets go of its binding (made again at its next use). */
  onClose(): void;
  /** A `residency: device` model's session is never closed by the budget. */
  readonly pinned: boolean;
  /** The model, for messages. */
  readonly model: string;
}

/** Opens the session's graph from the compile cache; on a reopen, an entry gone is compiled again. */
export type SessionOpener = (reason: SessionOpenReason) => OrtSession | Promise<OrtSession>;

/** One session on this device: for one graph and one set of options, shared by its users. */
export class PooledSession {
  readonly key: string;
  /**
   * The graph's SHA-256 when it may be shared; null for a session of one executable's own (sharing off, saying why).
   */
  readonly graph: string | null;
  /** Why it is not shared (sharing off); null when it may be. */
  readonly unshared: string | null;
  session: OrtSession | null = null;
  readonly users = new Set<SessionUser>();
  /** What it held when it last opened, beside weights and shared activations. */
  bytes = 0;
  lastUsed = 0;
  /** Backend cuda with graphs: why its opener could not open it for graphs (it opened without). */
  graphsOff: string | null = null;
  /** Its inputs and outputs, read at its first open (known while it is closed). */
  inputs: readonly OrtTensorInfo[] = [];
  outputs: readonly OrtTensorInfo[] = [];
  readonly #opener: SessionOpener;

  constructor(key: string, graph: string | null, unshared: string | null, opener: SessionOpener) {
    this.key = key;
    this.graph = graph;
    this.unshared = unshared;
    this.#opener = opener;
  }

  get open(): boolean {
    return this.session !== null;
  }

  get pinned(): boolean {
    for (const u of this.users) if (u.pinned) return true;
    return false;
  }

  /** @internal the pool's: open it with its opener. */
  async openWith(reason: SessionOpenReason): Promise<OrtSession> {
    return this.#opener(reason);
  }

  /** How its status says it: shared with how many, or why it is not. */
  describe(): string {
    const graph = this.graph ? ` (graph ${this.graph.slice(0, 12)})` : '';
    const closed = this.open ? '' : ', closed until its next call';
    if (this.unshared) return `own session: ${this.unshared}${closed}`;
    return this.users.size > 1 ? `shared with ${this.users.size} models${graph}${closed}` : `own session, no other loaded model has its graph${graph}${closed}`;
  }
}

export interface SessionPoolOptions {
  /** Bytes the open sessions may hold beside weights (runtime.session_budget_bytes); 0: no budget. */
  budgetBytes: number;
  /** What the device holds now, to measure an open by (CPU: the C heap; GPU: the memory in use). */
  measure: () => number;
  now?: () => number;
}

export class SessionPool {
  readonly #o: SessionPoolOptions;
  readonly #now: () => number;
  readonly #byKey = new Map<string, PooledSession>();
  #clock = 0;
  readonly #opens: Record<SessionOpenReason, number> = { load: 0, reopen: 0 };
  readonly #closes: Record<SessionCloseReason, number> = { unload: 0, budget: 0, memory: 0 };
  #reopenMs = 0;

  constructor(options: SessionPoolOptions) {
    this.#o = options;
    this.#now = options.now ?? (() => performance.now());
  }

  get budgetBytes(): number {
    return this.#o.budgetBytes;
  }

  /** The session for `key`, if one is pooled. */
  get(key: string): PooledSession | undefined {
    return this.#byKey.get(key);
  }

  /**
   * `user` joins the session of `key` (made with `make` when none is pooled), which is opened if it
   * is not open (a load's open). The session is then the most recently used: the budget closes others.
   */
  async join(key: string, user: SessionUser, make: () => PooledSession): Promise<PooledSession> {
    let pooled = this.#byKey.get(key);
    if (!pooled) {
      pooled = make();
      this.#byKey.set(key, pooled);
    }
    pooled.users.add(user);
    try {
      await this.#ensureOpen(pooled, 'load');
    } catch (err) {
      this.leave(user, pooled);
      throw err;
    }
    return pooled;
  }

  /** `user` leaves its session; the last to leave closes it. */
  leave(user: SessionUser, pooled: PooledSession): void {
    pooled.users.delete(user);
    user.onClose();
    if (pooled.users.size > 0) return;
    if (pooled.session) this.#close(pooled, 'unload');
    this.#byKey.delete(pooled.key);
  }

  /**
   * Before a run (or warm-up) on `pooled`: open it again if the budget closed it, mark it used, and
   * close others beyond the budget. Answers the milliseconds its open took (0 when it was open).
   */
  async use(pooled: PooledSession): Promise<number> {
    pooled.lastUsed = ++this.#clock;
    if (pooled.session) return 0;
    const started = this.#now();
    await this.#ensureOpen(pooled, 'reopen');
    const ms = this.#now() - started;
    this.#reopenMs += ms;
    return ms;
  }

  /** Whether `pooled` is open (a model's call then pays no open: the scheduler's resident check). */
  isOpen(pooled: PooledSession | undefined): boolean {
    return pooled?.session != null;
  }

  report(): SessionsReport {
    let open = 0;
    let users = 0;
    let bytes = 0;
    for (const p of this.#byKey.values()) {
      users += p.users.size;
      if (p.session) {
        open++;
        bytes += p.bytes;
      }
    }
    return { open, sessions: this.#byKey.size, users, bytes, budgetBytes: this.#o.budgetBytes, opens: { ...this.#opens }, closes: { ...this.#closes }, reopenMs: this.#reopenMs };
  }

  /** Bytes the open sessions hold. */
  get openBytes(): number {
    let bytes = 0;
    for (const p of this.#byKey.values()) if (p.session) bytes += p.bytes;
    return bytes;
  }

  /**
   * Open `pooled` unless it is open, measuring what it holds, then close others beyond the budget.
   * An open that runs out of memory closes the least recently used idle session and tries once more.
   */
  async #ensureOpen(pooled: PooledSession, reason: SessionOpenReason): Promise<void> {
    pooled.lastUsed = ++this.#clock;
    if (pooled.session) return;
    const before = this.#o.measure();
    let session: OrtSession;
    try {
      session = await pooled.openWith(reason);
    } catch (err) {
      if (!isOutOfMemory(err) || !this.#closeOne(pooled, 'memory')) throw err;
      session = await pooled.openWith(reason);
    }
    pooled.session = session;
    pooled.bytes = Math.max(0, this.#o.measure() - before);
    if (pooled.inputs.length === 0 && pooled.outputs.length === 0) {
      pooled.inputs = session.inputs;
      pooled.outputs = session.outputs;
    }
    this.#opens[reason]++;
    this.#fitBudget(pooled);
  }

  /** Close idle sessions, least recently used first, until the open ones fit the budget (`keep` stays). */
  #fitBudget(keep: PooledSession): void {
    if (this.#o.budgetBytes <= 0) return;
    while (this.openBytes > this.#o.budgetBytes) {
      if (!this.#closeOne(keep, 'budget')) return; // what is left is pinned or in use: over budget it stays
    }
  }

  /**
   * Close the least recently used open session other than `keep` that no `residency: device` model pins; false when
   * there is none.
   */
  #closeOne(keep: PooledSession, reason: SessionCloseReason): boolean {
    let victim: PooledSession | undefined;
    for (const p of this.#byKey.values()) {
      if (p === keep || !p.session || p.pinned) continue;
      if (!victim || p.lastUsed < victim.lastUsed) victim = p;
    }
    if (!victim) return false;
    this.#close(victim, reason);
    return true;
  }

  #close(pooled: PooledSession, reason: SessionCloseReason): void {
    for (const u of pooled.users) u.onClose();
    pooled.session!.release();
    pooled.session = null;
    this.#closes[reason]++;
  }
}

/** The error for a session that cannot open again on a call, when memory is what ran out. */
export function reopenExhausted(model: string, err: unknown): Error {
  return isOutOfMemory(err)
    ? errors.deviceMemoryExhausted(model, `its session was closed under runtime.session_budget_bytes and could not open again: memory ran out even after closing another idle session (${(err as Error).message}); the model stays READY and its next call tries again`)
    : (err as Error);
}
