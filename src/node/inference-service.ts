/**
 * What each KServe V2 operation (and Triton's extensions) answers on a node, on the main thread:
 * plain functions of the request (shared/operations.ts), which every edge calls, the gRPC table
 * (protocol/grpc-services.ts) and the REST routes (protocol/rest-routes.ts) alike, in this thread
 * or from an edge thread. Inferences take the request path (shared/request-path.ts) instead.
 */
import { CUDA_IPC_HANDLE_BYTES, MODEL_VERSION, SERVER_EXTENSIONS, SERVER_NAME } from '../shared/constants.js';
import { errors } from '../shared/errors.js';
import { applyLogSettings, currentLogSettings } from '../protocol/log-settings.js';
import { modelConfig, modelMetadata } from '../protocol/model-config.js';
import type { ModelRef } from '../protocol/types.js';
import type { Devices } from './devices.js';
import { ModelState, type ModelRegistry } from './model-registry.js';
import type { ModelRepository } from './repository.js';
import type { SharedMemoryRegistry } from './shared-memory.js';
import type { Statistics } from './statistics.js';
import type { Logger } from 'pino';

export interface ServiceContext {
  registry: ModelRegistry;
  repository: ModelRepository;
  devices: Devices;
  statistics: Statistics;
  sharedMemory: SharedMemoryRegistry;
  /** endpoints.system_shared_memory: false refuses every registration (and the extension is not listed). */
  systemSharedMemory: boolean;
  /** runtime.backend: what a CUDA shared-memory registration is told. */
  backend: 'cpu' | 'cuda';
  logger: Logger;
  version: string;
  /** False until start-up loading has settled, and again while stopping. */
  isReady: () => boolean;
  /** scheduler.priority_levels and scheduler.default_priority, for ModelConfig. */
  priorities: { levels: number; defaultLevel: number };
}

/**
 * CUDA shared memory (backend cuda): a client's GPU allocation by its CUDA IPC handle, opened by
 * the device actors (shared-memory.ts, actors/device/regions.ts). On backend cpu nothing can be
 * registered, so the status of all is empty and unregistering succeeds with nothing to do, as on
 * a Triton without GPUs (perf_analyzer's --shared-memory system cleans up with
 * CudaSharedMemoryUnregister("")); registering says it needs backend cuda.
 */
function cudaSharedMemoryOperations(ctx: ServiceContext) {
  const { sharedMemory, logger } = ctx;
  return {
    CudaSharedMemoryStatus: (req: { name: string }) => ({
      regions: Object.fromEntries(sharedMemory.status(req.name, 'cuda').map((r) =>
        [r.name, { name: r.name, device_id: r.cuda!.gpu, byte_size: r.byteSize }])),
    }),
    CudaSharedMemoryUnregister: (req: { name: string }) => {
      const regions = sharedMemory.status('', 'cuda').map((r) => r.name).filter((name) => req.name === '' || name === req.name);
      sharedMemory.unregister(req.name, 'cuda');
      if (regions.length) logger.info({ regions }, 'CUDA shared-memory regions unregistered');
      return {};
    },
    CudaSharedMemoryRegister: async (req: { name: string; raw_handle: Uint8Array; device_id: number; byte_size: number }): Promise<Record<string, never>> => {
      if (ctx.backend === 'cpu') {
        throw errors.unsupported('CudaSharedMemoryRegister: CUDA shared memory (CUDA IPC handles) needs backend cuda (global.runtime.backend: cuda), and this server runs backend cpu; use system shared memory');
      }
      const { device_id: gpu, byte_size: byteSize } = req;
      const handle = req.raw_handle ?? new Uint8Array(0);
      if (handle.byteLength !== CUDA_IPC_HANDLE_BYTES) {
        throw errors.sharedMemoryInvalid(`region ${JSON.stringify(req.name)}: raw_handle must be a CUDA IPC handle (cudaIpcMemHandle_t, ${CUDA_IPC_HANDLE_BYTES} bytes), not ${handle.byteLength} bytes`);
      }
      if (!Number.isSafeInteger(gpu) || gpu < 0) throw errors.sharedMemoryInvalid(`region ${JSON.stringify(req.name)}: device_id ${req.device_id} must be a GPU's CUDA ordinal`);
      await sharedMemory.registerCuda(req.name, gpu, handle, byteSize, (whole) => ctx.devices.openCudaRegion(whole));
      logger.info({ region: req.name, gpu, byteSize }, 'CUDA shared-memory region registered');
      return {};
    },
  };
}

/** What each KServe V2 operation answers, as a plain function of its request (both edges call these). */
export function kserveOperations(ctx: ServiceContext) {
  const { registry, repository, statistics, sharedMemory, logger } = ctx;
  return {
    ServerLive: () => ({ live: true }),
    ...cudaSharedMemoryOperations(ctx),
    ServerReady: () => ({ ready: ctx.isReady() }),
    ModelReady: (req: ModelRef) => ({ ready: registry.find(req.name, req.version).state === ModelState.READY }),
    ServerMetadata: () =>
      ({ name: SERVER_NAME, version: ctx.version, extensions: [...SERVER_EXTENSIONS.filter((e) => ctx.systemSharedMemory || e !== 'system_shared_memory'), ...(ctx.backend === 'cuda' ? ['cuda_shared_memory'] : [])] }),
    ModelMetadata: (req: ModelRef) => modelMetadata(registry.described(req.name, req.version)),
    ModelConfig: (req: ModelRef) => {
      const spec = registry.described(req.name, req.version);
      const { policies } = ctx.devices;
      const priorities = { levels: ctx.priorities.levels, defaultLevel: policies.priority(spec.name) ?? spec.priority ?? ctx.priorities.defaultLevel };
      return { config: modelConfig(spec, Math.min(spec.maxBatchSize, policies.maxBatchSize(spec.name) ?? Infinity), priorities) };
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
    ModelStatistics: async (req: ModelRef) => {
      if (req.name !== '') registry.find(req.name, req.version); // an unknown model fails at once
      // Executions are counted from the devices' reports: every one posted before this read is heard first.
      await ctx.devices.reported();
      if (req.name === '') return { model_stats: registry.all().map((r) => statistics.snapshot(r.name)) };
      return { model_stats: [statistics.snapshot(req.name)] };
    },
    SystemSharedMemoryRegister: (req: { name: string; key: string; offset: number; byte_size: number }) => {
      if (!ctx.systemSharedMemory) throw errors.unsupported('SystemSharedMemoryRegister: system shared memory is turned off on this server (endpoints.system_shared_memory: false); send tensors in the request');
      sharedMemory.register(req.name, req.key, req.offset, req.byte_size);
      logger.info({ region: req.name, key: req.key, offset: req.offset, byteSize: req.byte_size }, 'shared-memory region registered');
      return {};
    },
    SystemSharedMemoryStatus: (req: { name: string }) => ({
      regions: Object.fromEntries(sharedMemory.status(req.name).map((r) =>
        [r.name, { name: r.name, key: r.key, offset: r.offset, byte_size: r.byteSize }])),
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
