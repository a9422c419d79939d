/**
 * The channel between the main thread and the hook pool (Piscina threads running bundles'
 * `model.js`): every task and result, typed here and nowhere else.
 *
 * Ownership: tensor bytes travel in WireTensor.data and their ArrayBuffers are transferred both
 * ways, never structured-cloned; after `run` the sender's views are detached.
 */
import type { MessagePort } from 'node:worker_threads';
import type { ErrorData } from '../errors.js';
import type { TensorSpec } from '../model-spec.js';
import type { WireTensor } from './device.js';

/** The hooks a model's model.js may export, and nothing else; a meta model's exports only `run`. */
export const HOOK_NAMES = ['preprocess', 'postprocess'] as const;
export const META_HOOK_NAMES = ['run'] as const;
export type HookName = (typeof HOOK_NAMES)[number] | (typeof META_HOOK_NAMES)[number];

/** What a hook receives beside its tensors. */
export interface HookContext {
  model: string;
  /** The request's `id` ('' when the client set none). */
  requestId: string;
  /** The request's parameters, as plain values. */
  parameters: Record<string, boolean | number | string>;
}

export type HookTask =
  /** Import model.js and report its exports (checked at load). */
  | { type: 'describe'; file: string; version: string }
  /** Run one hook on one request's tensors; `port` carries a meta model's sub-calls (SubCall). */
  | { type: 'run'; hook: HookName; file: string; version: string; tensors: WireTensor[]; context: HookContext; port?: MessagePort; subCallTimeoutMs?: number; feed?: HookFeed };

/**
 * A preprocess hook's tensors go straight to the device actor that will run the request, not
 * back to the main thread: the hook thread checks them against the manifest's inputs and posts
 * them (HookInputs, transferred) through its door to that device, then answers `fed`. A thread
 * makes its door to a device (a MessageChannel) the first time it feeds it, and to each
 * replacement of a device actor that crashed (a new `generation`); the other end goes back with
 * that `fed` result, for the main thread to hand to the device.
 */
export interface HookFeed {
  deviceId: number;
  /** Which worker of that device (DeviceHandle.generation): a replaced worker needs a new door. */
  generation: number;
  /** The request's id on that device (InferCommand.id). */
  id: number;
  /** The manifest's inputs, in order: what the hook must return. */
  inputs: readonly TensorSpec[];
  /** The request's rows: every input's batch axis. */
  rows: number;
}

/**
 * A meta model's sub-call, from its run hook (in the pool) to the main thread, over the task's
 * port. Each pending sub-call settles once: its reply, `subCallTimeoutMs`, or the port closing
 * (the main thread has answered the meta request, or the hook thread is gone).
 */
export type SubCall = { type: 'infer'; id: number; model: string; tensors: WireTensor[]; outputs: string[] };

/** The main thread's answer to a SubCall. */
export type SubCallReply =
  | { type: 'inferred'; id: number; tensors: WireTensor[] }
  | { type: 'inferFailed'; id: number; error: ErrorData };

export type HookResult =
  | { type: 'described'; exports: { name: string; kind: string }[] }
  | { type: 'ran'; tensors: WireTensor[] }
  /** A `feed` task's tensors went to the device; `door` is the thread's new door to it, when it made one. */
  | { type: 'fed'; door?: MessagePort }
  /** The hook threw, rejected, or returned something that is not tensors: the message says which.
   *  `code` is set when the cause was a failed sub-call the run hook did not handle. */
  | { type: 'hookFailed'; message: string; code?: string };
