/**
 * The gRPC tables of a node's services over its operations (operations.ts) and its pipeline (an
 * `Infer`: shared/data-plane.ts), for one gRPC edge (edge.ts: errors to statuses, admission,
 * streams, UNIMPLEMENTED for the rest), on the main thread or an edge thread alike:
 * GRPCInferenceService (every KServe and Triton operation, ModelInfer and ModelStreamInfer) and
 * Stowage's ControlService. The health service is health-service.ts.
 *
 * An inference is decoded into the data plane's request (codec.ts), handed to the pipeline with
 * the layout its response needs (infer-response-wire.ts), and answered with the response framed
 * around its outputs in the frame the device wrote them into, or, when hooks made them, encoded by protobufjs.
 */
import type * as grpc from '@grpc/grpc-js';
import { MODEL_VERSION } from '../shared/constants.js';
import type { Infer, TraceCarrier } from '../shared/data-plane.js';
import { fromModelInferRequest, inferResponse } from './codec.js';
import { callDeadlineMs, type GrpcEdge } from './edge.js';
import { ResponseFrame, type EncodedResponse } from './infer-response-wire.js';
import { ownsItsBuffer } from './message-buffers.js';
import { CONTROL_OPERATIONS, KSERVE_OPERATIONS, type Operations } from '../shared/operations.js';
import type { ModelInferRequest, ModelInferResponse } from './types.js';

/** A call's W3C trace context (traceparent, tracestate) from its gRPC metadata. */
function traceCarrier(metadata: grpc.Metadata): TraceCarrier | undefined {
  const traceparent = metadata.get('traceparent')[0];
  if (typeof traceparent !== 'string') return undefined;
  const tracestate = metadata.get('tracestate')[0];
  return { traceparent, ...(typeof tracestate === 'string' ? { tracestate } : {}) };
}

type InferCall = grpc.ServerUnaryCall<unknown, unknown> | grpc.ServerDuplexStream<unknown, unknown>;

/** One ModelInferRequest through the pipeline, to the response grpc-js sends. */
async function modelInfer(infer: Infer, req: ModelInferRequest, call: InferCall, signal: AbortSignal, admitted?: { bytes: number; inflightBytes: number }): Promise<ModelInferResponse | EncodedResponse> {
  const request = fromModelInferRequest(req, ownsItsBuffer(req));
  const frame = new ResponseFrame(request.model, MODEL_VERSION, request.id);
  const answer = await infer(request, {
    callDeadlineMs: callDeadlineMs(call), signal, outputs: frame.layout, trace: traceCarrier(call.metadata), protocol: 'grpc', ...(admitted ? { admitted } : {}),
  });
  return frame.frame(answer) ?? inferResponse(request.model, request.id, answer.outputs);
}

/** GRPCInferenceService's table. */
export function inferenceTable(edge: GrpcEdge, ops: Operations, infer: Infer): Record<string, grpc.UntypedHandleCall> {
  const table: Record<string, grpc.UntypedHandleCall> = {};
  for (const rpc of KSERVE_OPERATIONS) table[rpc] = edge.unary(rpc, (req: unknown) => (ops[rpc] as (req: unknown) => unknown)(req));
  table.ModelInfer = edge.inference('ModelInfer', (req: ModelInferRequest, call, signal, admitted) => modelInfer(infer, req, call, signal, admitted));
  table.ModelStreamInfer = edge.stream<ModelInferRequest, { error_message: string; infer_response: Partial<ModelInferResponse> | EncodedResponse }>('ModelStreamInfer', {
    answer: async (req, call, signal) => ({ error_message: '', infer_response: await modelInfer(infer, req, call, signal) }),
    // The error travels as this response's message, with the request's id; the stream lives on.
    failed: (req, details) => ({ error_message: details, infer_response: { model_name: req.model_name, model_version: req.model_version, id: req.id } }),
  });
  return table;
}

/** Stowage's ControlService table (proto/control.proto). */
export function controlTable(edge: GrpcEdge, ops: Operations): Record<string, grpc.UntypedHandleCall> {
  return Object.fromEntries(CONTROL_OPERATIONS.map((rpc) => [rpc, edge.unary(rpc, (req: unknown) => (ops[rpc] as (req: unknown) => unknown)(req))]));
}
