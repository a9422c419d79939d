/**
 * A meta model's sub-calls, on the hook thread that runs its `run` hook: `ctx.infer` posts each
 * call over the task's MessagePort to the main thread (actors/hooks/handle.ts serves them) and
 * waits for the reply with the same id. Every pending call settles exactly once: its reply, the
 * timeout, or the port closing (the main thread answered or abandoned the meta request, or is
 * gone), which rejects all of them at once.
 */
import type { MessagePort } from 'node:worker_threads';
import type { WireTensor } from '../../shared/channels/inference.js';
import type { SubCall, SubCallReply } from '../../shared/channels/hooks.js';
import { ERROR_CODES, Status } from '../../shared/errors.js';
import { PendingCalls } from '../../shared/thread-messages.js';
import { fromHook, toHook, type HookTensor } from './hook-tensors.js';

/**
 * A meta model's `ctx.infer(model, tensors, { outputs })`: the sub-call goes to the main thread over
 * the task's port and runs there like any request (scheduler, coalescing, statistics). It resolves
 * with the sub-model's outputs as hook tensors, or rejects with an Error carrying the sub-model's
 * `code` and gRPC `status`, so that `run` may handle it.
 */
export function subCaller(port: MessagePort, timeoutMs: number) {
  let nextId = 1;
  const pending = new PendingCalls();
  port.on('message', (reply: SubCallReply) => {
    if (reply.type === 'inferred') pending.resolve(reply.id, Object.fromEntries(reply.tensors.map((t) => [t.name, toHook(t)])));
    else pending.reject(reply.id, Object.assign(new Error(reply.error.message), { code: reply.error.code, status: ERROR_CODES[reply.error.code]?.status ?? Status.INTERNAL }));
  });
  // The main thread answered the meta request (or is gone): nothing pending will be answered.
  port.on('close', () => {
    pending.failAll(Object.assign(new Error('the meta request was answered or abandoned while this sub-call was in flight'), { code: 'STOWAGE_DEVICE_UNAVAILABLE', status: Status.UNAVAILABLE }));
  });
  return (model: string, tensors: Record<string, unknown>, options: { outputs?: string[] } = {}): Promise<Record<string, HookTensor>> => {
    const wire: WireTensor[] = [];
    for (const [name, value] of Object.entries(tensors ?? {})) {
      const t = fromHook(name, value);
      if (typeof t === 'string') return Promise.reject(new Error(`ctx.infer(${JSON.stringify(model)}): bad ${t}`));
      // The hook may pass the same tensor to several sub-calls, and a transfer would detach it.
      wire.push({ ...t, data: t.data.slice() }); // copy: a meta model's sub-call tensor, on its hook thread
    }
    const id = nextId++;
    // Past the hook's own timeout nothing will answer (Piscina replaces this thread then anyway).
    const answer = pending.wait<Record<string, HookTensor>>(id, timeoutMs, () =>
      Object.assign(new Error(`ctx.infer(${JSON.stringify(model)}) had no answer within ${timeoutMs} ms`), { code: 'STOWAGE_DEADLINE_EXCEEDED', status: Status.DEADLINE_EXCEEDED }));
    port.postMessage({ type: 'infer', id, model, tensors: wire, outputs: options.outputs ?? [] } satisfies SubCall, [...new Set(wire.map((t) => t.data.buffer as ArrayBuffer))]);
    return answer;
  };
}
