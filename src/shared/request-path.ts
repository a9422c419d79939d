/**
 * The request path: what one inference goes through between an edge (gRPC or REST) and the
 * device, for ModelInfer, each request of ModelStreamInfer, a REST inference and a meta model's
 * sub-calls alike, on whichever thread holds the request: an edge thread, or the main thread when
 * it is the only edge (or for what an edge cannot take: see "Rooms" below). One module, one order:
 *
 *   [edge: decode] -> lease -> check (request-check.ts) -> route -> [preprocess, on a hook thread, which feeds the
 * device] -> device -> [postprocess] -> count -> [edge: encode]   (without a hook making them, the outputs are written
 * into the frame the edge's allocator asked for: for gRPC   the response is framed around them,
 * protocol/codec.ts)   (a meta model: lease -> check -> run hook, whose sub-calls re-enter at `lease`
 * with tensors, on this thread)
 *
 * It speaks the data plane only (data-plane.ts): an edge decodes its protocol into a
 * DataPlaneRequest, hands it over with an OutputLayout (where the outputs go), and encodes the
 * InferenceAnswer itself.
 *
 * Rooms: what the path stands on, behind `PathRooms`: one class for every thread that holds
 * requests (actors/rooms/rooms.ts: the routes the registry sends, the devices the thread reaches,
 * the lease slots, request counters and region holds in shared memory, hook threads). Rooms that
 * cannot take a request (no route for the model there) say so at `acquire`, before anything is
 * done: the request goes elsewhere as it is (from an edge to the main thread, whose rooms refuse
 * it saying why).
 *
 * A request, once its model is leased and its tensors checked, is one object (`PathRequest`: its
 * lease, checked tensors, hook context, deadline and priority, cancellation, spans, output layout
 * and held regions) that every later step reads; a request off the wire and a meta model's sub-call
 * come in by one entry (`#enter`), which counts it before its answer goes and gives back its lease.
 *
 * Copies of a request's tensor bytes, and thread hops, per path. `edge` is the thread that holds the request: an edge
 * thread, or the main thread when it is the only edge. `copies` counts every copy of the bytes of one request's input
 * and output tensors (in units of their size: a copy of the input and one of the output are two), `native` those made
 * in a library's C++ where no JavaScript sees them (the copy probe cannot count those), and the next column says which
 * thread makes each. Each copy in our code is a line marked
 * `// copy:`. test/integration/copies.test.js reads this table and counts the copies each path
 * really makes, so a copy added or removed fails it until the table says so.
 *
 * | path | copies | native | each copy, in order (thread) | hops |
 * | --- | --- | --- | --- | --- |
 * | inline lone | 3 | 0 | grpc-js joins the HTTP/2 frames into one message, an ArrayBuffer of its own when the message is at least half `Buffer.poolSize` (32 KiB on Node 24; protobufjs decodes `bytes` as views of it), which is transferred to the device as it is (protocol/proto.ts) and read by ONNX Runtime in place (edge); ONNX Runtime writes each output into memory the device gives it (reused staging), no copy after the run; the output into the frame the gRPC edge asked for (actors/device/execution.ts, frameOutputs), transferred back (device), around which the edge frames the response, writing only its header (protocol/codec.ts, edge); grpc-js copies the message into its frame (edge) | 2: edge -> device -> edge |
 * | REST binary lone | 1 | 0 | Node's http hands the body over in chunks, joined into one buffer of its own (http-edge.ts, edge); the tensor after the JSON header is a view of it, transferred to the device as it is (as inline lone's); ONNX Runtime writes the output into a buffer of the request's own, transferred back as it is; the JSON header and the output's bytes are written to the socket one after the other, not joined (http-edge.ts) | 2: edge -> device -> edge |
 * | REST JSON lone | 0 | 0 | no copy of the tensor's bytes: Node's http hands the JSON body over in chunks, joined into one buffer of its own (http-edge.ts, edge: a copy of the JSON text, which the copy test counts apart); the `data` array is converted into the datatype's bytes in a buffer of the request's own (rest-tensors.ts, edge: a conversion, not a copy), transferred to the device as it is; ONNX Runtime writes the output into a buffer of the request's own, transferred back as it is; its bytes are converted into JSON numbers (edge: a conversion; an output misaligned for its type is copied first) | 2: edge -> device -> edge |
 * | inline small | 4 | 0 | as inline lone, and a message under half `Buffer.poolSize` sits in Node's shared pool, which cannot be transferred: its bytes are copied into a buffer of their own (`inlineData`, request-check.ts, edge) | 2 |
 * | inline misaligned | 4 | 0 | as inline lone, and an input whose bytes are misaligned for its type in the message is copied into reused staging memory (actors/device/execution.ts, Staging) before ONNX Runtime reads it (device) | 2 |
 * | inline padded | 4 | 0 | as inline lone, and a lone request run by an executable compiled for more rows is copied into staging, padded with zero rows (device) | 2 |
 * | inline coalesced | 4 | 0 | as inline lone (the output's copy into the response reads the request's rows of the batch's output), and each request's rows are copied into the joined input in staging (device) | 2 |
 * | typed contents | 4 | 0 | as inline small, with the JS arrays converted into bytes instead of `inlineData`'s copy (codec.ts, edge) | 2 |
 * | shared memory in place | 0 | 0 | inputs are read in place from the mapped region (a slice misaligned for its type is copied into staging, device); a lone request's output whose shape the graph fixes is computed by ONNX Runtime into the region itself; the response carries an empty entry | 2 |
 * | shared memory coalesced | 1 | 0 | requests that rode together, their outputs in one region laid end to end in the batch's order (the device orders a batch by its requests' output slices): each request's input rows are copied into the joined input in staging (device); ONNX Runtime computes the batch's output into the region itself, every request's rows landing in its own slice | 2 |
 * | shared memory copied | 1 | 0 | as shared memory in place, but when ONNX Runtime cannot write into the region (a coalesced batch whose slices are not end to end in one region, an output axis the graph leaves symbolic, a slice misaligned for its type or over the request's input bytes) it writes into staging and the output is copied into the region after the run (device) | 2 |
 * | hooked | 3 | 0 | pre- and postprocess, lone: grpc-js's join (edge); the message's buffer goes to the hook thread whole (a view misaligned for its type is copied first by `inlineData`, request-check.ts, edge); what the hooks return is their own (a returned view of part of a buffer is copied, a plain array converted: hook); preprocess's tensors go from the hook thread to the device through its door, never to the edge; ONNX Runtime writes each output into a buffer of the request's own, which goes to postprocess as it is; protobufjs encodes the response (edge); grpc-js's frame (edge). (A preprocess hook alone: its own row.) A coalesced request's rows of each output are copied out of the batch's before going to postprocess (device) | postprocess only: 4, edge -> device -> edge -> hook -> main; both: 5 |
 * | preprocess only | 3 | 0 | a preprocess hook alone, lone: grpc-js's join (edge); the message's buffer goes to the hook thread whole (as hooked's); what the hook returns is its own (hook); its tensors go from the hook thread to the device through its door; ONNX Runtime writes each output into staging, and the device copies it into the frame the edge asked for (actors/device/execution.ts, frameOutputs), around which the edge frames the response (device, as inline lone's); grpc-js's frame (edge) | 3: edge -> hook -> device -> edge |
 * | meta sub-call | 1 | 0 | the run hook's tensors are copied once on the hook thread, which may reuse them (hook); passed to the device as they are (no re-encode, no decode copy); ONNX Runtime writes the outputs into buffers of the sub-call's own, which go back to the hook thread as they are | 4 per sub-call: hook -> edge -> device -> edge -> hook |
 * | inline lone, backend cuda | 4 | 0 | as inline lone, and the input copied into pinned staging (actors/device/execution.ts, Staging; device), from which ONNX Runtime's own copy to the GPU runs at the bus's speed; the output is written into pinned staging by ONNX Runtime's copy from the GPU. ONNX Runtime's copies to and from the GPU are the device's, as on any GPU server, and are not counted | 2 |
 * | CUDA shared memory in place | 0 | 0 | backend cuda, a lone request: its input is bound to the run in the client's GPU memory as it is (its region on the run's GPU, at an offset cudaMalloc's 256-byte alignment allows: actors/device/regions.ts), and an output whose shape the graph fixes is computed by ONNX Runtime into its region; nothing crosses the bus | 2 |
 * | CUDA shared memory copied | 2 | 0 | as CUDA shared memory in place, but an input on another GPU (or misaligned) is copied GPU to GPU once into the device's scratch memory (device), and an output ONNX Runtime cannot write into its region (on another GPU, misaligned, a symbolic axis) is written on the host and copied into the region after the run (device, host to GPU). A coalesced (or padded) batch whose every request has the input in a CUDA region is joined GPU to GPU in scratch memory, each request's rows copied once (device); one that mixes them with inline inputs copies its CUDA inputs to the host into the joined input in staging (device, GPU to host), then goes as inline coalesced's | 2 |
 * | inline lone, CUDA graph | 4 | 0 | as inline lone, backend cuda, with our own copies to and from the GPU in place of ONNX Runtime's (not counted either): the staged input into the graph's slot (cuda-graphs.ts, a host-to-GPU copy), the output from the slot into staging (GPU to host), since a captured graph reads and writes fixed addresses | 2 |
 * | CUDA shared memory, CUDA graph | 2 | 0 | as CUDA shared memory in place, with a graph: the input copied GPU to GPU from its region into the graph's slot, the output from the slot into its region (cuda-graphs.ts; device), since a captured graph reads and writes fixed addresses; nothing crosses the bus | 2 |
 *
 * With edge threads, what an edge does not take (a model without a route there, a region it has
 * not heard of yet) goes to the main thread's rooms as it is, its inline buffers
 * transferred (no copy): two hops more, edge -> main and back.
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
import type { MessagePort } from 'node:worker_threads';
import type { HookFeedTarget } from './channels/device.js';
import { type ExecutionTiming, type InferenceRequest, type InferenceResult, type OutputFrame, type RegionSlice, type WireTensor } from './channels/inference.js';
import { nowMs } from './timers.js';
import type { HookContext, HookFeed, HookName } from './channels/hooks.js';
import { type Admitted, type DataPlaneRequest, type Infer, type InferenceAnswer, type InferOptions, type OutputLayout, type TraceCarrier } from './data-plane.js';
import { errors, fromErrorData, quote, StowageError, type ErrorCode } from './errors.js';
import { checkHookTensors } from './hook-tensor-check.js';
import type { BundleHooks, InstanceKey, ModelSpec, TensorSpec } from './model-spec.js';
import { checkRequest, checkTensors, slicesOf, type CheckedRequest, type RegionLookup } from './request-check.js';
import { MODEL_VERSION } from './constants.js';
import type { QuotaTicket, Quotas } from './admission.js';
import type { AdmissionBacklog, DeadlineAdmission } from './backlog.js';

/** A ready model taken for one request: its spec and the instance that serves it. */
/** The frame `layout` asks for `outputs` (the model's, in response order). */
export function frameOf(layout: OutputLayout, outputs: readonly Pick<TensorSpec, 'name' | 'datatype' | 'shape'>[]): OutputFrame {
  let headroom = layout.fixed;
  for (const t of outputs) {
    headroom += layout.perOutput + layout.perDimension * t.shape.length + Buffer.byteLength(t.name, 'utf8') + Buffer.byteLength(t.datatype, 'utf8');
  }
  return { headroom, gap: layout.gap };
}

