/**
 * The node's KServe V2 RPC table, on the main thread: what each RPC of
 * GRPCInferenceService answers (kserveOperations: plain functions of the
 * request, which the REST edge calls too, node/rest-service.ts), and the gRPC
 * table over them. The gRPC edge (protocol/edge.ts) wraps every handler (errors
 * to statuses, admission, streams, UNIMPLEMENTED for the rest); inferences go
 * through the pipeline (pipeline.ts).
 */
import type * as grpc from '@grpc/grpc-js';
import type { TraceCarrier } from './tracing.js';
import type { Devices } from './devices.js';
import { MODEL_VERSION, SERVER_EXTENSIONS, SERVER_NAME } from '../shared/constants.js';
import { errors } from '../shared/errors.js';
import { callDeadlineMs, type GrpcEdge } from '../protocol/edge.js';
import { applyLogSettings, currentLogSettings } from '../protocol/log-settings.js';
import { modelConfig, modelMetadata } from '../protocol/model-config.js';
import { fromModelInferRequest, inferResponse } from '../protocol/codec.js';
import { ResponseFrame, type EncodedResponse } from '../protocol/infer-response-wire.js';
import { ownsItsBuffer } from '../protocol/message-buffers.js';
import type { ModelInferRequest, ModelInferResponse, ModelRef } from '../protocol/types.js';
import { ModelState, type ModelRegistry } from './model-registry.js';
import type { InferOptions, Pipeline } from './pipeline.js';
import type { ModelRepository } from './repository.js';
import type { SharedMemoryRegistry } from './shared-memory.js';
import type { Statistics } from './statistics.js';
import type { Logger } from 'pino';

export interface ServiceContext {
  edge: GrpcEdge;
  pipeline: Pipeline;
  registry: ModelRegistry;
  repository: ModelRepository;
  devices: Devices;
  statistics: Statistics;
  sharedMemory: SharedMemoryRegistry;
  /** endpoints.system_shared_memory: false refuses every registration (and the extension is not listed). */
  systemSharedMemory: boolean;
  logger: Logger;
  version: string;
  /** False until start-up loading has settled, and again while stopping. */
  isReady: () => boolean;
}

/** A call's W3C trace context (traceparent, tracestate) from its gRPC metadata. */
function traceCarrier(metadata: grpc.Metadata): TraceCarrier | undefined {
  const traceparent = metadata.get('traceparent')[0];
  if (typeof traceparent !== 'string') return undefined;
  const tracestate = metadata.get('tracestate')[0];
  return { traceparent, ...(typeof tracestate === 'string' ? { tracestate } : {}) };
}

