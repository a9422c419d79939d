/**
 * A door to a device actor (shared/channels/device.ts `door`): one MessagePort per client
 * thread per device worker, over which that thread hands the device the requests it routes and
 * hears their answers (actors/device/inbox.ts on the other side). Every request reaches a device
 * through a door: the main thread's handle keeps one to each worker it starts (actors/device/handle.ts),
 * each edge thread one per device (actors/rooms/rooms.ts). Control calls alone go over the
 * worker's own port.
 *
 * - each request settles in exactly one way (`inferOn`, below): its answer, its deadline (for one
 *   without: the device's queue bound plus the execution watchdog), its client going (the device is
 *   told to drop it), or the door closing (the device's worker ended: UNAVAILABLE, with why as the main
 *   thread says it, its exit code included, `close`);
 * - what one event-loop turn sends goes as one message (shared/thread-messages.ts, Outbox), so that
 *   requests read together arrive together and may run as one batch;
 * - a door made before its worker may take requests (a replacement worker still loading its
 *   models again) holds what it is given, in order, until `open` hands it the port, so that a
 *   request sent while a device restarts waits for it as it would in the device's own queue.
 */
import type { MessagePort, Transferable } from 'node:worker_threads';
import type { DeviceClient, Executed, FromDeviceDoor, HookFeedTarget, InferCommand, ToDeviceDoor } from '../../shared/channels/device.js';
import type { InferenceRequest, InferenceResult } from '../../shared/channels/inference.js';
import { errors, fromErrorData } from '../../shared/errors.js';
import { DOOR_EXIT_WHY_WAIT_MS } from '../../shared/constants.js';
import { Outbox, PendingCalls } from '../../shared/thread-messages.js';
import { modelOf } from '../../shared/model-spec.js';
import { nowMs } from '../../shared/timers.js';

/** A client's link to one device actor: what `inferOn` sends a request over. */
export interface DeviceLink {
  /** Its calls waiting for the device (failed all at once when the device goes). */
  pending: PendingCalls;
  /** The next id on this link. */
  nextId(): number;
  /** How long a request without a deadline may wait for its answer. */
  waitBoundMs: number;
  send(msg: InferCommand | { type: 'cancel'; id: number }, transfer?: readonly Transferable[]): void;
  /** Why nothing may be sent now (the device stopped, out of service, its door closed); null when it may. */
  refusal(): Error | null;
}

/**
 * One request to a device actor, as a door sends it (every thread's requests go through one, the
 * main thread's handle's included): numbered on its link, its inputs' buffers transferred, and
 * settled exactly once: by its answer, by its deadline (a request without one: the device's wait
 * bound) with the device told to drop it, by its client going (likewise), or by the link failing
 * everything it has pending (its worker gone).
 *
 * Run `req` on the device over `link`; `prepare` may mark the command before it goes (its inputs
 * coming from a hook thread). The caller must not touch the inputs' buffers afterwards.
 */
export async function inferOn(link: DeviceLink, req: InferenceRequest, signal: AbortSignal | undefined, prepare?: (command: InferCommand) => void): Promise<InferenceResult> {
  // A client gone before its request got here (mid-decode, or before its handler ran): not run.
  if (signal?.aborted) throw errors.cancelled();
  const refused = link.refusal();
  if (refused) throw refused;
  const id = link.nextId();
  const enqueuedAtMs = nowMs();
  const settleBy = Number.isFinite(req.deadlineMs) ? req.deadlineMs : enqueuedAtMs + link.waitBoundMs;
  const transfer: Transferable[] = [...new Set(req.inputs.map((t) => t.data.buffer as ArrayBuffer))];
  const command: InferCommand = { ...req, type: 'infer', id, enqueuedAtMs };
  prepare?.(command);
  const executed = link.pending.wait<Executed>(id, settleBy - enqueuedAtMs, () => {
    link.send({ type: 'cancel', id });
    return errors.deadlineExceeded(modelOf(req.instance), nowMs() - enqueuedAtMs);
  });
  link.send(command, transfer);
  const onAbort = () => {
    if (link.pending.reject(id, errors.cancelled())) link.send({ type: 'cancel', id });
  };
  signal?.addEventListener('abort', onAbort, { once: true });
  try {
    const { result, timing } = await executed;
    return { ...result, timing };
  } finally {
    signal?.removeEventListener('abort', onAbort);
  }
}

export class DeviceDoor implements DeviceClient {
  readonly deviceId: number;
  /** Its number on the device (HookFeed.link), new with each door: it stands for the worker's generation too. */
  readonly link: number;
  #port: MessagePort | null = null;
  readonly #onClosed: (door: DeviceDoor) => void;
  /** What was sent before the door opened, each turn's batch in order. */
  #held: { messages: ToDeviceDoor[]; transfer: Transferable[] }[] = [];
  /** Its requests' numbering, waiting and cancelling (`inferOn`). */
  readonly #link: DeviceLink;
  readonly #pending = new PendingCalls();
  readonly #outbox: Outbox<ToDeviceDoor>;
  #nextId = 1;
  #closed = false;
  /** The device's end went (its worker ended), whether or not the main thread has said why yet. */
  #gone = false;
  #whyTimer: NodeJS.Timeout | undefined;
  /** Why it closed. */
  #why = 'its worker exited';

