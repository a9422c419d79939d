/**
 * The KServe V2 gRPC handlers, on the main thread. Each unary handler is a
 * plain async function of the request; `unary()` turns its result or its
 * error into the gRPC answer, so a throwing handler never crashes the server.
 * Methods of the service without a handler answer UNIMPLEMENTED naming the RPC.
 */
import * as grpc from '@grpc/grpc-js';
import type { Logger } from 'pino';
import type { Gateway } from '../actors/gateway.js';
import { nowMs } from '../actors/messages.js';
import { MODEL_VERSION, SERVER_EXTENSIONS, SERVER_NAME } from '../constants.js';
import { errors, errorToStatus, StowageError } from '../errors.js';
import { ModelState, type ModelRegistry } from '../model-registry.js';
import type { ModelRepository } from '../repository.js';
import type { RegionSlice, SharedMemoryRegistry } from '../shared-memory.js';
import type { Statistics } from '../statistics.js';
import type { Admission } from './admission.js';
import type { HookPool } from '../hooks/hook-pool.js';
import type { HookContext } from '../hooks/messages.js';
import type { ExecutionTiming, WireTensor } from '../actors/messages.js';
import type { ModelSpec } from '../bundle/model-spec.js';
import { checkHookTensors, decodeInferRequest, encodeInferResponse, slicesOf, type DecodedRequest } from './codec.js';
import { applyLogSettings, currentLogSettings } from './log-settings.js';
import { modelConfig, modelMetadata } from './model-config.js';
import { logFailure, unary } from './unary.js';
import type { ModelInferRequest, ModelInferResponse, ModelRef } from './types.js';

export interface ServiceContext {
  registry: ModelRegistry;
  repository: ModelRepository;
  hooks: HookPool;
  /** Which device serves a request (a pass-through with one device). */
  gateway: Gateway;
  statistics: Statistics;
  sharedMemory: SharedMemoryRegistry;
  /** The cap on in-flight inference RPCs. */
  admission: Admission;
  /** A model's batch cap (scheduler.models.<name>.max_batch_size, or as SetModelPolicy changed it): ModelConfig reports it. */
  maxBatchSizeOf: (model: string) => number | undefined;
  logger: Logger;
  version: string;
  /** False until start-up loading has settled, and again while stopping. */
  isReady: () => boolean;
}

/** A meta model runs no execution of its own: its sub-models count theirs. */
const NO_EXECUTION: ExecutionTiming = { computeInputNs: 0, computeInferNs: 0, computeOutputNs: 0, batchRows: 0, executedBatchSize: 0, requests: 1 };

/** What a unary call and a stream share: the client's deadline. */
type HasDeadline = { getDeadline(): grpc.Deadline };

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

/** The request's absolute deadline: the earlier of the call's deadline and the `timeout` parameter; Infinity if neither. */
function deadlineOf(call: HasDeadline, timeoutUs: number | undefined): number {
  const deadline = call.getDeadline(); // Infinity when the client set none
  const fromGrpc = deadline instanceof Date ? deadline.getTime() : deadline;
  return Math.min(fromGrpc, timeoutUs === undefined ? Infinity : nowMs() + timeoutUs / 1000);
}