export interface PathLease {
  spec: ModelSpec;
  instance: InstanceKey;
}

/** How a meta model's run hook calls a sub-model: the path runs it like any request. */
export type SubInfer = (model: string, tensors: WireTensor[], outputs: string[]) => Promise<WireTensor[]>;

/**
 * What bounds a hook call besides hooks.timeout_seconds: its request's cancellation and deadline (on
 * the nowMs clock). A call still waiting for a hook thread when either comes is dropped, never run.
 */
export interface HookBound {
  signal: AbortSignal;
  deadlineMs: number;
}

/** The hook threads as the path reaches them (actors/hooks/handle.ts HookPool). */
export interface PathHooks {
  run(model: string, hook: HookName, hooks: BundleHooks, given: WireTensor[], context: HookContext, bound: HookBound, subInfer?: SubInfer): Promise<WireTensor[]>;
  /**
   * A preprocess hook whose tensors go to the device (HookFeed); with the thread's new door to it, when it made one.
   */
  preprocessInto(model: string, hooks: BundleHooks, given: WireTensor[], context: HookContext, feed: HookFeed, bound: HookBound): Promise<MessagePort | undefined>;
}

/** A request's spans when it is traced (tracing.ts RequestTrace). */
export interface PathSpans {
  subCall(model: string): PathSpans;
  /** The span's context, for a child made on another thread. */
  carrier(): TraceCarrier;
  around<T>(name: string, work: () => Promise<T>): Promise<T>;
  device(model: string, handedOverMs: number, queueNs: number, timing: ExecutionTiming): void;
  end(err?: unknown): void;
}

