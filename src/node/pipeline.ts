/**
 * The request path of a node, on the main thread: what one inference goes
 * through between the gRPC edge and the device, for ModelInfer, each request
 * of ModelStreamInfer, and a meta model's sub-calls alike.
 *
 *   lease -> decode -> route -> [preprocess, on a hook thread, which feeds the device] -> device -> [postprocess -> encode] -> statistics
 *   (without a postprocess hook the device encodes the response: infer-response-wire.ts)
 *   (a meta model: lease -> decode -> run hook, whose sub-calls re-enter at `route` with tensors)
 *
 * Copies of a request's tensor bytes, and thread hops, end to end (which thread makes each copy:
 * the main thread also runs the gRPC front end, so copies moved off it are cheaper there):
 *
 * | path | copies | hops |
 * | --- | --- | --- |
 * | inline (`raw_input_contents`), a message of half `Buffer.poolSize` or more (32 KiB on Node 24) | 4, 2 of them on the main thread: (1, main) grpc-js joins the HTTP/2 frames into one message, an ArrayBuffer of its own (protobufjs decodes `bytes` as views of it); that ArrayBuffer is transferred to the device as it is (message-buffers.ts), no copy; ONNX Runtime reads it in place, unless the view is misaligned for its type: then the device copies it into reused staging memory (staging.ts); (2, device) onnxruntime-node copies each output out of ONNX Runtime into a fresh JS buffer (its binding always does, preallocated outputs included); (3, device) the device writes it into the encoded response (infer-response-wire.ts), transferred back, no copy; (4, main) grpc-js copies the message into its frame | 2: main -> device -> main |
 * | inline, a smaller message (in Node's shared Buffer pool, which cannot be transferred) | 5: as above, plus a copy into a fresh transferable buffer on the main thread (`fromRaw`) | 2 |
 * | typed `contents` | as a smaller inline message, with a conversion from the JS arrays instead of `fromRaw`'s copy | 2 |
 * | system shared memory | input 0 (the device maps the region; ONNX Runtime reads it in place; a slice misaligned for its type is copied into staging); output 1 for a lone request: ONNX Runtime computes it into the region itself (an output tensor over the mapping), and only onnxruntime-node's copy out (2), which is not used, remains; 2 when it cannot (a coalesced batch, an output axis the graph leaves symbolic, a slice misaligned for its type or over the request's input bytes): (2), then one into the region; the response carries an empty entry | 2 |
 * | coalesced (several requests in one execution) | +1: each request's rows are copied once into the joined input (staging memory, reused); each request's outputs are views of the batch's, copied once into its own response (3) | 2 |
 * | hooks (preprocess and postprocess) | inline's (a large message's bytes go to the hook uncopied only when aligned for their type), plus what the hooks themselves allocate; preprocess's tensors go from the hook thread to the device directly, through the thread's door to it (HookFeed: the main thread never receives them); with a postprocess hook the outputs go to it as tensors and protobufjs encodes the response on the main thread (3); a request's rows of a coalesced output are copied once before going to postprocess (a buffer transfers once) | preprocess only: 3, main -> hook -> device -> main; postprocess only: 4, main -> device -> main -> hook -> main; both: 5 |
 * | meta sub-call | the run hook's tensors are copied once in the hook thread (it may reuse them); passed to the device as they are (no re-encode, no decode copy); each output copied once to go back to the hook thread | 4 per sub-call: hook -> main -> device -> main -> hook |
 *
 * The floor with these libraries is 3 for a large inline request: (1), (2) and (4) are made by
 * grpc-js and onnxruntime-node whatever we do. Reaching it means handing grpc-js the response's
 * header and the binding's output buffers as one message without joining them (docs/performance.md).
 */
import type { Gateway } from '../actors/gateway/gateway.js';
import type { HookFeedTarget, InferRequest, InferResult } from '../actors/device/handle.js';
import type { HookPool } from '../actors/hooks/handle.js';
import type { ExecutionTiming, RegionSlice, WireTensor } from '../shared/channels/device.js';
import { nowMs } from '../shared/channels/device.js';
import type { HookContext } from '../shared/channels/hooks.js';
import { errors, quote, StowageError } from '../shared/errors.js';
import type { ModelSpec } from '../shared/model-spec.js';
import { checkHookTensors, decodeInferRequest, decodeTensors, inferResponse, slicesOf, type DecodedRequest } from '../protocol/codec.js';
import { ownsItsBuffer } from '../protocol/message-buffers.js';
import { EncodedResponse } from '../protocol/infer-response-wire.js';
import type { ModelInferRequest, ModelInferResponse } from '../protocol/types.js';
import type { ModelRegistry } from './model-registry.js';
import type { SharedMemoryRegistry } from './shared-memory.js';
import type { Statistics } from './statistics.js';

