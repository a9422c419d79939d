/**
 * The device actor's dispatch loop: the messages not yet admitted (an inbox, in arrival order),
 * admitted one by one, then the scheduler's next batch run, one batch per turn of the event loop
 * (so that what arrives meanwhile joins the queues before the next choice), until nothing is ready.
 * A queue held for rows on their way (scheduler.ts) is looked at again when they arrive, and at
 * the latest when its hold ends. What each step does is the worker's (worker.ts): this file is
 * only the loop's order and its timers.
 */
import { nowMs } from '../../shared/timers.js';
import type { DeviceCall, InferCommand } from '../../shared/channels/device.js';
import type { Scheduler, ShedReason } from './scheduler.js';

/** What the loop does at each step, the worker's. */
export interface PumpSteps {
  /** Put a request in its model's queue, or answer it at once. */
  admit(cmd: InferCommand): void;
  /** Answer a control call (loads, unloads, policies...), in its turn. */
  answer(call: DeviceCall): Promise<void>;
  /** The scheduler's next batch, what it shed, and until when a queue is held for rows on their way. */
  next(): ReturnType<Scheduler<InferCommand>['next']>;
  /** A request the scheduler shed (waited too long, or too late to run). */
  shed(request: InferCommand, reason: ShedReason): void;
  /** Why the batch must not run (the device out of service); null to run it. Fault injection happens here. */
  refusal(): Error | null;
  fail(id: number, err: unknown): void;
  run(batch: InferCommand[]): Promise<void>;
  /** Drop a request from its queue; false when it is not queued (running, or done). */
  unqueue(id: number): boolean;
  /** A request of the run in flight was cancelled. */
  cancelRunning(id: number): void;
}

const yieldToEventLoop = () => new Promise<void>((resolve) => setImmediate(resolve));

export class DevicePump {
  /** Messages not yet admitted, in arrival order. */
  readonly #inbox: (InferCommand | DeviceCall)[] = [];
  readonly #steps: PumpSteps;
  #pumping = false;
  #scheduled = false;
  #wake: { atMs: number; timer: NodeJS.Timeout } | null = null;

  constructor(steps: PumpSteps) {
    this.#steps = steps;
  }

  /** A message to admit in its turn. */
  push(msg: InferCommand | DeviceCall): void {
    this.#inbox.push(msg);
  }

  get waiting(): number {
    return this.#inbox.length;
  }

  /**
   * Pump once the event loop has delivered everything that is waiting: inputs from several hook
   * threads arrive on several doors, one message each, and pumping at the first would run it alone.
   */
  soon(): void {
    if (this.#scheduled) return;
    this.#scheduled = true;
    setImmediate(() => {
      this.#scheduled = false;
      void this.pump();
    });
  }

  /**
   * Drop request `id`: not yet admitted or queued, removed and never run; running, it finishes and its answer is
   * dropped.
   */
  cancel(id: number): void {
    const at = this.#inbox.findIndex((m) => m.type === 'infer' && m.id === id);
    if (at >= 0) this.#inbox.splice(at, 1);
    else if (!this.#steps.unqueue(id)) this.#steps.cancelRunning(id);
  }

  /** Look again at a held queue when its hold ends: one timer for the earliest end. */
  #wakeAt(atMs: number): void {
    if (this.#wake && this.#wake.atMs <= atMs) return;
    if (this.#wake) clearTimeout(this.#wake.timer);
    this.#wake = {
      atMs,
      timer: setTimeout(() => {
        this.#wake = null;
        void this.pump();
      }, Math.max(0, atMs - nowMs())),
    };
  }

  /**
   * Admit what came, then run batches until none is ready (one at a time: a second call while it runs does nothing).
   */
  async pump(): Promise<void> {
    if (this.#pumping) return;
    this.#pumping = true;
    const steps = this.#steps;
    try {
      for (;;) {
        while (this.#inbox.length) {
          const msg = this.#inbox.shift()!;
          if (msg.type === 'infer') steps.admit(msg);
          else await steps.answer(msg);
        }
        const { batch, shed, heldUntilMs } = steps.next();
        for (const s of shed) steps.shed(s.request, s.reason);
        if (batch.length === 0) {
          if (heldUntilMs !== undefined) this.#wakeAt(heldUntilMs);
          break;
        }
        const refused = steps.refusal();
        if (refused) {
          for (const t of batch) steps.fail(t.id, refused);
          continue;
        }
        await steps.run(batch);
        await yieldToEventLoop();
      }
    } finally {
      this.#pumping = false;
    }
  }
}
