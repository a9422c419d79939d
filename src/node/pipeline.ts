/**
 * The request path of a node, on the main thread: what one inference goes
 * through between an edge (gRPC or REST) and the device, for ModelInfer, each
 * request of ModelStreamInfer, a REST inference and a meta model's sub-calls alike.
 * It speaks the data plane only (shared/data-plane.ts): an edge decodes its
 * protocol into a DataPlaneRequest, hands it over with an OutputLayout
 * (where the outputs go), and encodes the InferenceAnswer itself.
 *
 *   [edge: decode] -> lease -> check (request-check.ts) -> route -> [preprocess, on a hook thread, which feeds the device] -> device -> [postprocess] -> statistics -> [edge: encode]
 *   (without a hook making them, the outputs are written into the frame the edge's allocator asked for: for gRPC
 *   the response is framed around them, protocol/infer-response-wire.ts)
 *   (a meta model: lease -> check -> run hook, whose sub-calls re-enter at `route` with tensors)
 *   (with edge threads, a plain request never comes here: its edge routes it to a device itself,
 *   actors/edge/direct-path.ts, with the same check, copies and hop count, edge -> device -> edge)
 *
 * Copies of a request's tensor bytes, and thread hops, per path. `copies` counts every copy of the
 * bytes of one request's input and output tensors (in units of their size: a copy of the input and
 * one of the output are two), `native` those made in a library's C++ where no JavaScript sees them
 * (the copy probe cannot count those), and the next column says which thread makes each. Each copy in our code is a line marked
 * `// copy:`. test/integration/copies.test.js reads this table and counts the copies each path
 * really makes, so a copy added or removed fails it until the table says so.
 *
 * | path | copies | native | each copy, in order (thread) | hops |
 * | --- | --- | --- | --- | --- |
 * | inline lone | 3 | 0 | grpc-js joins the HTTP/2 frames into one message, an ArrayBuffer of its own when the message is at least half `Buffer.poolSize` (32 KiB on Node 24; protobufjs decodes `bytes` as views of it), which is transferred to the device as it is (protocol/message-buffers.ts) and read by ONNX Runtime in place (main); ONNX Runtime writes each output into memory the device gives it (reused staging), no copy after the run; the output into the frame the gRPC edge asked for (actors/device/output-frame.ts), transferred back (device), around which the edge frames the response, writing only its header (protocol/infer-response-wire.ts, main); grpc-js copies the message into its frame (main) | 2: main -> device -> main |
 * | REST binary lone | 1 | 0 | Node's http hands the body over in chunks, joined into one buffer of its own (http-edge.ts, main); the tensor after the JSON header is a view of it, transferred to the device as it is (as inline lone's); ONNX Runtime writes the output into a buffer of the request's own, transferred back as it is; the JSON header and the output's bytes are written to the socket one after the other, not joined (http-edge.ts) | 2: main -> device -> main |
 * | REST JSON lone | 0 | 0 | no copy of the tensor's bytes: Node's http hands the JSON body over in chunks, joined into one buffer of its own (http-edge.ts, main: a copy of the JSON text, which the copy test counts apart); the `data` array is converted into the datatype's bytes in a buffer of the request's own (rest-tensors.ts, main: a conversion, not a copy), transferred to the device as it is; ONNX Runtime writes the output into a buffer of the request's own, transferred back as it is; its bytes are converted into JSON numbers (main: a conversion; an output misaligned for its type is copied first) | 2: main -> device -> main |
 * | inline small | 4 | 0 | as inline lone, and a message under half `Buffer.poolSize` sits in Node's shared pool, which cannot be transferred: its bytes are copied into a buffer of their own (`inlineData`, request-check.ts, main) | 2 |
 * | inline misaligned | 4 | 0 | as inline lone, and an input whose bytes are misaligned for its type in the message is copied into reused staging memory (staging.ts) before ONNX Runtime reads it (device) | 2 |
 * | inline padded | 4 | 0 | as inline lone, and a lone request run by an executable compiled for more rows is copied into staging, padded with zero rows (device) | 2 |
 * | inline coalesced | 4 | 0 | as inline lone (the output's copy into the response reads the request's rows of the batch's output), and each request's rows are copied into the joined input in staging (device) | 2 |
 * | typed contents | 4 | 0 | as inline small, with the JS arrays converted into bytes instead of `inlineData`'s copy (codec.ts, main) | 2 |
 * | shared memory in place | 0 | 0 | inputs are read in place from the mapped region (a slice misaligned for its type is copied into staging, device); a lone request's output whose shape the graph fixes is computed by ONNX Runtime into the region itself; the response carries an empty entry | 2 |
 * | shared memory coalesced | 1 | 0 | requests that rode together, their outputs in one region laid end to end in the batch's order (the device orders a batch by its requests' output slices): each request's input rows are copied into the joined input in staging (device); ONNX Runtime computes the batch's output into the region itself, every request's rows landing in its own slice | 2 |
 * | shared memory copied | 1 | 0 | as shared memory in place, but when ONNX Runtime cannot write into the region (a coalesced batch whose slices are not end to end in one region, an output axis the graph leaves symbolic, a slice misaligned for its type or over the request's input bytes) it writes into staging and the output is copied into the region after the run (device) | 2 |
 * | hooked | 3 | 0 | pre- and postprocess, lone: grpc-js's join (main); the message's buffer goes to the hook thread whole (a view misaligned for its type is copied first by `inlineData`, request-check.ts, main); what the hooks return is their own (a returned view of part of a buffer is copied, a plain array converted: hook); preprocess's tensors go from the hook thread to the device through its door, never to the main thread; ONNX Runtime writes each output into a buffer of the request's own, which goes to postprocess as it is; protobufjs encodes the response (main); grpc-js's frame (main). Preprocess only: the device places the outputs for the edge to frame instead of protobufjs encoding them. A coalesced request's rows of each output are copied out of the batch's before going to postprocess (device) | preprocess only: 3, main -> hook -> device -> main; postprocess only: 4, main -> device -> main -> hook -> main; both: 5 |
 * | meta sub-call | 1 | 0 | the run hook's tensors are copied once on the hook thread, which may reuse them (hook); passed to the device as they are (no re-encode, no decode copy); ONNX Runtime writes the outputs into buffers of the sub-call's own, which go back to the hook thread as they are | 4 per sub-call: hook -> main -> device -> main -> hook |
 * | inline lone, backend cuda | 4 | 0 | as inline lone, and the input copied into pinned staging (staging.ts, device), from which ONNX Runtime's own copy to the GPU runs at the bus's speed; the output is written into pinned staging by ONNX Runtime's copy from the GPU. ONNX Runtime's copies to and from the GPU are the device's, as on any GPU server, and are not counted | 2 |
 * | CUDA shared memory in place | 0 | 0 | backend cuda, a lone request: its input is bound to the run in the client's GPU memory as it is (its region on the run's GPU, at an offset cudaMalloc's 256-byte alignment allows: actors/device/regions.ts), and an output whose shape the graph fixes is computed by ONNX Runtime into its region; nothing crosses the bus | 2 |
 * | CUDA shared memory copied | 2 | 0 | as CUDA shared memory in place, but an input on another GPU (or misaligned) is copied GPU to GPU once into the device's scratch memory (device), and an output ONNX Runtime cannot write into its region (on another GPU, misaligned, a symbolic axis) is written on the host and copied into the region after the run (device, host to GPU). A coalesced (or padded) batch whose every request has the input in a CUDA region is joined GPU to GPU in scratch memory, each request's rows copied once (device); one that mixes them with inline inputs copies its CUDA inputs to the host into the joined input in staging (device, GPU to host), then goes as inline coalesced's | 2 |
 * | inline lone, CUDA graph | 4 | 0 | as inline lone, backend cuda, with our own copies to and from the GPU in place of ONNX Runtime's (not counted either): the staged input into the graph's slot (cuda-graphs.ts, a host-to-GPU copy), the output from the slot into staging (GPU to host), since a captured graph reads and writes fixed addresses | 2 |
 *
 * `native` counts copies made in a library's C++: none is left since the device runs models through
 * Stowage's own binding (native/ort.ts), which has ONNX Runtime write outputs into memory we give it
 * (an output whose shape the graph leaves open is allocated by ONNX Runtime and read in place; a
 * request that takes it as a tensor gets a copy of its own, since such memory cannot move to
 * another thread). A large inline request is at the floor grpc-js leaves, 3: its join and its frame,
 * and the one copy into the buffer the response is framed around. Going lower means ONNX Runtime
 * writing a lone request's outputs straight into that buffer where their shapes are known, or
 * handing grpc-js the header and the output buffers without joining them (docs/performance.md).
 *
 * Backend cuda adds one copy on every path whose input ONNX Runtime would read in place: the input
 * into pinned staging (device), from which the GPU reads at the bus's speed (the two cuda rows).
 * Copies between host and GPU are the device's, as on any GPU server, and are not counted. The copy
 * test counts the CPU backend's rows; the cuda rows are held by test/gpu where a GPU is.
 */