export interface PipelineContext {
  registry: ModelRegistry;
  hooks: HookPool;
  /** Which device serves a request (a pass-through with one device). */
  gateway: Gateway;
  statistics: Statistics;
  sharedMemory: SharedMemoryRegistry;
}

/** What one inference produced: its outputs, or its response already encoded by the device. */
interface Outcome {
  outputs: WireTensor[];
  response?: Uint8Array;
  queueNs: number;
  timing: ExecutionTiming;
}

/** A meta model runs no execution of its own: its sub-models count theirs. */
const NO_EXECUTION: ExecutionTiming = { computeInputNs: 0, computeInferNs: 0, computeOutputNs: 0, batchRows: 0, executedBatchSize: 0, requests: 1 };

/** What a hook sees of the request beside its tensors. */
function hookContext(req: ModelInferRequest): HookContext {
  const parameters: HookContext['parameters'] = {};
  for (const [key, p] of Object.entries(req.parameters)) {
    if (!p.parameter_choice) continue;
    const value = p[p.parameter_choice] as boolean | number | string;
    // int64/uint64 arrive as strings (every digit kept); hooks get numbers.
    parameters[key] = p.parameter_choice === 'int64_param' || p.parameter_choice === 'uint64_param' ? Number(value) : value;
  }
  return { model: req.model_name, requestId: req.id, parameters };
}

export class Pipeline {
  readonly #ctx: PipelineContext;

  constructor(ctx: PipelineContext) {
    this.#ctx = ctx;
  }

  /**
   * One inference request from the wire. `callDeadlineMs` is the gRPC deadline (Infinity if none);
   * the request's `timeout` parameter may shorten it. `signal` fires if the client cancels.
   */
  async infer(req: ModelInferRequest, callDeadlineMs: number, signal: AbortSignal): Promise<ModelInferResponse | EncodedResponse> {
    const { registry, sharedMemory } = this.#ctx;
    const started = process.hrtime.bigint();
    const lease = registry.acquire(req.model_name, req.model_version);
    const { spec } = lease;
    let slices: RegionSlice[] = [];
    try {
      // Hooks read typed arrays over the bytes, which must be aligned; the device aligns them itself.
      const handOver = !ownsItsBuffer(req) ? 'none' : spec.hooks ? 'aligned' : 'any';
      const decoded = decodeInferRequest(req, spec, sharedMemory, handOver);
      slices = slicesOf(decoded);
      sharedMemory.hold(slices); // no await since decoding: the regions are still registered
      if (slices.length && spec.kind === 'meta') throw errors.unsupported(`meta model ${JSON.stringify(spec.name)} takes its tensors inline, not in shared memory`);
      if (slices.length && spec.hooks) {
        throw errors.unsupported(`model ${JSON.stringify(spec.name)} runs model.js hooks, which read and write tensors in the request; send them inline, not in shared memory`);
      }
      const deadlineMs = Math.min(callDeadlineMs, decoded.timeoutUs === undefined ? Infinity : nowMs() + decoded.timeoutUs / 1000);
      const outcome = await this.#run(spec, lease.instance, decoded, hookContext(req), deadlineMs, signal, { id: req.id });
      const response = outcome.response ? new EncodedResponse(outcome.response) : inferResponse(spec, req.id, outcome.outputs);
      this.#ctx.statistics.recordSuccess(spec.name, decoded.batchSize, Number(process.hrtime.bigint() - started), outcome.queueNs, outcome.timing);
      return response;
    } catch (err) {
      this.#ctx.statistics.recordFailure(spec.name, err instanceof StowageError ? err.code : undefined, Number(process.hrtime.bigint() - started));
      throw err;
    } finally {
      registry.release(lease);
      sharedMemory.release(slices); // a region unregistered meanwhile closes with its last request
    }
  }

