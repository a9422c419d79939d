/**
 * What the device publishes of its backlog (shared/backlog.ts), kept as its requests come and go:
 * each request that comes through a door is entered at its priority level with its predicted share
 * of a run (its model's learned cost of a full batch, per row, times its rows), and leaves when its
 * batch starts, or it is shed, cancelled or failed; the batch that runs is published with its
 * predicted end. So a thread admitting a request reads, without asking the device, how long the work
 * ahead of it would keep it waiting. A model that must be brought on before it runs (its weights not
 * on the device, or its sessions closed) adds its last measured load to the backlog once, with the
 * first of its requests to wait, and takes it back when that one leaves.
 */
import type { InferCommand } from '../../shared/channels/device.js';
import type { Backlog } from '../../shared/backlog.js';

/**
 * A request's level and predicted share of a run, in ms; `first`: no other request of its model waits,
 * so a load its model needs first is its to carry.
 */
export type Estimate = (cmd: InferCommand, first: boolean) => { level: number; ms: number };

export class BacklogLedger {
  readonly #backlog: Backlog;
  readonly #estimate: Estimate;
  /** What each waiting request added, by the device's id: taken back when it leaves. */
  readonly #entries = new Map<number, { level: number; ms: number; instance: InferCommand['instance'] }>();
  /** Requests waiting, per model instance. */
  readonly #waiting = new Map<InferCommand['instance'], number>();

  constructor(backlog: Backlog, estimate: Estimate) {
    this.#backlog = backlog;
    this.#estimate = estimate;
    backlog.clear(); // a new worker: nothing of its predecessor's waits here
  }

  /** A request came: it waits until its batch starts. */
  queued(cmd: InferCommand): void {
    const waiting = this.#waiting.get(cmd.instance) ?? 0;
    const { level, ms } = this.#estimate(cmd, waiting === 0);
    this.#entries.set(cmd.id, { level, ms, instance: cmd.instance });
    this.#waiting.set(cmd.instance, waiting + 1);
    this.#backlog.add(level, ms);
  }

  /** Request `id` no longer waits (its batch started, or it was shed, cancelled or failed); nothing if not entered. */
  left(id: number): void {
    const entry = this.#entries.get(id);
    if (!entry) return;
    this.#entries.delete(id);
    const waiting = (this.#waiting.get(entry.instance) ?? 1) - 1;
    if (waiting > 0) this.#waiting.set(entry.instance, waiting);
    else this.#waiting.delete(entry.instance);
    this.#backlog.add(entry.level, -entry.ms);
  }

  /** A batch runs until about `untilMs`; 0: the device is idle again. */
  running(untilMs: number): void {
    this.#backlog.running(untilMs);
  }
}