export function createHandlers(ctx: ServiceContext, definition: grpc.ServiceDefinition): grpc.UntypedServiceImplementation {
  const { registry, repository, hooks, gateway, statistics, sharedMemory, admission, logger } = ctx;

  /**
   * A meta model's request: its run hook (in the pool) calls sub-models, each of which runs here
   * like any request (validated, scheduled, coalesced, counted), within the meta request's deadline
   * and cancelled with it.
   */
  async function inferMeta(req: ModelInferRequest, spec: ModelSpec, decoded: DecodedRequest, deadlineMs: number, signal: AbortSignal): Promise<WireTensor[]> {
    const subCall = { getDeadline: () => deadlineMs };
    const subInfer = async (model: string, tensors: WireTensor[], outputs: string[]): Promise<WireTensor[]> => {
      if (!spec.subModels.includes(model)) {
        throw errors.invalidRequest(`meta model ${JSON.stringify(spec.name)} may call only ${spec.subModels.join(', ')} (its manifest's models), not ${JSON.stringify(model)}`);
      }
      const res = await infer({
        model_name: model, model_version: '', id: req.id, parameters: {},
        inputs: tensors.map((t) => ({ name: t.name, datatype: t.datatype, shape: t.shape.map(String), parameters: {}, contents: null })),
        outputs: outputs.map((name) => ({ name, parameters: {} })),
        raw_input_contents: tensors.map((t) => Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength)),
      }, subCall, signal);
      return res.outputs.map((o, i) => ({ name: o.name, datatype: o.datatype as WireTensor['datatype'], shape: o.shape, data: res.raw_output_contents[i] }));
    };
    const returned = await hooks.run(spec.name, 'run', spec.hooks!, decoded.inputs, hookContext(req), subInfer);
    const all = checkHookTensors(spec.name, 'run', returned, spec.clientOutputs, Math.max(decoded.batchSize, 1));
    return decoded.outputs.map((name) => all.find((t) => t.name === name)!);
  }

  /** One inference, shared by ModelInfer, ModelStreamInfer and meta models' sub-calls. */
  async function infer(req: ModelInferRequest, call: HasDeadline, signal: AbortSignal): Promise<ModelInferResponse> {
    const started = process.hrtime.bigint();
    const lease = registry.acquire(req.model_name, req.model_version);
    const { spec } = lease;
    let slices: RegionSlice[] = [];
    try {
      const decoded = decodeInferRequest(req, spec, sharedMemory);
      slices = slicesOf(decoded);
      sharedMemory.hold(slices); // no await since decoding: the regions are still registered
      if (spec.kind === 'meta') {
        if (slices.length) throw errors.unsupported(`meta model ${JSON.stringify(spec.name)} takes its tensors inline, not in shared memory`);
        const outputs = await inferMeta(req, spec, decoded, deadlineOf(call, decoded.timeoutUs), signal);
        statistics.recordSuccess(spec.name, decoded.batchSize, Number(process.hrtime.bigint() - started), 0, NO_EXECUTION);
        return encodeInferResponse(spec, req.id, outputs);
      }
      const rows = Math.max(decoded.batchSize, 1);
      let inputs = decoded.inputs;
      const context = spec.hooks ? hookContext(req) : undefined;
      if (spec.hooks && slices.length) {
        throw errors.unsupported(`model ${JSON.stringify(spec.name)} runs model.js hooks, which read and write tensors in the request; send them inline, not in shared memory`);
      }
      if (spec.hooks?.preprocess) {
        inputs = checkHookTensors(spec.name, 'preprocess', await hooks.run(spec.name, 'preprocess', spec.hooks, inputs, context!), spec.inputs, rows);
      }
      // With a postprocess hook the executable's every output goes to it; without, the client's choice.
      const post = spec.hooks?.postprocess === true;
      const executableOutputs = post ? spec.outputs.map((t) => t.name) : decoded.outputs;
      const result = await gateway.infer(spec.name, {
        instance: lease.instance,
        inputs,
        outputs: executableOutputs,
        outputRegions: post ? executableOutputs.map(() => null) : decoded.outputRegions,
        deadlineMs: deadlineOf(call, decoded.timeoutUs),
      }, signal);
      let outputs = result.outputs;
      if (post) {
        const all = checkHookTensors(spec.name, 'postprocess', await hooks.run(spec.name, 'postprocess', spec.hooks!, outputs, context!), spec.clientOutputs, rows);
        outputs = decoded.outputs.map((name) => all.find((t) => t.name === name)!);
      }
      const response = encodeInferResponse(spec, req.id, outputs);
      statistics.recordSuccess(spec.name, decoded.batchSize, Number(process.hrtime.bigint() - started), result.queueNs, result.timing);
      return response;
    } catch (err) {
      statistics.recordFailure(spec.name, err instanceof StowageError ? err.code : undefined, Number(process.hrtime.bigint() - started));
      throw err;
    } finally {
      registry.release(lease);
      sharedMemory.release(slices); // a region unregistered meanwhile closes with its last request
    }
  }

  /** A bidirectional stream of inferences: each answered on the stream as it completes, errors included. */
  function modelStreamInfer(call: grpc.ServerDuplexStream<ModelInferRequest, unknown>): void {
    try {
      admission.enter();
    } catch (err) {
      call.emit('error', logFailure(logger, 'ModelStreamInfer', err));
      return;
    }
    const abort = new AbortController();
    let pending = 0;
    let ended = false;
    let left = false;
    const leave = () => {
      if (!left) admission.leave();
      left = true;
    };
    const finish = () => {
      if (ended && pending === 0) {
        leave();
        call.end();
      }
    };
    call.on('cancelled', () => {
      abort.abort();
      leave();
    });
    call.on('error', () => {
      abort.abort();
      leave();
    });
    call.on('data', (req: ModelInferRequest) => {
      pending++;
      infer(req, call, abort.signal).then(
        (infer_response) => call.write({ error_message: '', infer_response }),
        (err: unknown) => {
          const { details } = logFailure(logger, 'ModelStreamInfer', err);
          // The error travels as this response's message; the stream lives on.
          call.write({ error_message: details, infer_response: { model_name: req.model_name, model_version: req.model_version, id: req.id } });
        },
      ).finally(() => {
        pending--;
        finish();
      });
    });
    call.on('end', () => {
      ended = true;
      finish();
    });
  }

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
      return { config: modelConfig(spec, Math.min(spec.maxBatchSize, ctx.maxBatchSizeOf(spec.name) ?? Infinity)) };
    }),
    RepositoryIndex: unary('RepositoryIndex', logger, (req: { repository_name: string; ready: boolean }) => ({
      models: registry.all()
        .filter((r) => !req.ready || r.state === ModelState.READY)
        .map((r) => ({ name: r.name, version: MODEL_VERSION, state: r.state, reason: r.reason })),
    })),
    RepositoryModelLoad: unary('RepositoryModelLoad', logger, async (req: { model_name: string; parameters: Record<string, unknown> }) => {
      if (repository.mode === 'static') throw errors.modelControl('RepositoryModelLoad', 'static');
      if (Object.keys(req.parameters).length > 0) {
        throw errors.unsupported(`RepositoryModelLoad parameters (${Object.keys(req.parameters).join(', ')}) are not supported: a model loads from its bundle in model_repo`);
      }
      await repository.load(req.model_name);
      return {};
    }),
    RepositoryModelUnload: unary('RepositoryModelUnload', logger, async (req: { model_name: string }) => {
      if (repository.mode === 'static') throw errors.modelControl('RepositoryModelUnload', 'static');
      await repository.unload(req.model_name);
      return {};
    }),
    ModelInfer: unary('ModelInfer', logger, async (req: ModelInferRequest, call) => {
      admission.enter();
      try {
        const abort = new AbortController();
        call.once('cancelled', () => abort.abort());
        return await infer(req, call, abort.signal);
      } finally {
        admission.leave();
      }
    }),
    ModelStreamInfer: modelStreamInfer,
    ModelStatistics: unary('ModelStatistics', logger, (req: ModelRef) => {
      if (req.name === '') return { model_stats: registry.all().map((r) => statistics.snapshot(r.name)) };
      registry.find(req.name, req.version);
      return { model_stats: [statistics.snapshot(req.name)] };
    }),
    SystemSharedMemoryRegister: unary('SystemSharedMemoryRegister', logger, (req: { name: string; key: string; offset: string; byte_size: string }) => {
      sharedMemory.register(req.name, req.key, Number(req.offset), Number(req.byte_size));
      return {};
    }),
    SystemSharedMemoryStatus: unary('SystemSharedMemoryStatus', logger, (req: { name: string }) => ({
      regions: Object.fromEntries(sharedMemory.status(req.name).map((r) =>
        [r.name, { name: r.name, key: r.key, offset: String(r.offset), byte_size: String(r.byteSize) }])),
    })),
    SystemSharedMemoryUnregister: unary('SystemSharedMemoryUnregister', logger, (req: { name: string }) => {
      sharedMemory.unregister(req.name);
      return {};
    }),
    LogSettings: unary('LogSettings', logger, (req: { settings: Parameters<typeof applyLogSettings>[1] }) =>
      ({ settings: Object.keys(req.settings).length ? applyLogSettings(logger, req.settings) : currentLogSettings(logger) })),
  };
  for (const rpc of ['CudaSharedMemoryStatus', 'CudaSharedMemoryRegister', 'CudaSharedMemoryUnregister']) {
    implemented[rpc] = unary(rpc, logger, () => {
      throw errors.unsupported(`${rpc}: CUDA shared memory needs backend "cuda"; this server runs backend "cpu"`);
    });
  }

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
