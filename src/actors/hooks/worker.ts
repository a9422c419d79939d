/**
 * A hook-pool thread (run by Piscina): imports bundles' model.js and runs their hooks on one
 * request's tensors at a time. A hook sees named tensors with typed data and returns named
 * tensors; this file converts both ways and never lets a hook's exception escape as anything but
 * a `hookFailed` result.
 *
 * The hook contract (documented in the README):
 *
 *   export async function preprocess(inputs, ctx) { ... return { image: { datatype: 'FP32', shape, data } }; }
 *   export async function postprocess(outputs, ctx) { ... }
 *
 * `inputs`/`outputs` map names to { datatype, shape, data }: data is a typed array of the
 * datatype's width (FP16 and BF16 as Uint16Array), or for BYTES an array of Uint8Array elements.
 * A returned tensor's data may also be a plain array of numbers, bigints or (BYTES) strings.
 */
import { pathToFileURL } from 'node:url';
import { Piscina } from 'piscina';
import type { WireTensor } from '../../shared/channels/device.js';
import { byDatatype, type Datatype } from '../../shared/dtypes.js';
import { joinBytesElements, splitBytesElements } from '../../shared/bytes-elements.js';
import type { MessagePort } from 'node:worker_threads';
import type { HookResult, HookTask, SubCall, SubCallReply } from '../../shared/channels/hooks.js';
import { ERROR_CODES, Status } from '../../shared/errors.js';

type HookTensor = { datatype: Datatype; shape: number[]; data: unknown };
type Hook = (tensors: Record<string, HookTensor>, ctx: unknown) => unknown;

const modules = new Map<string, Promise<Record<string, unknown>>>();

/** The module at `file`, imported once per version (a reload passes a new version). */
function load(file: string, version: string): Promise<Record<string, unknown>> {
  const key = `${file}?v=${version}`;
  let m = modules.get(key);
  if (!m) {
    m = import(`${pathToFileURL(file).href}?v=${encodeURIComponent(version)}`) as Promise<Record<string, unknown>>;
    modules.set(key, m);
  }
  return m;
}

function toHook(t: WireTensor): HookTensor {
  const info = byDatatype(t.datatype);
  if (t.datatype === 'BYTES') return { datatype: t.datatype, shape: t.shape, data: splitBytesElements(t.data) ?? [] };
  const Typed = info?.typedArray as Float32ArrayConstructor;
  return { datatype: t.datatype, shape: t.shape, data: new Typed(t.data.buffer, t.data.byteOffset, t.data.byteLength / Typed.BYTES_PER_ELEMENT) };
}

const utf8 = new TextEncoder();

/** A hook's returned tensor back into wire bytes; a message for anything malformed. */
function fromHook(name: string, value: unknown): WireTensor | string {
  if (!value || typeof value !== 'object') return `tensor ${JSON.stringify(name)} is ${value === null ? 'null' : typeof value}, not { datatype, shape, data }`;
  const { datatype, shape, data } = value as HookTensor;
  const info = byDatatype(String(datatype));
  if (!info) return `tensor ${JSON.stringify(name)} has datatype ${JSON.stringify(datatype)}, not a KServe datatype`;
  if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && d >= 0)) return `tensor ${JSON.stringify(name)} has shape ${JSON.stringify(shape)}, not a list of sizes`;
  const elements = shape.reduce((a: number, b: number) => a * b, 1);
  if (info.datatype === 'BYTES') {
    if (!Array.isArray(data)) return `BYTES tensor ${JSON.stringify(name)} needs an array of strings or Uint8Array`;
    const parts = data.map((d) => (typeof d === 'string' ? utf8.encode(d) : d));
    if (!parts.every((p) => p instanceof Uint8Array)) return `BYTES tensor ${JSON.stringify(name)} holds something other than strings or Uint8Array`;
    if (parts.length !== elements) return `tensor ${JSON.stringify(name)}: shape [${shape.join(', ')}] needs ${elements} elements, data has ${parts.length}`;
    return { name, datatype: info.datatype, shape, data: joinBytesElements(parts as Uint8Array[]) };
  }
  const Typed = info.typedArray as Float32ArrayConstructor;
  let typed: ArrayBufferView;
  if (ArrayBuffer.isView(data)) {
    typed = data.constructor === Typed ? data : (Typed.from as (v: ArrayLike<number>) => Float32Array)(data as unknown as ArrayLike<number>);
  } else if (Array.isArray(data)) {
    typed = (Typed.from as (v: ArrayLike<unknown>) => Float32Array)(data);
  } else {
    return `tensor ${JSON.stringify(name)}: data must be a typed array or an array`;
  }
  const count = typed.byteLength / Typed.BYTES_PER_ELEMENT;
  if (count !== elements) return `tensor ${JSON.stringify(name)}: shape [${shape.join(', ')}] needs ${elements} elements, data has ${count}`;
  // A view of part of a larger buffer is copied so that only this tensor's bytes are transferred.
  const whole = typed.byteOffset === 0 && typed.byteLength === typed.buffer.byteLength;
  const bytes = whole ? new Uint8Array(typed.buffer, 0, typed.byteLength) : new Uint8Array(typed.buffer.slice(typed.byteOffset, typed.byteOffset + typed.byteLength));
  return { name, datatype: info.datatype, shape, data: bytes };
}