/** What each KServe V2 operation answers, as a plain function of its request (both edges call these). */
export function kserveOperations(ctx: Omit<ServiceContext, 'edge'>) {
  const { registry, repository, statistics, sharedMemory, logger } = ctx;
  return {
    ServerLive: () => ({ live: true }),
    // CUDA shared memory: nothing can be registered, so the status of all is empty and unregistering
    // succeeds with nothing to do, as on a Triton without GPUs (perf_analyzer's --shared-memory
    // system cleans up with CudaSharedMemoryUnregister("")); only register is refused.
    CudaSharedMemoryStatus: (req: { name: string }) => {
      if (req.name !== '') throw errors.sharedMemoryNotFound(req.name);
      return { regions: {} as Record<string, never> };
    },
    CudaSharedMemoryUnregister: () => ({}),
    CudaSharedMemoryRegister: (): Record<string, never> => {
      throw errors.unsupported('CudaSharedMemoryRegister: CUDA shared memory (CUDA IPC handles) is not supported by this server, on either backend; use system shared memory');
    },
    ServerReady: () => ({ ready: ctx.isReady() }),
    ModelReady: (req: ModelRef) => ({ ready: registry.find(req.name, req.version).state === ModelState.READY }),
    ServerMetadata: () =>
      ({ name: SERVER_NAME, version: ctx.version, extensions: SERVER_EXTENSIONS.filter((e) => ctx.systemSharedMemory || e !== 'system_shared_memory') }),
    ModelMetadata: (req: ModelRef) => modelMetadata(registry.described(req.name, req.version)),
    ModelConfig: (req: ModelRef) => {
      const spec = registry.described(req.name, req.version);
      return { config: modelConfig(spec, Math.min(spec.maxBatchSize, ctx.devices.policies.maxBatchSize(spec.name) ?? Infinity)) };
    },
    RepositoryIndex: (req: { repository_name: string; ready: boolean }) => ({
      models: registry.all()
        .filter((r) => !req.ready || r.state === ModelState.READY)
        .map((r) => ({ name: r.name, version: MODEL_VERSION, state: r.state, reason: r.reason })),
    }),
    RepositoryModelLoad: async (req: { model_name: string; parameters: Record<string, unknown> }) => {
      if (repository.mode === 'static') throw errors.modelControl('RepositoryModelLoad', 'static');
      if (Object.keys(req.parameters).length > 0) {
        throw errors.unsupported(`RepositoryModelLoad parameters (${Object.keys(req.parameters).join(', ')}) are not supported: a model loads from its bundle in model_repo`);
      }
      await repository.load(req.model_name);
      return {};
    },
    RepositoryModelUnload: async (req: { model_name: string }) => {
      if (repository.mode === 'static') throw errors.modelControl('RepositoryModelUnload', 'static');
      await repository.unload(req.model_name);
      return {};
    },
    ModelStatistics: (req: ModelRef) => {
      if (req.name === '') return { model_stats: registry.all().map((r) => statistics.snapshot(r.name)) };
      registry.find(req.name, req.version);
      return { model_stats: [statistics.snapshot(req.name)] };
    },
    SystemSharedMemoryRegister: (req: { name: string; key: string; offset: string; byte_size: string }) => {
      if (!ctx.systemSharedMemory) throw errors.unsupported('SystemSharedMemoryRegister: system shared memory is turned off on this server (endpoints.system_shared_memory: false); send tensors in the request');
      sharedMemory.register(req.name, req.key, Number(req.offset), Number(req.byte_size));
      logger.info({ region: req.name, key: req.key, offset: Number(req.offset), byteSize: Number(req.byte_size) }, 'shared-memory region registered');
      return {};
    },
    SystemSharedMemoryStatus: (req: { name: string }) => ({
      regions: Object.fromEntries(sharedMemory.status(req.name).map((r) =>
        [r.name, { name: r.name, key: r.key, offset: String(r.offset), byte_size: String(r.byteSize) }])),
    }),
    SystemSharedMemoryUnregister: (req: { name: string }) => {
      const regions = sharedMemory.status('').map((r) => r.name).filter((name) => req.name === '' || name === req.name);
      sharedMemory.unregister(req.name);
      if (regions.length) logger.info({ regions }, 'shared-memory regions unregistered');
      return {};
    },
    LogSettings: (req: { settings: Parameters<typeof applyLogSettings>[1] }) =>
      ({ settings: Object.keys(req.settings).length ? applyLogSettings(logger, req.settings) : currentLogSettings(logger) }),
  };
}

export type KserveOperations = ReturnType<typeof kserveOperations>;

/**
 * One ModelInferRequest through the pipeline: decoded into the data plane's request (codec.ts),
 * its outputs placed for the response to be framed around them (infer-response-wire.ts), or, when
 * hooks made them, encoded by protobufjs.
 */
async function modelInfer(pipeline: Pipeline, req: ModelInferRequest, call: grpc.ServerUnaryCall<unknown, unknown> | grpc.ServerDuplexStream<unknown, unknown>,
  options: Omit<InferOptions, 'callDeadlineMs' | 'outputs' | 'trace' | 'protocol'>): Promise<ModelInferResponse | EncodedResponse> {
  const request = fromModelInferRequest(req, ownsItsBuffer(req));
  const outputs = new ResponseFrame(request.model, MODEL_VERSION, request.id);
  const answer = await pipeline.infer(request, { ...options, callDeadlineMs: callDeadlineMs(call), outputs, trace: traceCarrier(call.metadata), protocol: 'grpc' });
  return outputs.frame(answer) ?? inferResponse(request.model, request.id, answer.outputs);
}

export function inferenceService(ctx: ServiceContext): Record<string, grpc.UntypedHandleCall> {
  const { edge, pipeline } = ctx;
  const ops = kserveOperations(ctx);
  const table: Record<string, grpc.UntypedHandleCall> = {};
  for (const [rpc, fn] of Object.entries(ops)) table[rpc] = edge.unary(rpc, fn as (req: unknown) => unknown);
  table.ModelInfer = edge.inference('ModelInfer', (req: ModelInferRequest, call, signal, admitted) => modelInfer(pipeline, req, call, { signal, admitted }));
  table.ModelStreamInfer = edge.stream<ModelInferRequest, { error_message: string; infer_response: Partial<ModelInferResponse> | EncodedResponse }>('ModelStreamInfer', {
    answer: async (req, call, signal) => ({ error_message: '', infer_response: await modelInfer(pipeline, req, call, { signal }) }),
    // The error travels as this response's message, with the request's id; the stream lives on.
    failed: (req, details) => ({ error_message: details, infer_response: { model_name: req.model_name, model_version: req.model_version, id: req.id } }),
  });
  return table;
}
