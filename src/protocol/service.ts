/**
 * The KServe V2 gRPC handlers, on the main thread. Each handler is a plain
 * async function of the request; `unary()` turns its result or its error into
 * the gRPC answer, so a throwing handler never crashes the server. Methods of
 * the service without a handler answer UNIMPLEMENTED naming the RPC.
 */
import * as grpc from '@grpc/grpc-js';
import type { Logger } from 'pino';
import type { DeviceActor } from '../actors/device-actor.js';
import { nowMs } from '../actors/messages.js';
import { MODEL_VERSION, SERVER_EXTENSIONS, SERVER_NAME } from '../constants.js';
import { errors, errorToStatus } from '../errors.js';
import { ModelState, type ModelRegistry } from '../model-registry.js';
import type { Statistics } from '../statistics.js';
import type { SchedulerConfig } from '../config/schema.js';
import { decodeInferRequest, encodeInferResponse } from './codec.js';
import { modelConfig, modelMetadata } from './model-config.js';
import type { ModelInferRequest, ModelRef } from './types.js';

export interface ServiceContext {
  registry: ModelRegistry;
  device: DeviceActor;
  statistics: Statistics;
  /** scheduler.models: per-model max_batch_size caps what ModelConfig reports as coalesced. */
  schedulerModels: SchedulerConfig['models'];
  logger: Logger;
  version: string;
  /** False until start-up loading has settled, and again while stopping. */
  isReady: () => boolean;
}

type UnaryHandler<Req, Res> = (request: Req, call: grpc.ServerUnaryCall<Req, Res>) => Promise<Res> | Res;

function unary<Req, Res>(rpc: string, logger: Logger, fn: UnaryHandler<Req, Res>): grpc.handleUnaryCall<Req, Res> {
  return (call, callback) => {
    Promise.resolve()
      .then(() => fn(call.request, call))
      .then((res) => callback(null, res), (err: unknown) => {
        const { code, details } = errorToStatus(err);
        const level = code === grpc.status.INTERNAL ? 'error' : 'debug';
        logger[level]({ rpc, code: grpc.status[code], err }, details);
        callback({ code, details });
      });
  };
}

/** The request's absolute deadline: the earlier of the gRPC deadline and the `timeout` parameter; Infinity if neither. */
function deadlineOf(call: grpc.ServerUnaryCall<unknown, unknown>, timeoutUs: number | undefined): number {
  const deadline = call.getDeadline(); // Infinity when the client set none
  const fromGrpc = deadline instanceof Date ? deadline.getTime() : deadline;
  return Math.min(fromGrpc, timeoutUs === undefined ? Infinity : nowMs() + timeoutUs / 1000);
}

export function createHandlers(ctx: ServiceContext, definition: grpc.ServiceDefinition): grpc.UntypedServiceImplementation {
  const { registry, device, statistics, logger } = ctx;
  const implemented: Record<string, grpc.UntypedHandleCall> = {
    ServerLive: unary('ServerLive', logger, () => ({ live: true })),
    ServerReady: unary('ServerReady', logger, () => ({ ready: ctx.isReady() })),
    ModelReady: unary('ModelReady', logger, (req: ModelRef) =>
      ({ ready: registry.find(req.name, req.version).state === ModelState.READY })),
    ServerMetadata: unary('ServerMetadata', logger, () =>
      ({ name: SERVER_NAME, version: ctx.version, extensions: [...SERVER_EXTENSIONS] })),
    ModelMetadata: unary('ModelMetadata', logger, (req: ModelRef) => modelMetadata(registry.described(req.name, req.version))),
    ModelConfig: unary('ModelConfig', logger, (req: ModelRef) => {
      const spec = registry.described(req.name, req.version);
      return { config: modelConfig(spec, Math.min(spec.maxBatchSize, ctx.schedulerModels[spec.name]?.max_batch_size ?? Infinity)) };
    }),
    RepositoryIndex: unary('RepositoryIndex', logger, (req: { repository_name: string; ready: boolean }) => ({
      models: registry.all()
        .filter((r) => !req.ready || r.state === ModelState.READY)
        .map((r) => ({ name: r.name, version: MODEL_VERSION, state: r.state, reason: r.reason })),
    })),
    ModelInfer: unary('ModelInfer', logger, async (req: ModelInferRequest, call) => {
      const started = process.hrtime.bigint();
      const spec = registry.ready(req.model_name, req.model_version);
      try {
        const decoded = decodeInferRequest(req, spec);
        const abort = new AbortController();
        call.once('cancelled', () => abort.abort());
        const result = await device.infer({
          model: spec.name,
          inputs: decoded.inputs,
          outputs: decoded.outputs,
          deadlineMs: deadlineOf(call, decoded.timeoutUs),
        }, abort.signal);
        const response = encodeInferResponse(spec, req.id, result.outputs);
        statistics.recordSuccess(spec.name, decoded.batchSize, Number(process.hrtime.bigint() - started), result.queueNs, result.timing);
        return response;
      } catch (err) {
        statistics.recordFailure(spec.name, Number(process.hrtime.bigint() - started));
        throw err;
      }
    }),
    ModelStatistics: unary('ModelStatistics', logger, (req: ModelRef) => {
      if (req.name === '') return { model_stats: registry.all().map((r) => statistics.snapshot(r.name)) };
      registry.find(req.name, req.version);
      return { model_stats: [statistics.snapshot(req.name)] };
    }),
  };

  const handlers: grpc.UntypedServiceImplementation = {};
  for (const [name, method] of Object.entries(definition)) {
    const handler = implemented[name];
    if (handler) {
      handlers[name] = handler;
    } else if (method.requestStream || method.responseStream) {
      handlers[name] = (call: grpc.ServerDuplexStream<unknown, unknown>) => {
        const { code, details } = errorToStatus(errors.unimplementedRpc(name));
        call.emit('error', { code, details });
      };
    } else {
      handlers[name] = unary(name, logger, () => {
        throw errors.unimplementedRpc(name);
      });
    }
  }
  return handlers;
}