  /**
   * `port`: the device's end is there now; null: it comes later (`open`), what is sent meanwhile held. `onClosed`: the
   * device's end went (its worker ended); told once. `holdWhenGone`: once that end went, a request sent is taken (not
   * sent) and fails with the why `close` gives, instead of at once without it.
   */
  constructor(deviceId: number, port: MessagePort | null, link: number, waitBoundMs: number, onClosed: (door: DeviceDoor) => void, { holdWhenGone = false } = {}) {
    this.deviceId = deviceId;
    this.link = link;
    this.#onClosed = onClosed;
    this.#link = {
      pending: this.#pending,
      nextId: () => this.#nextId++,
      waitBoundMs,
      send: (msg, transfer) => this.#outbox.push(msg, transfer),
      // A door that holds when gone (the handle's own: its owner closes it with why at once) takes a request sent
      // after its worker's end went, to fail it with the rest saying why; an edge's is refused at once, the edge
      // routing elsewhere meanwhile.
      refusal: () => (this.#closed || (this.#gone && !holdWhenGone) ? errors.deviceUnavailable(this.deviceId, this.#why) : null),
    };
    this.#outbox = new Outbox((messages, transfer) => {
      if (this.#closed || this.#gone) return; // a gone worker hears nothing more
      if (this.#port) this.#port.postMessage(messages, transfer);
      else this.#held.push({ messages, transfer });
    });
    if (port) this.open(port);
  }

  /** The device's end is here: what was held goes first, in order. */
  open(port: MessagePort): void {
    if (this.#closed || this.#port) {
      port.close();
      return;
    }
    this.#port = port;
    port.on('message', (msg: FromDeviceDoor) => this.#settle(msg));
    port.on('close', () => {
      // The worker ended: nothing more goes to it. What it had pending fails once the main thread
      // says why (`close(why)`: the exit code is only the main thread's to see), or without it after a while.
      this.#gone = true;
      this.#whyTimer = setTimeout(() => this.close('its worker exited'), DOOR_EXIT_WHY_WAIT_MS);
      this.#whyTimer.unref();
      this.#onClosed(this);
    });
    port.unref(); // a door never keeps the thread alive
    for (const { messages, transfer } of this.#held) port.postMessage(messages, transfer);
    this.#held = [];
  }

  /** Requests may go through it: not closed, its worker's end still there (the rooms' RoomDevice). */
  get serving(): boolean {
    return !this.#closed && !this.#gone;
  }

  /** A door serves its worker once that worker has every model loaded (a handle opens edges' doors only then). */
  get settled(): boolean {
    return this.serving;
  }

  /** Requests handed to the device and not yet settled (least_outstanding routing). */
  get inflight(): number {
    return this.#pending.size;
  }

  #settle(msg: FromDeviceDoor): void {
    if (msg.type === 'failed') {
      this.#pending.reject(msg.id, fromErrorData(msg.error));
      return;
    }
    for (const { id, ...result } of msg.results) this.#pending.resolve<Executed>(id, { result, timing: msg.timing });
  }

  /**
   * Run one request on the device: its inputs' buffers are transferred (the caller must not touch
   * them afterwards), its outputs' come back. `signal` aborting drops it. With `feedFromHook` it
   * goes without inputs: it is called at once with where the hook thread running its preprocess
   * hook must send them (as the main thread's handle does).
   */
  infer(req: InferenceRequest, signal?: AbortSignal, feedFromHook?: (to: HookFeedTarget) => void): Promise<InferenceResult> {
    return inferOn(this.#link, req, signal, feedFromHook && ((command) => {
      command.inputsFromHook = true;
      feedFromHook({ deviceId: this.deviceId, generation: this.link, link: this.link, id: command.id });
    }));
  }

  /**
   * A hook thread's new door to this device (HookFeed), made for `generation` (a door's link): one for another door is
   * closed.
   */
  adoptDoor(port: MessagePort, generation: number): void {
    if (generation !== this.link || this.#closed || this.#gone) port.close();
    else this.#outbox.push({ type: 'hookDoor', port }, [port]);
  }

  /** Close the door: what is pending fails UNAVAILABLE saying `why`. */
  close(why: string): void {
    if (this.#closed) return;
    this.#closed = true;
    clearTimeout(this.#whyTimer);
    this.#why = why;
    this.#outbox.clear();
    this.#held = [];
    this.#port?.close();
    this.#pending.failAll(errors.deviceUnavailable(this.deviceId, why));
  }
}