import type { Devices } from './devices.js';
import type { HookFeedTarget } from '../actors/device/handle.js';
import type { HookPool } from '../actors/hooks/handle.js';
import { nowMs, type ExecutionTiming, type InferenceRequest, type InferenceResult, type OutputFrame, type RegionSlice, type WireTensor } from '../shared/channels/inference.js';
import type { HookContext } from '../shared/channels/hooks.js';
import { frameOf, type DataPlaneRequest, type InferenceAnswer, type InferOptions, type OutputLayout } from '../shared/data-plane.js';
import { errors, fromErrorData, quote, StowageError } from '../shared/errors.js';
import { checkHookTensors } from '../shared/hook-tensor-check.js';
import type { InstanceKey, ModelSpec, TensorSpec } from '../shared/model-spec.js';
import { checkRequest, checkTensors, slicesOf, type CheckedRequest } from '../shared/request-check.js';
import type { ModelRegistry } from './model-registry.js';
import type { SharedMemoryRegistry } from './shared-memory.js';
import type { Statistics } from './statistics.js';
import { RequestTrace } from './tracing.js';
import { MODEL_VERSION } from '../shared/constants.js';

export interface PipelineContext {
  registry: ModelRegistry;
  hooks: HookPool;
  /** Which device serves a request (a pass-through with one device). */
  devices: Devices;
  statistics: Statistics;
  sharedMemory: SharedMemoryRegistry;
}

