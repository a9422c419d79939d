/**
 * The channel between the main thread and the hook pool (Piscina threads running bundles'
 * `model.js`): every task and its answer, typed here and nowhere else.
 *
 * `HookCalls` maps each task to the reply it gets, as `DeviceCalls` does for the device channel:
 * the pool's `#call(task)` returns `HookCalls[type]['reply']`, and the hook thread's handlers are
 * a table typed by the same map. A task the hook fails answers `HookFailed` instead.
 *
 * Ownership: tensor bytes travel in WireTensor.data and their ArrayBuffers are transferred both
 * ways, never structured-cloned; after a task the sender's views are detached. Each buffer sent
 * belongs to the one request (inference.ts), so it is transferred whole, whatever part of it the
 * tensors view.
 */
import type { MessagePort } from 'node:worker_threads';
import type { TensorSpec } from '../model-spec.js';
import type { WireTensor } from './inference.js';

/** How a hook pool is made (actors/hooks/handle.ts): the main thread's, and each edge thread's own. */
export interface HookPoolOptions {
  /** Threads; 0 = defaultHookThreads(). */
  threads: number;
  /** How long one hook call may run. */
  timeoutMs: number;
  /** How long importing a model.js may take (its top level runs then). */
  importTimeoutMs: number;
  /** Each thread's JS heap limit in MiB; 0 = Node's default. */
  maxHeapMib: number;
}

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

/** Which module a task runs: a bundle's model.js, imported once per version. */
interface HookModule {
  file: string;
  /** Changes when model.js changes, so that a reload imports the new code. */
  version: string;
  /** Where the hook thread notes when the call began to run (actors/hooks/hook-starts.ts); absent: not noted. */
  start?: HookStart;
}

/** A call's slot in the shared words where hook threads note when each call began (actors/hooks/hook-starts.ts). */
export interface HookStart {
  buffer: SharedArrayBuffer;
  slot: number;
}

/**
 * A preprocess hook's tensors go straight to the device actor that will run the request, not
 * back to the main thread: the hook thread checks them against the manifest's inputs and posts
 * them (HookInputs, transferred) through its door to that device, then answers. A thread makes
 * its door to a device (a MessageChannel) the first time it feeds it, and to each replacement of
 * a device actor that crashed (a new `generation`); the other end goes back with that answer,
 * for the request's thread to hand to the device.
 */
export interface HookFeed {
  deviceId: number;
  /**
   * Which worker of that device, as the request's thread knows it: a replaced worker needs a new
   * door (the main thread: DeviceHandle's generation; an edge: its door's link, new with each worker).
   */
  generation: number;
  /** Who sent the request: 0 the main thread, else an edge's door (HookInputs.link). */
  link: number;
  /** The request's id on that link (InferCommand.id as its sender numbered it). */
  id: number;
  /** The manifest's inputs, in order: what the hook must return. */
  inputs: readonly TensorSpec[];
  /** The request's rows: every input's batch axis. */
  rows: number;
}

/** Every task the pool runs, and the reply it gets when the hook did not fail. */
export interface HookCalls {
  /** Import model.js and report its exports (checked at load). */
  describe: {
    request: HookModule;
    reply: { exports: { name: string; kind: string }[] };
  };
  /** Run one hook on one request's tensors; `port` carries a meta model's sub-calls (SubCall). */
  run: {
    request: HookModule & { hook: HookName; tensors: WireTensor[]; context: HookContext; port?: MessagePort; subCallTimeoutMs?: number };
    reply: { tensors: WireTensor[] };
  };
  /**
   * Run a preprocess hook whose tensors go to the device (HookFeed); `door` is the thread's new door to it, when it
   * made one.
   */
  feed: {
    request: HookModule & { tensors: WireTensor[]; context: HookContext; feed: HookFeed };
    reply: { door?: MessagePort };
  };
}
export type HookCallType = keyof HookCalls;

/** A task as it travels: of type K, or (by default) of any type. */
export type HookTask<K extends HookCallType = HookCallType> = { [P in K]: { type: P } & HookCalls[P]['request'] }[K];

/**
 * The hook threw, rejected, or returned something that is not the tensors expected: the message
 * says which. `code` is set when the cause was a failed sub-call the run hook did not handle.
 */
export interface HookFailed {
  type: 'hookFailed';
  message: string;
  code?: string;
}

/** What a task of type K answers: its reply, or the hook's failure. */
export type HookAnswer<K extends HookCallType = HookCallType> = { type: 'answered'; reply: HookCalls[K]['reply'] } | HookFailed;

/**
 * A meta model's sub-call, from its run hook (in the pool) to the main thread, over the task's
 * port. Each pending sub-call settles once: its reply, `subCallTimeoutMs`, or the port closing
 * (the main thread has answered the meta request, or the hook thread is gone).
 */
export type SubCall = { type: 'infer'; id: number; model: string; tensors: WireTensor[]; outputs: string[] };

/** The main thread's answer to a SubCall. */
export type SubCallReply =
  | { type: 'inferred'; id: number; tensors: WireTensor[] }
  | { type: 'inferFailed'; id: number; error: import('../errors.js').ErrorData };
