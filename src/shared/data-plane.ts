/**
 * The data plane: one inference as every edge hands it to the request path, whatever protocol it came
 * in by, and how the edge says where the outputs go. KServe's data plane has one request type for
 * its two protocols; Triton's core takes one InferenceRequest and a response allocator from the
 * front end. These are Stowage's, all of them data, so that they cross threads (an edge hands one
 * it does not take to the main thread's path as it is). The edges (protocol/: gRPC's codec.ts,
 * REST's rest-tensors.ts) decode into a DataPlaneRequest and encode from the answer; the path
 * (request-path.ts) and everything behind it read only these types, never a protocol's.
 *
 * What the edge settles before the path sees a request: the protocol's own framing (which raw
 * bytes belong to which input, typed values converted into bytes, parameters read by their
 * protocol types, shared-memory parameters as a `RegionRef`). What the path checks against
 * the model (shared/request-check.ts): names, datatypes, shapes, byte sizes, batch sizes, regions.
 */
import { toErrorData, type ErrorData } from './errors.js';
import type { OutputFrame, WireTensor } from './channels/inference.js';

export type { OutputFrame };

/** A tensor's bytes in a registered shared-memory region, by the region's name (not yet looked up). */
export interface RegionRef {
  kind: 'region';
  region: string;
  offset: number;
  byteSize: number;
}

/**
 * A tensor's bytes in the request itself, in KServe's raw layout (row-major little-endian
 * elements; BYTES elements each prefixed by a 4-byte length). `owned`: the ArrayBuffer `data`
 * views belongs to this request alone (a large gRPC message's, a REST body's, or bytes the edge
 * converted), so it may be handed to the device as it is; otherwise it is copied first.
 */
export interface InlineBytes {
  kind: 'inline';
  data: Uint8Array;
  owned: boolean;
}

/** One input as the client sent it: its datatype as named on the wire, checked by the request path. */
export interface RequestInput {
  name: string;
  datatype: string;
  /** Whole numbers from 0 to 2^53-1 (the edge checks that much). */
  shape: number[];
  bytes: InlineBytes | RegionRef;
}

/** One output the client asked for, and the region to write it into, if any. */
export interface RequestOutput {
  name: string;
  region: RegionRef | null;
}

/** A request's parameters as plain values (what hooks see in their context). */
export type PlainParameters = Record<string, boolean | number | string>;

/** One inference off the wire, protocol-free. */
export interface DataPlaneRequest {
  model: string;
  /** '' for the model's current version. */
  version: string;
  /** The client's id, '' when it set none; the answer carries it back. */
  id: string;
  inputs: RequestInput[];
  /** Empty: every output of the model, inline. */
  outputs: RequestOutput[];
  parameters: PlainParameters;
  /** The request's own timeout (KServe's `timeout` parameter) in microseconds, if it set one. */
  timeoutUs?: number;
  /**
   * Triton's `priority` parameter when the request set one above 0 (0, or none: the model's
   * default). Carried from both protocols' decoders alike; the device serves higher levels first (scheduler.ts).
   */
  priority?: number;
  /**
   * What was wrong with it, found while decoding its tensors and parameters (`refusedLater`): it
   * is the answer once the model is found, because which model is asked for is checked first (as
   * Triton does: an unknown model is NOT_FOUND whatever it carries). Absent: nothing was wrong.
   */
  refused?: ErrorData;
}

/**
 * `decode`'s request; or, when decoding its tensors or parameters fails, one that carries the
 * failure to be answered after its model is looked up (`DataPlaneRequest.refused`).
 */
export function refusedLater(head: Pick<DataPlaneRequest, 'model' | 'version' | 'id'>, err: unknown): DataPlaneRequest {
  return { ...head, inputs: [], outputs: [], parameters: {}, refused: toErrorData(err) };
}

/**
 * The edge's say in where a request's outputs go (Triton's response allocator), as data, so that
 * it crosses threads: one buffer with a gap of `gap` bytes before each output and, before the
 * first, a headroom of `fixed` bytes plus, for each output the client receives, `perOutput` bytes,
 * `perDimension` bytes per axis of its shape, and the UTF-8 bytes of its name and datatype (what
 * a header describing the outputs needs at most: the gRPC edge's response header). The request path
 * turns it into an OutputFrame once the model is known (request-path.ts, `frameOf`). No layout:
 * each output in a buffer of its own (REST, hooks). Shared-memory outputs are the request's `RequestOutput.region`.
 */
export interface OutputLayout {
  fixed: number;
  perOutput: number;
  perDimension: number;
  gap: number;
}

/** The trace context a request carries (W3C traceparent and tracestate), as its edge reads it. */
export interface TraceCarrier {
  traceparent?: string;
  tracestate?: string;
}

/** What admission saw of a request it let in: its bytes, and the bytes in flight with it (for its trace). */
export interface Admitted {
  bytes: number;
  inflightBytes: number;
}

/** How an edge hands one request over: its call's deadline and cancellation, where its outputs go, what to trace. */
export interface InferOptions {
  /** The call's absolute deadline (ms since the epoch), Infinity if none; the request's timeout may shorten it. */
  callDeadlineMs: number;
  /** Fires if the client cancels. */
  signal: AbortSignal;
  outputs: OutputLayout | null;
  trace?: TraceCarrier;
  /** The tenant its endpoints.tenant_key metadata or header names, as sent (shared/admission.ts); absent: none. */
  tenant?: string;
  protocol: 'grpc' | 'http';
  admitted?: Admitted;
}

/** The request path as an edge sees it, in its thread or another. */
export type Infer = (request: DataPlaneRequest, options: InferOptions) => Promise<InferenceAnswer>;

/**
 * The request path's answer: the outputs in the order asked (an output written to shared memory is an
 * empty tensor carrying its slice). When the edge gave a layout, their bytes are views of
 * `framed.bytes`, laid out as `framed.frame` says.
 */
export interface InferenceAnswer {
  outputs: WireTensor[];
  framed: { bytes: Uint8Array; frame: OutputFrame } | null;
}