  /** A meta model's sub-call: tensors in, tensors out, scheduled and counted like any request. */
  async #subInfer(meta: ModelSpec, parent: HookContext, model: string, tensors: WireTensor[], outputs: string[], deadlineMs: number, signal: AbortSignal): Promise<WireTensor[]> {
    if (!meta.subModels.includes(model)) {
      throw errors.invalidRequest(`meta model ${JSON.stringify(meta.name)} may call only ${meta.subModels.join(', ')} (its manifest's models), not ${quote(model)}`);
    }
    const started = process.hrtime.bigint();
    const lease = this.#ctx.registry.acquire(model);
    try {
      const decoded = decodeTensors(tensors, outputs, lease.spec);
      const outcome = await this.#run(lease.spec, lease.instance, decoded, { model, requestId: parent.requestId, parameters: {} }, deadlineMs, signal, null);
      this.#ctx.statistics.recordSuccess(model, decoded.batchSize, Number(process.hrtime.bigint() - started), outcome.queueNs, outcome.timing);
      return outcome.outputs;
    } catch (err) {
      this.#ctx.statistics.recordFailure(model, err instanceof StowageError ? err.code : undefined, Number(process.hrtime.bigint() - started));
      throw err;
    } finally {
      this.#ctx.registry.release(lease);
    }
  }

  /**
   * Hooks and the device: the decoded request to its outputs, in the order the client asked.
   * `encode` (a request off the wire): the device encodes the response when the outputs go
   * straight back to the client, that is when no postprocess hook reads them.
   */
  async #run(spec: ModelSpec, instance: string, decoded: DecodedRequest, context: HookContext, deadlineMs: number, signal: AbortSignal,
    encode: { id: string } | null): Promise<Outcome> {
    const { hooks, gateway } = this.#ctx;
    const rows = Math.max(decoded.batchSize, 1);
    if (spec.kind === 'meta') {
      // Its run hook (in the pool) calls sub-models, within this request's deadline and cancelled with it.
      const subInfer = (model: string, tensors: WireTensor[], outputs: string[]) => this.#subInfer(spec, context, model, tensors, outputs, deadlineMs, signal);
      const returned = await hooks.run(spec.name, 'run', spec.hooks!, decoded.inputs, context, subInfer);
      const all = checkHookTensors(spec.name, 'run', returned, spec.clientOutputs, rows);
      return { outputs: decoded.outputs.map((name) => all.find((t) => t.name === name)!), queueNs: 0, timing: NO_EXECUTION };
    }
    // With a postprocess hook the executable's every output goes to it; without, the client's choice.
    const post = spec.hooks?.postprocess === true;
    const executableOutputs = post ? spec.outputs.map((t) => t.name) : decoded.outputs;
    const request: InferRequest = {
      instance,
      inputs: decoded.inputs,
      outputs: executableOutputs,
      outputRegions: post ? executableOutputs.map(() => null) : decoded.outputRegions,
      encode: post ? null : encode,
      deadlineMs,
    };
    const result = spec.hooks?.preprocess
      ? await this.#preprocessed(spec, request, rows, context, signal)
      : await gateway.infer(spec.name, request, signal);
    let outputs = result.outputs;
    if (post) {
      const all = checkHookTensors(spec.name, 'postprocess', await hooks.run(spec.name, 'postprocess', spec.hooks!, outputs, context), spec.clientOutputs, rows);
      outputs = decoded.outputs.map((name) => all.find((t) => t.name === name)!);
    }
    return { outputs, response: result.response, queueNs: result.queueNs, timing: result.timing };
  }

  /**
   * A request through its preprocess hook, whose tensors go from the hook thread to the device
   * directly (HookFeed): the device is picked and handed the request first, without inputs; the
   * hook is told where to send them. A failed hook cancels the request on the device and fails
   * it with the hook's error.
   */
  async #preprocessed(spec: ModelSpec, request: InferRequest, rows: number, context: HookContext, signal: AbortSignal): Promise<InferResult> {
    const { hooks, gateway } = this.#ctx;
    let to: HookFeedTarget | undefined;
    const abandon = new AbortController();
    const onAbort = () => abandon.abort();
    signal.addEventListener('abort', onAbort, { once: true });
    try {
      const executed = gateway.infer(spec.name, { ...request, inputs: [], inputsFromHook: (target) => { to = target; } }, abandon.signal);
      executed.catch(() => {}); // when the hook fails, its error is the one reported
      const target = to;
      if (!target) return await executed; // refused before it reached a device
      try {
        const door = await hooks.preprocessInto(spec.name, spec.hooks!, request.inputs, context, { ...target, inputs: spec.inputs, rows });
        if (door) gateway.device(target.deviceId).adoptDoor(door, target.generation);
      } catch (err) {
        abandon.abort();
        throw err;
      }
      return await executed;
    } finally {
      signal.removeEventListener('abort', onAbort);
    }
  }
}
