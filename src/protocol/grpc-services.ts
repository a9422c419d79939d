/**
 * The gRPC tables of a node's services over its operations (operations.ts) and its request path (an
 * `Infer`: shared/data-plane.ts), for one gRPC edge (edge.ts: errors to statuses, admission,
 * streams, UNIMPLEMENTED for the rest), on the main thread or an edge thread alike:
 * GRPCInferenceService (every KServe and Triton operation, ModelInfer and ModelStreamInfer) and
 * Stowage's ControlService (its status stream: status-watch.ts). The health service is health-service.ts.
 *
 * An inference is decoded into the data plane's request (codec.ts), handed to the request path with
 * the layout its response needs (codec.ts `ResponseFrame`), and answered with the response framed
 * around its outputs in the frame the device wrote them into, or, when hooks made them, encoded by protobufjs.
 */
import type * as grpc from '@grpc/grpc-js';
import { MODEL_VERSION } from '../shared/constants.js';
import type { Infer, InferOptions } from '../shared/data-plane.js';
import { fromModelInferRequest, inferResponse, ResponseFrame, type EncodedResponse } from './codec.js';
import { callDeadlineMs, type GrpcEdge } from './edge.js';
import { ownsItsBuffer } from './proto.js';
import { statusWatch } from './status-watch.js';
import { CONTROL_OPERATIONS, KSERVE_OPERATIONS, type LogSettingValue, type OperationName, type Operations } from '../shared/operations.js';
import { errors } from '../shared/errors.js';
import type { ModelInferRequest, ModelInferResponse } from './types.js';

/**
 * What a call's metadata adds to its request's options: its W3C trace context (traceparent,
 * tracestate) and its tenant as named under `tenantKey` (endpoints.tenant_key). Set on the options
 * themselves, not spread into them: this runs for every request.
 */
function fromMetadata(metadata: grpc.Metadata, tenantKey: string, options: InferOptions): InferOptions {
  const traceparent = metadata.get('traceparent')[0];
  if (typeof traceparent === 'string') {
    const tracestate = metadata.get('tracestate')[0];
    options.trace = typeof tracestate === 'string' ? { traceparent, tracestate } : { traceparent };
  }
  const tenant = metadata.get(tenantKey)[0];
  if (typeof tenant === 'string') options.tenant = tenant;
  return options;
}

type InferCall = grpc.ServerUnaryCall<unknown, unknown> | grpc.ServerDuplexStream<unknown, unknown>;

/** One ModelInferRequest through the request path, to the response grpc-js sends. */
async function modelInfer(infer: Infer, tenantKey: string, req: ModelInferRequest, call: InferCall, signal: AbortSignal, admitted?: { bytes: number; inflightBytes: number }): Promise<ModelInferResponse | EncodedResponse> {
  const request = fromModelInferRequest(req, ownsItsBuffer(req));
  const frame = new ResponseFrame(request.model, MODEL_VERSION, request.id);
  const options: InferOptions = { callDeadlineMs: callDeadlineMs(call), signal, outputs: frame.layout, protocol: 'grpc' };
  if (admitted) options.admitted = admitted;
  const answer = await infer(request, fromMetadata(call.metadata, tenantKey, options));
  return frame.frame(answer) ?? inferResponse(request.model, request.id, answer.outputs);
}

/** A LogSettings value as the message carries it (a oneof). */
interface SettingMessage {
  parameter_choice?: 'bool_param' | 'uint32_param' | 'string_param';
  bool_param?: boolean;
  uint32_param?: number;
  string_param?: string;
}

/** A setting's message as its value; one whose oneof is unset is refused, naming it. */
function settingValue(key: string, m: SettingMessage): LogSettingValue {
  const value = m.parameter_choice ? m[m.parameter_choice] : undefined;
  if (value === undefined) throw errors.invalidRequest(`log setting ${JSON.stringify(key)} has no value (bool_param, uint32_param or string_param)`);
  return value;
}

