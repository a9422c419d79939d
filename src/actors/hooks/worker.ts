/**
 * A hook-pool thread (run by Piscina): imports bundles' model.js and runs their hooks on one
 * request's tensors at a time. A hook sees named tensors with typed data and returns named
 * tensors (hook-tensors.ts converts both ways; sub-calls.ts is a meta model's `ctx.infer`); this
 * file never lets a hook's exception escape as anything but a `hookFailed` answer. Each task type
 * (shared/channels/hooks.ts `HookCalls`) has its handler here.
 *
 * The hook contract (documented in docs/bundles.md):
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
import { Piscina, transferableSymbol, valueSymbol } from 'piscina';
import type { HookInputs } from '../../shared/channels/device.js';
import { type WireTensor } from '../../shared/channels/inference.js';
import { nowMs } from '../../shared/timers.js';
import type { HookAnswer, HookCallType, HookFailed, HookFeed, HookTask } from '../../shared/channels/hooks.js';
import { orderHookTensors } from '../../shared/hook-tensor-check.js';
import { fromHook, toHook, type HookTensor } from './hook-tensors.js';
import { subCaller } from './sub-calls.js';
import { markStarted } from './hook-starts.js';

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

/** An answer Piscina moves (`movable`): what the pool's caller receives is the answer inside. */
type Moved = ReturnType<typeof Piscina.move>;

/**
 * An answer whose buffers (and ports) Piscina transfers instead of cloning: Piscina unwraps it
 * on the other side, so the pool's caller receives the answer itself (a HookAnswer<K>).
 */
function movable<K extends HookCallType>(answer: HookAnswer<K>, transfer: (ArrayBufferLike | MessagePort)[]): HookAnswer<K> | Moved {
  if (transfer.length === 0) return answer;
  // Piscina's Transferable: the list to transfer, and the value the other side gets.
  return Piscina.move({
    get [transferableSymbol]() { return transfer; },
    get [valueSymbol]() { return answer; },
  });
}

const failed = (message: string, code?: string): HookFailed => ({ type: 'hookFailed', message, ...(code === undefined ? {} : { code }) });

/** This thread's door to each device actor it feeds (see HookFeed), by device id. */
const doors = new Map<number, { generation: number; port: MessagePort }>();

/**
 * Call one hook of a module on tensors and bring back what it returned as wire tensors, or why
 * not. A hook's exception never escapes this function.
 */
async function callHook(file: string, version: string, hook: string, given: WireTensor[], context: object): Promise<WireTensor[] | HookFailed> {
  const m = await load(file, version);
  let returned: unknown;
  try {
    returned = await (m[hook] as Hook)(Object.fromEntries(given.map((t) => [t.name, toHook(t)])), Object.freeze(context));
  } catch (err) {
    const message = err === undefined ? 'it rejected without a reason' : err instanceof Error ? err.message : String(err);
    const code = (err as { code?: unknown } | undefined)?.code;
    return failed(message, typeof code === 'string' ? code : undefined);
  }
  if (!returned || typeof returned !== 'object' || Array.isArray(returned)) {
    return failed(`it returned ${Array.isArray(returned) ? 'an array' : typeof returned}, not an object of named tensors`);
  }
  const tensors: WireTensor[] = [];
  for (const [name, value] of Object.entries(returned)) {
    const t = fromHook(name, value);
    if (typeof t === 'string') return failed(`it returned a bad ${t}`);
    tensors.push(t);
  }
  return tensors;
}

/** Every task, answered by its own handler with its own reply type (HookCalls). */
const handlers: { [K in HookCallType]: (task: HookTask<K>) => Promise<HookAnswer<K> | Moved> } = {
  async describe(task) {
    const m = await load(task.file, task.version);
    return { type: 'answered', reply: { exports: Object.entries(m).map(([name, v]) => ({ name, kind: typeof v })) } };
  },

  async run(task) {
    const context = task.port ? { ...task.context, infer: subCaller(task.port, task.subCallTimeoutMs ?? Infinity) } : { ...task.context };
    let tensors: WireTensor[] | HookFailed;
    try {
      tensors = await callHook(task.file, task.version, task.hook, task.tensors, context);
    } finally {
      task.port?.close();
    }
    if (!Array.isArray(tensors)) return tensors;
    return movable<'run'>({ type: 'answered', reply: { tensors } }, [...new Set(tensors.map((t) => t.data.buffer))]);
  },

  /**
   * A preprocess hook's tensors, checked against the model's inputs and sent to the device through
   * this thread's door (transferred: the main thread never sees them). The device answers the
   * request. A door made now goes back in the answer, for the main thread to hand to the device.
   */
  async feed(task) {
    const tensors = await callHook(task.file, task.version, 'preprocess', task.tensors, { ...task.context });
    if (!Array.isArray(tensors)) return tensors;
    const to: HookFeed = task.feed;
    const inputs = orderHookTensors(tensors, to.inputs, to.rows);
    if (typeof inputs === 'string') return failed(inputs);
    let door = doors.get(to.deviceId);
    let made: MessagePort | undefined;
    if (door?.generation !== to.generation) {
      door?.port.close(); // that worker is gone
      const channel = new MessageChannel();
      door = { generation: to.generation, port: channel.port1 };
      doors.set(to.deviceId, door);
      made = channel.port2;
    }
    door.port.postMessage({ link: to.link, id: to.id, inputs, sentAtMs: nowMs() } satisfies HookInputs, [...new Set(inputs.map((t) => t.data.buffer as ArrayBuffer))]);
    // Messages wait in a port until its other end is taken up: the device reads these once it has the door.
    return made ? movable<'feed'>({ type: 'answered', reply: { door: made } }, [made]) : { type: 'answered', reply: {} };
  },
};

function answer<K extends HookCallType>(type: K, task: HookTask<K>): Promise<HookAnswer<K> | Moved> {
  return handlers[type](task);
}

export default function run(task: HookTask): Promise<HookAnswer | Moved> {
  markStarted(task.start);
  return answer(task.type, task);
}