/** Shared-memory regions where this thread can read them (node/shared-memory.ts). */
export interface PathRegions extends RegionLookup {
  /** Keep the regions of a request's slices mapped until `release`, even if unregistered meanwhile. */
  hold(slices: readonly RegionSlice[]): void;
  release(slices: readonly RegionSlice[]): void;
}

/** What the path stands on, on one thread (see "Rooms" above). */
export interface PathRooms<L extends PathLease> {
  /** A lease on `model`'s serving instance for one request; null: these rooms cannot run it, and it goes elsewhere. */
  acquire(model: string, version: string): L | null;
  /** Given back once the request is answered (an unload waits for it). */
  release(lease: L): void;
  /**
   * Run the request on the device the routing picks for the lease's model (DeviceClient.infer):
   * with `feedFromHook` it goes without inputs, which the hook thread preprocessing it sends.
   */
  infer(lease: L, request: InferenceRequest, signal: AbortSignal, feedFromHook?: (to: HookFeedTarget) => void): Promise<InferenceResult>;
  /**
   * A hook thread's new door to the device a feed went to (DeviceClient.adoptDoor); closed when that device is gone.
   */
  adoptDoor(target: HookFeedTarget, port: MessagePort): void;
  hooks: PathHooks;
  /** Shared-memory regions where this thread reads them. */
  regions: PathRegions;
  /**
   * The published backlog (shared/backlog.ts) of the device the lease's request goes to, where the work ahead of it is
   * read and its deadline noted; undefined when none is known.
   */
  backlog(lease: L): AdmissionBacklog | undefined;
  /** What this thread learned of its models' runs, to refuse at once a request that would miss its deadline. */
  deadlines: Pick<DeadlineAdmission, 'refusal' | 'learn' | 'runMs'>;
  /** The node's quotas (shared/admission.ts), counted with every other thread's. */
  quotas: Pick<Quotas, 'tenantOf' | 'admit' | 'prepay' | 'subCall' | 'charge' | 'leave' | 'answered'>;
  /** Count one request answered, or failed (with its error's code), on its model's statistics. */
  succeeded(lease: L, batchSize: number, durationNs: number, queueNs: number, timing: ExecutionTiming): void;
  failed(lease: L, code: ErrorCode | undefined, durationNs: number): void;
  /** The request's spans; null when tracing is off (no span, no allocation for one). */
  trace(request: { model: string; version: string; id: string }, carrier: TraceCarrier | undefined, protocol: 'grpc' | 'http', admitted?: Admitted): PathSpans | null;
  /** A meta model's sub-call to a model these rooms have no lease for (acquire said null): run where it can be. */
  elsewhere: Infer;
}