/** A setting's value as its message: a number is the verbosity's uint32. */
function settingMessage(value: LogSettingValue): SettingMessage {
  if (typeof value === 'boolean') return { bool_param: value };
  return typeof value === 'number' ? { uint32_param: value } : { string_param: value };
}

const mapValues = <A, B>(record: Record<string, A>, f: (key: string, a: A) => B): Record<string, B> =>
  Object.fromEntries(Object.entries(record).map(([k, v]) => [k, f(k, v)]));

/**
 * The operations whose gRPC messages are not their plain values, each read in and written out
 * here: 64-bit integers of a request come as decimal strings (proto-loader's longs: String) and
 * go to the operation as numbers (which checks their range), log settings come and go as oneofs.
 * Every other request is its plain values as it is, and every reply is encoded as it is
 * (protobufjs takes numbers for int64 fields).
 */
const GRPC_MESSAGES = {
  SystemSharedMemoryRegister: (ops: Operations) => (req: { name: string; key: string; offset: string; byte_size: string }) =>
    ops.SystemSharedMemoryRegister({ ...req, offset: Number(req.offset), byte_size: Number(req.byte_size) }),
  CudaSharedMemoryRegister: (ops: Operations) => (req: { name: string; raw_handle: Uint8Array; device_id: string; byte_size: string }) =>
    ops.CudaSharedMemoryRegister({ ...req, device_id: Number(req.device_id), byte_size: Number(req.byte_size) }),
  LogSettings: (ops: Operations) => async (req: { settings: Record<string, SettingMessage> }) => {
    const { settings } = await ops.LogSettings({ settings: mapValues(req.settings, settingValue) });
    return { settings: mapValues(settings, (_, v) => settingMessage(v)) };
  },
} satisfies Partial<Record<OperationName, (ops: Operations) => (req: never) => unknown>>;

/** Operation `rpc` as a gRPC handler of its request message. */
function grpcHandler(ops: Operations, rpc: OperationName): (req: unknown) => unknown {
  const words = (GRPC_MESSAGES as Partial<Record<OperationName, (ops: Operations) => (req: unknown) => unknown>>)[rpc];
  return words ? words(ops) : (req) => (ops[rpc] as (req: unknown) => unknown)(req);
}

/** GRPCInferenceService's table. */
export function inferenceTable(edge: GrpcEdge, ops: Operations, infer: Infer): Record<string, grpc.UntypedHandleCall> {
  const table: Record<string, grpc.UntypedHandleCall> = {};
  for (const rpc of KSERVE_OPERATIONS) table[rpc] = edge.unary(rpc, grpcHandler(ops, rpc));
  table.ModelInfer = edge.inference('ModelInfer', (req: ModelInferRequest, call, signal, admitted) => modelInfer(infer, edge.tenantKey, req, call, signal, admitted));
  table.ModelStreamInfer = edge.stream<ModelInferRequest, { error_message: string; infer_response: Partial<ModelInferResponse> | EncodedResponse }>('ModelStreamInfer', {
    answer: async (req, call, signal) => ({ error_message: '', infer_response: await modelInfer(infer, edge.tenantKey, req, call, signal) }),
    // The error travels as this response's message, with the request's id; the stream lives on.
    failed: (req, details) => ({ error_message: details, infer_response: { model_name: req.model_name, model_version: req.model_version, id: req.id } }),
  });
  return table;
}

/** Stowage's ControlService table (proto/control.proto). */
export function controlTable(edge: GrpcEdge, ops: Operations): Record<string, grpc.UntypedHandleCall> {
  const table: Record<string, grpc.UntypedHandleCall> = Object.fromEntries(CONTROL_OPERATIONS.map((rpc) => [rpc, edge.unary(rpc, grpcHandler(ops, rpc))]));
  table.WatchModelControlStatus = statusWatch(edge, ops);
  return table;
}