/** A meta model runs no execution of its own: its sub-models count theirs. */
const NO_EXECUTION: ExecutionTiming = { computeInputNs: 0, computeInferNs: 0, computeOutputNs: 0, batchRows: 0, executedBatchSize: 0, requests: 1 };

export class Pipeline {
  readonly #ctx: PipelineContext;

  constructor(ctx: PipelineContext) {
    this.#ctx = ctx;
  }

  /**
   * One inference request from an edge, protocol-free (shared/data-plane.ts). `callDeadlineMs` is
   * the call's deadline (Infinity if none); the request's `timeout` may shorten it. `signal` fires
   * if the client cancels. `outputs`: the edge's layout for the outputs, made a frame once the
   * model is known (none: tensors of their own).
   */
  async infer(req: DataPlaneRequest, { callDeadlineMs, signal, outputs, trace, protocol, admitted }: InferOptions): Promise<InferenceAnswer> {
    const { registry, sharedMemory } = this.#ctx;
    const started = process.hrtime.bigint();
    // Tracing on: a span in the trace the request's traceparent names (tracing.ts); else null.
    const spans = RequestTrace.request({ model: req.model, version: req.version || MODEL_VERSION, id: req.id }, trace, protocol, admitted);
    let lease;
    try {
      lease = registry.acquire(req.model, req.version);
    } catch (err) {
      spans?.end(err);
      throw err;
    }
    const { spec } = lease;
    let slices: RegionSlice[] = [];
    try {
      if (req.refused) throw fromErrorData(req.refused); // the model exists: now what was wrong with the request
      // Hooks read typed arrays over the bytes, which must be aligned; the device aligns them itself.
      const checked = checkRequest(req, spec, sharedMemory, spec.hooks ? 'aligned' : 'any');
      slices = slicesOf(checked);
      sharedMemory.hold(slices); // no await since checking: the regions are still registered
      if (slices.length && spec.kind === 'meta') throw errors.unsupported(`meta model ${JSON.stringify(spec.name)} takes its tensors inline, not in shared memory`);
      if (slices.length && spec.hooks) {
        throw errors.unsupported(`model ${JSON.stringify(spec.name)} runs model.js hooks, which read and write tensors in the request; send them inline, not in shared memory`);
      }
      const deadlineMs = Math.min(callDeadlineMs, req.timeoutUs === undefined ? Infinity : nowMs() + req.timeoutUs / 1000);
      const context: HookContext = { model: req.model, requestId: req.id, parameters: checked.parameters };
      const result = await this.#run(spec, lease.instance, checked, context, deadlineMs, signal, outputs, spans);
      this.#ctx.statistics.recordSuccess(spec.name, checked.batchSize, Number(process.hrtime.bigint() - started), result.queueNs, result.timing);
      spans?.end();
      return { outputs: result.outputs, framed: result.framed && result.frame ? { bytes: result.framed, frame: result.frame } : null };
    } catch (err) {
      this.#ctx.statistics.recordFailure(spec.name, err instanceof StowageError ? err.code : undefined, Number(process.hrtime.bigint() - started));
      spans?.end(err);
      throw err;
    } finally {
      registry.release(lease);
      sharedMemory.release(slices); // a region unregistered meanwhile closes with its last request
    }
  }