/**
 * How soon a request must run: its absolute deadline (Infinity: none) and its priority level (0: its model's default).
 */
export interface Urgency {
  deadlineMs: number;
  priority: number;
}

/**
 * One request on its way through the path, made once its model is leased and its tensors checked:
 * what every later step reads (the device command, the hooks, the counts, the spans), so that none
 * takes them one by one. A meta model's sub-call is one too, made from its parent's.
 */
export interface PathRequest<L extends PathLease> {
  readonly lease: L;
  readonly checked: CheckedRequest;
  /** What hooks see of it (the model, the request's id, its parameters). */
  readonly context: HookContext;
  readonly urgency: Urgency;
  /** Fires if the client goes (a sub-call's is its parent's). */
  readonly signal: AbortSignal;
  /** Its spans when traced; null: not traced. */
  readonly spans: PathSpans | null;
  /** Where the edge wants its outputs (null: tensors of their own, as a sub-call's). */
  readonly layout: OutputLayout | null;
  /** The shared-memory regions it holds until it is answered. */
  readonly slices: readonly RegionSlice[];
  /** Its places under the quotas (given back when it is answered), and whom its device time is charged to. */
  readonly quota: QuotaTicket | null;
  /** The tenant it is counted under once answered (Quotas.tenantOf); null: a sub-call, counted in its parent. */
  readonly tenant: string | null;
}