/** A result whose tensor buffers Piscina transfers instead of cloning. */
function transferring(result: HookResult): unknown {
  const buffers = result.type === 'ran' ? [...new Set(result.tensors.map((t) => t.data.buffer))] : [];
  const movable = {
    get [Piscina.transferableSymbol]() { return buffers; },
    get [Piscina.valueSymbol]() { return result; },
  };
  return Piscina.move(movable as unknown as ArrayBuffer); // marks it movable: Piscina transfers, then unwraps it
}

/**
 * A meta model's `ctx.infer(model, tensors, { outputs })`: the sub-call goes to the main thread over
 * the task's port and runs there like any request (scheduler, coalescing, statistics). It resolves
 * with the sub-model's outputs as hook tensors, or rejects with an Error carrying the sub-model's
 * `code` and gRPC `status`, so that `run` may handle it.
 */
function subCaller(port: MessagePort, timeoutMs: number) {
  let nextId = 1;
  const pending = new Map<number, { resolve: (v: Record<string, HookTensor>) => void; reject: (e: Error) => void; timer: NodeJS.Timeout | undefined }>();
  const settle = (id: number) => {
    const p = pending.get(id);
    if (p) {
      pending.delete(id);
      clearTimeout(p.timer);
    }
    return p;
  };
  port.on('message', (reply: SubCallReply) => {
    const p = settle(reply.id);
    if (!p) return;
    if (reply.type === 'inferred') p.resolve(Object.fromEntries(reply.tensors.map((t) => [t.name, toHook(t)])));
    else p.reject(Object.assign(new Error(reply.error.message), { code: reply.error.code, status: ERROR_CODES[reply.error.code]?.status ?? Status.INTERNAL }));
  });
  // The main thread answered the meta request (or is gone): nothing pending will be answered.
  port.on('close', () => {
    for (const id of [...pending.keys()]) settle(id)!.reject(Object.assign(new Error('the meta request was answered or abandoned while this sub-call was in flight'), { code: 'STOWAGE_DEVICE_UNAVAILABLE', status: Status.UNAVAILABLE }));
  });
  return (model: string, tensors: Record<string, unknown>, options: { outputs?: string[] } = {}): Promise<Record<string, HookTensor>> => {
    const wire: WireTensor[] = [];
    for (const [name, value] of Object.entries(tensors ?? {})) {
      const t = fromHook(name, value);
      if (typeof t === 'string') return Promise.reject(new Error(`ctx.infer(${JSON.stringify(model)}): bad ${t}`));
      // Copied: the hook may pass the same tensor to several sub-calls, and a transfer would detach it.
      wire.push({ ...t, data: t.data.slice() });
    }
    const id = nextId++;
    return new Promise((resolve, reject) => {
      // Past the hook's own timeout nothing will answer (Piscina replaces this thread then anyway).
      const timer = Number.isFinite(timeoutMs) ? setTimeout(() => {
        settle(id);
        reject(Object.assign(new Error(`ctx.infer(${JSON.stringify(model)}) had no answer within ${timeoutMs} ms`), { code: 'STOWAGE_DEADLINE_EXCEEDED', status: Status.DEADLINE_EXCEEDED }));
      }, timeoutMs) : undefined;
      pending.set(id, { resolve, reject, timer });
      port.postMessage({ type: 'infer', id, model, tensors: wire, outputs: options.outputs ?? [] } satisfies SubCall, [...new Set(wire.map((t) => t.data.buffer as ArrayBuffer))]);
    });
  };
}

export default async function run(task: HookTask): Promise<unknown> {
  if (task.type === 'describe') {
    const m = await load(task.file, task.version);
    return { type: 'described', exports: Object.entries(m).map(([name, v]) => ({ name, kind: typeof v })) } satisfies HookResult;
  }
  const m = await load(task.file, task.version);
  const hook = m[task.hook] as Hook;
  const context = task.port ? { ...task.context, infer: subCaller(task.port, task.subCallTimeoutMs ?? Infinity) } : { ...task.context };
  let returned: unknown;
  try {
    returned = await hook(Object.fromEntries(task.tensors.map((t) => [t.name, toHook(t)])), Object.freeze(context));
  } catch (err) {
    const message = err === undefined ? 'it rejected without a reason' : err instanceof Error ? err.message : String(err);
    const code = (err as { code?: unknown } | undefined)?.code;
    return { type: 'hookFailed', message, ...(typeof code === 'string' ? { code } : {}) } satisfies HookResult;
  } finally {
    task.port?.close();
  }
  if (!returned || typeof returned !== 'object' || Array.isArray(returned)) {
    return { type: 'hookFailed', message: `it returned ${Array.isArray(returned) ? 'an array' : typeof returned}, not an object of named tensors` } satisfies HookResult;
  }
  const tensors: WireTensor[] = [];
  for (const [name, value] of Object.entries(returned)) {
    const t = fromHook(name, value);
    if (typeof t === 'string') return { type: 'hookFailed', message: `it returned a bad ${t}` } satisfies HookResult;
    tensors.push(t);
  }
  return transferring({ type: 'ran', tensors });
}