  /** A meta model's sub-call: tensors in, tensors out, scheduled and counted like any request. */
  async #subInfer(meta: ModelSpec, parent: HookContext, model: string, tensors: WireTensor[], outputs: string[], deadlineMs: number, signal: AbortSignal, parentTrace: RequestTrace | null): Promise<WireTensor[]> {
    if (!meta.subModels.includes(model)) {
      throw errors.invalidRequest(`meta model ${JSON.stringify(meta.name)} may call only ${meta.subModels.join(', ')} (its manifest's models), not ${quote(model)}`);
    }
    const started = process.hrtime.bigint();
    const spans = parentTrace?.subCall(model) ?? null;
    let lease;
    try {
      lease = this.#ctx.registry.acquire(model);
    } catch (err) {
      spans?.end(err);
      throw err;
    }
    try {
      const checked = checkTensors(tensors, outputs, lease.spec);
      const result = await this.#run(lease.spec, lease.instance, checked, { model, requestId: parent.requestId, parameters: {} }, deadlineMs, signal, null, spans);
      this.#ctx.statistics.recordSuccess(model, checked.batchSize, Number(process.hrtime.bigint() - started), result.queueNs, result.timing);
      spans?.end();
      return result.outputs;
    } catch (err) {
      this.#ctx.statistics.recordFailure(model, err instanceof StowageError ? err.code : undefined, Number(process.hrtime.bigint() - started));
      spans?.end(err);
      throw err;
    } finally {
      this.#ctx.registry.release(lease);
    }
  }

  /**
   * Hooks and the device: the checked request to its outputs, in the order the client asked.
   * `layout` (a request off the wire): the outputs are placed as the edge asked when they go
   * straight back to the client from the device, that is when no hook makes them.
   */
  async #run(spec: ModelSpec, instance: InstanceKey, checked: CheckedRequest, context: HookContext, deadlineMs: number, signal: AbortSignal,
    layout: OutputLayout | null, spans: RequestTrace | null = null): Promise<InferenceResult & { frame?: OutputFrame | null }> {
    const { hooks, devices } = this.#ctx;
    // A hook call, in a span of its own when tracing.
    const traced = <T>(name: string, work: () => Promise<T>): Promise<T> => (spans ? spans.around(name, work) : work());
    if (spec.kind === 'meta') {
      // Its run hook (in the pool) calls sub-models, within this request's deadline and cancelled with it.
      const subInfer = (model: string, tensors: WireTensor[], outputs: string[]) => this.#subInfer(spec, context, model, tensors, outputs, deadlineMs, signal, spans);
      const returned = await traced('hook run', () => hooks.run(spec.name, 'run', spec.hooks!, checked.inputs, context, subInfer));
      const all = checkHookTensors(spec.name, 'run', returned, spec.clientOutputs, checked.rows);
      return { outputs: checked.outputs.map((name) => all.find((t) => t.name === name)!), queueNs: 0, timing: NO_EXECUTION };
    }
    // With a postprocess hook the executable's every output goes to it; without, the client's choice.
    const post = spec.hooks?.postprocess === true;
    const executableOutputs = post ? spec.outputs.map((t) => t.name) : checked.outputs;
    const request: InferenceRequest = {
      instance,
      inputs: checked.inputs,
      rows: checked.rows,
      outputs: executableOutputs,
      outputRegions: post ? executableOutputs.map(() => null) : checked.outputRegions,
      frame: post || !layout ? null : frameOf(layout, checked.outputs.map((name) => spec.clientOutputs.find((t) => t.name === name) as TensorSpec)),
      deadlineMs,
    };
    const handedOverMs = nowMs();
    const result = spec.hooks?.preprocess
      ? await traced('hook preprocess + device', () => this.#preprocessed(spec, request, context, signal))
      : await devices.infer(request, signal);
    spans?.device(spec.name, handedOverMs, result.queueNs, result.timing);
    if (!post) return { ...result, frame: request.frame };
    const all = checkHookTensors(spec.name, 'postprocess', await traced('hook postprocess', () => hooks.run(spec.name, 'postprocess', spec.hooks!, result.outputs, context)), spec.clientOutputs, checked.rows);
    return { ...result, outputs: checked.outputs.map((name) => all.find((t) => t.name === name)!) };
  }

  /**
   * A request through its preprocess hook, whose tensors go from the hook thread to the device
   * directly (HookFeed): the device is picked and handed the request first, without inputs; the
   * hook is told where to send them. A failed hook cancels the request on the device and fails
   * it with the hook's error.
   */
  async #preprocessed(spec: ModelSpec, request: InferenceRequest, context: HookContext, signal: AbortSignal): Promise<InferenceResult> {
    const { hooks, devices } = this.#ctx;
    let to: HookFeedTarget | undefined;
    const abandon = new AbortController();
    const onAbort = () => abandon.abort();
    signal.addEventListener('abort', onAbort, { once: true });
    try {
      const executed = devices.infer({ ...request, inputs: [] }, abandon.signal, (target) => { to = target; });
      executed.catch(() => {}); // when the hook fails, its error is the one reported
      const target = to;
      if (!target) return await executed; // refused before it reached a device
      try {
        const door = await hooks.preprocessInto(spec.name, spec.hooks!, request.inputs, context, { ...target, inputs: spec.inputs, rows: request.rows });
        if (door) devices.device(target.deviceId).adoptDoor(door, target.generation);
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