/** A request run: the device's (or the hooks') result, and the frame its outputs were written into, if any. */
interface Ran {
  result: InferenceResult;
  frame: OutputFrame | null;
}

/** A meta model runs no execution of its own: its sub-models count theirs. */
const NO_EXECUTION: ExecutionTiming = { computeInputNs: 0, computeInferNs: 0, computeOutputNs: 0, batchRows: 0, executedBatchSize: 0, requests: 1 };

const codeOf = (err: unknown) => (err instanceof StowageError ? err.code : undefined);

export class RequestPath<L extends PathLease> {
  readonly #rooms: PathRooms<L>;

  constructor(rooms: PathRooms<L>) {
    this.#rooms = rooms;
  }

  /**
   * One inference request from an edge, protocol-free (data-plane.ts); null when this thread
   * cannot take it (`PathRooms.acquire`). `callDeadlineMs` is the call's deadline (Infinity if
   * none); the request's `timeout` may shorten it. `signal` fires if the client cancels.
   * `outputs`: the edge's layout for the outputs, made a frame once the model is known (none:
   * tensors of their own).
   */
  infer(req: DataPlaneRequest, options: InferOptions): Promise<InferenceAnswer> | null {
    const started = process.hrtime.bigint();
    // Tracing on: a span in the trace the request's traceparent names (tracing.ts), once the rooms take it; else null.
    const spans = () => this.#rooms.trace({ model: req.model, version: req.version || MODEL_VERSION, id: req.id }, options.trace, options.protocol, options.admitted) ?? null;
    const ran = this.#enter(req.model, req.version, started, spans, (lease, made) => this.#fromWire(lease, req, options, made));
    return ran && ran.then(({ result, frame }) => ({ outputs: result.outputs, framed: result.framed && frame ? { bytes: result.framed, frame } : null }));
  }

