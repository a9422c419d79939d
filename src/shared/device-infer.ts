/**
 * One request to a device actor, as a door sends it (actors/device/door.ts: every thread's
 * requests go through one, the main thread's handle's included): numbered on its link, its inputs'
 * buffers transferred, and settled exactly once: by its answer, by its deadline (a request without
 * one: the device's wait bound) with the device told to drop it, by its client going (likewise), or
 * by the link failing everything it has pending (its worker gone).
 */
import type { Transferable } from 'node:worker_threads';
import type { Executed, InferCommand } from './channels/device.js';
import { nowMs, type InferenceRequest, type InferenceResult } from './channels/inference.js';
import { errors } from './errors.js';
import { modelOf } from './model-spec.js';
import type { PendingCalls } from './pending-calls.js';

/** A client's link to one device actor. */
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
