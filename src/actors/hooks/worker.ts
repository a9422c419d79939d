/**
 * A hook-pool thread (run by Piscina): imports bundles' model.js and runs their hooks on one
 * request's tensors at a time. A hook sees named tensors with typed data and returns named
 * tensors (hook-tensors.ts converts both ways; sub-calls.ts is a meta model's `ctx.infer`); this
 * file never lets a hook's exception escape as anything but a `hookFailed` result.
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
import { MessageChannel, type MessagePort } from 'node:worker_threads';
import { Piscina } from 'piscina';
import { nowMs, type HookInputs, type WireTensor } from '../../shared/channels/device.js';
import type { HookFeed, HookResult, HookTask } from '../../shared/channels/hooks.js';
import { orderHookTensors } from '../../protocol/codec.js';
import { fromHook, toHook, type HookTensor } from './hook-tensors.js';
import { subCaller } from './sub-calls.js';

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

/** A result whose buffers (and ports) Piscina transfers instead of cloning. */
function movable(result: HookResult, transfer: (ArrayBufferLike | MessagePort)[]): unknown {
  const wrapped = {
    get [Piscina.transferableSymbol]() { return transfer; },
    get [Piscina.valueSymbol]() { return result; },
  };
  return Piscina.move(wrapped as unknown as ArrayBuffer); // marks it movable: Piscina transfers, then unwraps it
}

/** This thread's door to each device actor it feeds (see HookFeed), by device id. */
const doors = new Map<number, { generation: number; port: MessagePort }>();

/**
 * A preprocess hook's tensors, checked against the model's inputs and sent to the device through
 * this thread's door (transferred: the main thread never sees them). The device answers the
 * request. A door made now goes back in the result, for the main thread to hand to the device.
 */
function feed(to: HookFeed, tensors: WireTensor[]): unknown {
  const inputs = orderHookTensors(tensors, to.inputs, to.rows);
  if (typeof inputs === 'string') return { type: 'hookFailed', message: inputs } satisfies HookResult;
  let door = doors.get(to.deviceId);
  let made: MessagePort | undefined;
  if (door?.generation !== to.generation) {
    door?.port.close(); // that worker is gone
    const channel = new MessageChannel();
    door = { generation: to.generation, port: channel.port1 };
    doors.set(to.deviceId, door);
    made = channel.port2;
  }
  door.port.postMessage({ id: to.id, inputs, sentAtMs: nowMs() } satisfies HookInputs, [...new Set(inputs.map((t) => t.data.buffer as ArrayBuffer))]);
  // Messages wait in a port until its other end is taken up: the device reads these once it has the door.
  return made ? movable({ type: 'fed', door: made }, [made]) : { type: 'fed' } satisfies HookResult;
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
  if (task.feed) return feed(task.feed, tensors);
  return movable({ type: 'ran', tensors }, [...new Set(tensors.map((t) => t.data.buffer))]);
}