  /** A request off the wire as the path carries it: checked against its model, its regions held. */
  #fromWire(lease: L, req: DataPlaneRequest, options: InferOptions, spans: PathSpans | null): PathRequest<L> {
    const { spec } = lease;
    if (req.refused) throw fromErrorData(req.refused); // the model exists: now what was wrong with the request
    // Its tenant's and its model's places first: a flood over its quota is refused before its tensors are checked,
    // for the least CPU (that the requests admitted need); a request refused later gives them back.
    const tenant = this.#rooms.quotas.tenantOf(options.tenant);
    const quota = this.#rooms.quotas.admit(spec.name, tenant);
    try {
      return this.#checked(lease, req, options, quota, tenant, spans);
    } catch (err) {
      this.#rooms.quotas.leave(quota);
      throw err;
    }
  }

  /** The rest of #fromWire, once the request holds its quota places: checked, then its regions held. */
  #checked(lease: L, req: DataPlaneRequest, { callDeadlineMs, signal, outputs }: InferOptions, quota: QuotaTicket | null, tenant: string, spans: PathSpans | null): PathRequest<L> {
    const { spec } = lease;
    // Hooks read typed arrays over the bytes, which must be aligned; the device aligns them itself.
    const checked = checkRequest(req, spec, this.#rooms.regions, spec.hooks ? 'aligned' : 'any');
    const slices = slicesOf(checked);
    if (slices.length && spec.kind === 'meta') throw errors.unsupported(`meta model ${JSON.stringify(spec.name)} takes its tensors inline, not in shared memory`);
    if (slices.length && spec.hooks) {
      throw errors.unsupported(`model ${JSON.stringify(spec.name)} runs model.js hooks, which read and write tensors in the request; send them inline, not in shared memory`);
    }
    const deadlineMs = Math.min(callDeadlineMs, req.timeoutUs === undefined ? Infinity : nowMs() + req.timeoutUs / 1000);
    const priority = req.priority ?? 0;
    // A request the work ahead of it on the device would keep past its deadline is refused now, before it runs.
    const late = this.#rooms.deadlines.refusal(spec, { priority, deadlineMs, rows: checked.rows }, this.#rooms.backlog(lease));
    if (late) throw late;
    // Its run charged to its quotas' rates now, settled once it ran: what is let through ahead of its
    // charges counts too (a model this thread has not seen run is charged after its run alone). Only
    // where a rate applies: most requests have no quota, and their path reads no learned cost.
    if (quota?.rated) this.#rooms.quotas.prepay(quota, this.#rooms.deadlines.runMs(spec.name, checked.rows));
    // No await since checking: the regions are still registered (an edge's may have been
    // unregistered meanwhile: its hold fails as a region not found, holding nothing). Last, so that
    // nothing throws between holding them and the path's release.
    if (slices.length) this.#rooms.regions.hold(slices);
    return {
      lease, checked, signal, spans, slices, quota, tenant,
      context: { model: req.model, requestId: req.id, parameters: checked.parameters },
      urgency: { deadlineMs, priority },
      // Without a postprocess hook the device's outputs go straight back: framed as the edge asked.
      layout: outputs ?? null,
    };
  }

  /**
   * The one way into the path, for a request off the wire and a meta model's sub-call alike: the
   * model leased (null: these rooms cannot take it, and no span is made for it here), its spans
   * made, the request made (`make`), run, counted before its answer goes and before its lease is
   * given back (whoever asks for statistics after the answer finds it counted), its spans ended,
   * its lease and regions given back.
   */
  #enter(model: string, version: string, started: bigint, spans: () => PathSpans | null, make: (lease: L, spans: PathSpans | null) => PathRequest<L>): Promise<Ran> | null {
    let lease: L | null;
    try {
      lease = this.#rooms.acquire(model, version);
    } catch (err) {
      return Promise.reject(err);
    }
    return lease && this.#served(lease, started, spans(), make);
  }

  async #served(lease: L, started: bigint, spans: PathSpans | null, make: (lease: L, spans: PathSpans | null) => PathRequest<L>): Promise<Ran> {
    const rooms = this.#rooms;
    let request: PathRequest<L> | null = null;
    try {
      request = make(lease, spans);
      const ran = await this.#run(request);
      const durationNs = Number(process.hrtime.bigint() - started);
      rooms.succeeded(lease, request.checked.batchSize, durationNs, ran.result.queueNs, ran.result.timing);
      if (request.tenant !== null) rooms.quotas.answered(request.tenant, durationNs);
      spans?.end();
      return ran;
    } catch (err) {
      rooms.failed(lease, codeOf(err), Number(process.hrtime.bigint() - started));
      spans?.end(err);
      throw err;
    } finally {
      rooms.release(lease);
      rooms.quotas.leave(request?.quota ?? null);
      // A region unregistered meanwhile closes with its last request.
      if (request?.slices.length) rooms.regions.release(request.slices);
    }
  }

  /**
   * A meta model's sub-call: tensors in, tensors out, scheduled and counted like any request, on
   * this thread when it can, within its parent's deadline, at its parent's priority, cancelled with it.
   */
  async #subInfer(parent: PathRequest<L>, model: string, tensors: WireTensor[], outputs: string[]): Promise<WireTensor[]> {
    const meta = parent.lease.spec;
    if (!meta.subModels.includes(model)) {
      throw errors.invalidRequest(`meta model ${JSON.stringify(meta.name)} may call only ${meta.subModels.join(', ')} (its manifest's models), not ${quote(model)}`);
    }
    const started = process.hrtime.bigint();
    let made: PathSpans | null | undefined;
    const spansOf = () => (made === undefined ? (made = parent.spans?.subCall(model) ?? null) : made);
    const ran = this.#enter(model, '', started, spansOf, (lease, spans) => ({
      lease, spans, slices: [],
      checked: checkTensors(tensors, outputs, lease.spec),
      context: { model, requestId: parent.context.requestId, parameters: {} },
      urgency: parent.urgency,
      signal: parent.signal,
      layout: null,
      quota: this.#rooms.quotas.subCall(parent.quota, model),
      tenant: null,
    }));
    if (ran) return (await ran).result.outputs;
    const { urgency: { deadlineMs, priority }, signal } = parent;
    const spans = spansOf();
    const trace = spans?.carrier();
    try {
      const answer = await this.#rooms.elsewhere(subCallRequest(model, tensors, outputs, priority), { callDeadlineMs: deadlineMs, signal, outputs: null, protocol: 'grpc', ...(trace ? { trace } : {}) });
      spans?.end();
      return answer.outputs;
    } catch (err) {
      spans?.end(err);
      throw err;
    }
  }

  /** The request run as its model runs: a meta model's run hook, hooks around the device, or the device alone. */
  #run(request: PathRequest<L>): Promise<Ran> {
    const { spec } = request.lease;
    if (spec.kind === 'meta') return this.#runMeta(request);
    if (spec.hooks) return this.#hooked(request);
    // The plain request, the most of them: straight to the device, its outputs into the edge's frame.
    const command = this.#deviceCommand(request, false);
    return this.#device(request, command).then((result) => ({ result, frame: command.frame }));
  }

  /**
   * The device command for a request. With a layout (a request off the wire, without a postprocess
   * hook) the outputs are framed as the edge asked, since they go straight back to the client from
   * the device. `post`: every output of the executable goes to the postprocess hook.
   */
  #deviceCommand({ lease, checked, layout, urgency: { deadlineMs, priority } }: PathRequest<L>, post: boolean): InferenceRequest {
    const { spec } = lease;
    const executableOutputs = post ? spec.outputs.map((t) => t.name) : checked.outputs;
    return {
      instance: lease.instance,
      inputs: checked.inputs,
      rows: checked.rows,
      outputs: executableOutputs,
      outputRegions: post ? executableOutputs.map(() => null) : checked.outputRegions,
      frame: post || !layout ? null : frameOf(layout, checked.outputs.map((name) => spec.clientOutputs.find((t) => t.name === name) as TensorSpec)),
      deadlineMs,
      ...(priority > 0 ? { priority } : {}),
    };
  }

  /** The command on the device the rooms pick, its time there in the request's spans and charged to its quotas. */
  async #device({ lease, signal, spans, quota }: PathRequest<L>, command: InferenceRequest): Promise<InferenceResult> {
    const handedOverMs = spans ? nowMs() : 0;
    const result = await this.#rooms.infer(lease, command, signal);
    this.#rooms.deadlines.learn(lease.spec.name, result.timing);
    this.#rooms.quotas.charge(quota, result.timing, command.rows);
    spans?.device(lease.spec.name, handedOverMs, result.queueNs, result.timing);
    return result;
  }

  /** A hook call, in a span of its own when the request is traced. */
  #traced<T>({ spans }: PathRequest<L>, name: string, work: () => Promise<T>): Promise<T> {
    return spans ? spans.around(name, work) : work();
  }

  /**
   * A meta model's run hook (on a hook thread), which calls sub-models within this request's
   * deadline, at its priority, cancelled with it; its outputs in the order the client asked.
   */
  async #runMeta(request: PathRequest<L>): Promise<Ran> {
    const { lease: { spec }, checked, context } = request;
    // Read only when a hook runs: an edge starts its hook threads at the first request that needs them.
    const hooks = this.#rooms.hooks;
    const subInfer: SubInfer = (model, tensors, outputs) => this.#subInfer(request, model, tensors, outputs);
    const returned = await this.#traced(request, 'hook run', () => hooks.run(spec.name, 'run', spec.hooks!, checked.inputs, context, hookBound(request), subInfer));
    const all = checkHookTensors(spec.name, 'run', returned, spec.clientOutputs, checked.rows);
    return { result: { outputs: checked.outputs.map((name) => all.find((t) => t.name === name)!), queueNs: 0, timing: NO_EXECUTION }, frame: null };
  }

  /**
   * A model's hooks around the device: its outputs in the order the client asked, each a tensor of
   * its own when a postprocess hook made them; with a preprocess hook alone, the device's, written
   * into the frame the request's layout makes (as a plain request's are), which comes back beside them.
   */
  async #hooked(request: PathRequest<L>): Promise<Ran> {
    const { lease: { spec }, checked, context } = request;
    const post = spec.hooks?.postprocess === true;
    const command = this.#deviceCommand(request, post);
    const result = spec.hooks?.preprocess
      ? await this.#traced(request, 'hook preprocess + device', () => this.#preprocessed(request, command))
      : await this.#device(request, command);
    if (!post) return { result, frame: command.frame };
    const returned = await this.#traced(request, 'hook postprocess', () => this.#rooms.hooks.run(spec.name, 'postprocess', spec.hooks!, result.outputs, context, hookBound(request)));
    const all = checkHookTensors(spec.name, 'postprocess', returned, spec.clientOutputs, checked.rows);
    return { result: { ...result, outputs: checked.outputs.map((name) => all.find((t) => t.name === name)!) }, frame: null };
  }

  /**
   * A request through its preprocess hook, whose tensors go from the hook thread to the device
   * directly (HookFeed): the device is handed the command first, without inputs; the hook is told
   * where to send them. A failed hook cancels the request on the device and fails it with the
   * hook's error.
   */
  async #preprocessed(request: PathRequest<L>, command: InferenceRequest): Promise<InferenceResult> {
    const { lease, context, signal, spans } = request;
    const { spec } = lease;
    let to: HookFeedTarget | undefined;
    const abandon = new AbortController();
    const onAbort = () => abandon.abort();
    signal.addEventListener('abort', onAbort, { once: true });
    try {
      const handedOverMs = spans ? nowMs() : 0;
      const executed = this.#rooms.infer(lease, { ...command, inputs: [] }, abandon.signal, (target) => { to = target; });
      executed.catch(() => {}); // when the hook fails, its error is the one reported
      const target = to;
      if (!target) return await executed; // refused before it reached a device
      try {
        const door = await this.#rooms.hooks.preprocessInto(spec.name, spec.hooks!, command.inputs, context, { ...target, inputs: spec.inputs, rows: command.rows }, hookBound(request));
        if (door) this.#rooms.adoptDoor(target, door);
      } catch (err) {
        abandon.abort();
        throw err;
      }
      const result = await executed;
      this.#rooms.deadlines.learn(spec.name, result.timing);
      this.#rooms.quotas.charge(request.quota, result.timing, command.rows);
      spans?.device(spec.name, handedOverMs, result.queueNs, result.timing);
      return result;
    } finally {
      signal.removeEventListener('abort', onAbort);
    }
  }
}

/** A hook call's bound: its request's cancellation and deadline. */
function hookBound({ signal, urgency: { deadlineMs } }: PathRequest<PathLease>): HookBound {
  return { signal, deadlineMs };
}

/**
 * A meta model's sub-call as a request of its own, for elsewhere (its tensors are its own: the hook thread made them),
 * at its parent's priority.
 */
function subCallRequest(model: string, tensors: WireTensor[], outputs: string[], priority: number): DataPlaneRequest {
  return {
    ...(priority > 0 ? { priority } : {}),
    model,
    version: '',
    id: '',
    inputs: tensors.map((t) => ({ name: t.name, datatype: t.datatype, shape: t.shape, bytes: { kind: 'inline', data: t.data, owned: true } })),
    outputs: outputs.map((name) => ({ name, region: null })),
    parameters: {},
  };
}
