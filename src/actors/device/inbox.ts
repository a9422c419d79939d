/**
 * The device actor's inbox: the doors every request comes through (`Doors`), and the dispatch loop
 * that takes what came in arrival order (`DevicePump`).
 *
 * Doors (shared/channels/device.ts `door`): every request reaches the device through one, a
 * MessagePort per client thread per worker — the main thread's handle keeps one
 * (actors/device/handle.ts), which the main thread's rooms reach it by, each edge thread one
 * (actors/rooms/rooms.ts), each the client end a DeviceDoor (door.ts) — and its answer goes back
 * through the door it came by. Control calls alone come over the worker's own port. Inside the
 * device a door's request is a request like any other: it joins its model's queue and coalesces
 * with requests from the other doors. It goes there under an id of the device's own (from 1), so
 * that the scheduler, cancellation and the run in flight know every request by one number; its
 * answer goes back under the door's id. The execution itself is counted in the device's tally,
 * which the main thread hears (execution-costs.ts).
 *
 * The dispatch loop: the messages not yet admitted (in arrival order), admitted one by one, then
 * the scheduler's next batch run, one batch per turn of the event loop (so that what arrives
 * meanwhile joins the queues before the next choice), until nothing is ready. A queue held for
 * rows on their way (scheduler.ts) is looked at again when they arrive, and at the latest when its
 * hold ends. What each step does is the worker's (worker.ts): the loop is only their order and its
 * timers.
 */
import type { MessagePort } from 'node:worker_threads';
import type { DeviceCall, ExecutionAnswers, FromDeviceDoor, InferCommand, ToDeviceDoor } from '../../shared/channels/device.js';
import { toErrorData } from '../../shared/errors.js';
import { nowMs } from '../../shared/timers.js';
import type { Scheduler, ShedReason } from './scheduler.js';

interface Door {
  port: MessagePort;
  /** Its link: how hook threads name its requests (HookInputs.link). */
  link: number;
  /** The device's ids of this door's requests not yet answered, by the edge's id. */
  ids: Map<number, number>;
}

/**
 * The buffers `results`' outputs are views of, each once (a request's outputs may be views of one
 * of ONNX Runtime's): what is transferred with them.
 */
export function buffersOf(results: ExecutionAnswers['results']): ArrayBuffer[] {
  const buffers = new Set<ArrayBuffer>();
  for (const r of results) for (const o of r.outputs) if (!(o.data.buffer instanceof SharedArrayBuffer)) buffers.add(o.data.buffer as ArrayBuffer);
  return [...buffers];
}

/** What a device does with what comes through its doors. */
export interface DoorsEvents {
  /** A door's request, under the device's id, joins the inbox; `link` and `linkId` are how its edge names it. */
  admit(cmd: InferCommand, link: number, linkId: number): void;
  /**
   * Drop a request by the device's id (queued: removed; running: its result discarded), as the main thread's cancel
   * does.
   */
  cancel(id: number): void;
  /** A hook thread of the door's client made its door to this device (HookInputs come through it). */
  hookDoor(port: MessagePort): void;
  /** Door `link` closed (its client ended, or let it go). */
  closed(link: number): void;
}

export class Doors {
  /** The next request's id on this device. */
  #next = 1;
  /** Door requests not yet answered, by the device's id. */
  readonly #requests = new Map<number, { door: Door; id: number }>();
  readonly #on: DoorsEvents;

  constructor(on: DoorsEvents) {
    this.#on = on;
  }

  /** Serve a new door, `link` its number. When its client goes (its thread ended), what it had here is dropped. */
  open(port: MessagePort, link: number): void {
    const door: Door = { port, link, ids: new Map() };
    port.on('message', (messages: ToDeviceDoor[]) => {
      for (const msg of messages) {
        if (msg.type === 'hookDoor') {
          this.#on.hookDoor(msg.port);
          continue;
        }
        if (msg.type === 'cancel') {
          const own = door.ids.get(msg.id);
          if (own === undefined) continue;
          this.#forget(own);
          this.#on.cancel(own);
          continue;
        }
        // The message is this thread's own copy (structured clone): renumbered in place, not copied.
        const own = this.#next++;
        const linkId = msg.id;
        door.ids.set(linkId, own);
        this.#requests.set(own, { door, id: linkId });
        msg.id = own;
        this.#on.admit(msg, link, linkId);
      }
    });
    port.on('close', () => {
      for (const own of door.ids.values()) {
        this.#requests.delete(own);
        this.#on.cancel(own);
      }
      door.ids.clear();
      this.#on.closed(link);
    });
    port.unref(); // a door never keeps this thread alive
  }

  #forget(own: number): { door: Door; id: number } | undefined {
    const request = this.#requests.get(own);
    if (!request) return undefined;
    this.#requests.delete(own);
    request.door.ids.delete(request.id);
    return request;
  }

  #post(door: Door, msg: FromDeviceDoor, transfer: ArrayBuffer[] = []): void {
    try {
      door.port.postMessage(msg, transfer);
    } catch {
      // The client went while the answer was made: nobody waits for it.
    }
  }

  /** Fail request `own` (the device's id); one cancelled or whose client went is dropped. */
  fail(own: number, err: unknown): void {
    const request = this.#forget(own);
    if (request) this.#post(request.door, { type: 'failed', id: request.id, error: toErrorData(err) });
  }

  /** One execution's answers: each door's requests' go to their door, one message per door, their buffers with them. */
  deliver(msg: ExecutionAnswers): void {
    if (msg.results.length === 1) { // a lone request, the most of them: the message goes to its door as it is
      const request = this.#forget(msg.results[0].id);
      if (!request) return; // cancelled, or its client went
      msg.results[0].id = request.id;
      this.#post(request.door, msg, buffersOf(msg.results));
      return;
    }
    const byDoor = new Map<Door, ExecutionAnswers['results']>();
    for (const result of msg.results) {
      const request = this.#forget(result.id);
      if (!request) continue; // cancelled, or its client went
      let results = byDoor.get(request.door);
      if (!results) byDoor.set(request.door, (results = []));
      result.id = request.id; // the answers are this call's: renamed to the door's id in place
      results.push(result);
    }
    for (const [door, results] of byDoor) this.#post(door, { type: 'executed', results, timing: msg.timing }, buffersOf(results));
  }
}

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
