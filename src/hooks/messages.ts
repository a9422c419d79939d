/**
 * The channel between the main thread and the hook pool (Piscina threads running bundles'
 * `model.js`): every task and result, typed here and nowhere else.
 *
 * Ownership: tensor bytes travel in WireTensor.data and their ArrayBuffers are transferred both
 * ways, never structured-cloned; after `run` the sender's views are detached.
 */
import type { WireTensor } from '../actors/messages.js';

/** The hooks a bundle's model.js may export, and nothing else. */
export const HOOK_NAMES = ['preprocess', 'postprocess'] as const;
export type HookName = (typeof HOOK_NAMES)[number];

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
  /** Run one hook on one request's tensors. */
  | { type: 'run'; hook: HookName; file: string; version: string; tensors: WireTensor[]; context: HookContext };

export type HookResult =
  | { type: 'described'; exports: { name: string; kind: string }[] }
  | { type: 'ran'; tensors: WireTensor[] }
  /** The hook threw, rejected, or returned something that is not tensors: the message says which. */
  | { type: 'hookFailed'; message: string };
