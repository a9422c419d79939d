/**
 * The server: wires the pieces together and owns their lifetimes.
 *
 * Start-up: admin HTTP first (so /readyz can say what is loading), then the
 * device actors (the pool of them: devices.ts), then every bundle of the repository is parsed and loaded,
 * then the gRPC and REST ports open (the two edges: protocol/edge.ts, protocol/http-edge.ts).
 * A bundle that fails is recorded UNAVAILABLE with its reason and the rest still load.
 */
import { accessSync, constants, mkdirSync } from 'node:fs';
import type http from 'node:http';
import type { Worker } from 'node:worker_threads';
import type { Logger } from 'pino';
import { Gauge } from 'prom-client';
import { DeviceHandle } from '../actors/device/handle.js';
import { initOrt, processThreadPool } from '../native/ort.js';
import { Compiler } from '../actors/compiler/handle.js';
import { ModelPolicies } from './model-policies.js';
import { Devices } from './devices.js';
import { closeAdmin, createAdminServer, listen, registryMetrics, type AdminContext } from '../admin/http.js';
import type { NodeConfig } from '../shared/config-schema.js';
import { resolveWorkers, type FoundGpus, type ResolvedWorker } from '../config/workers.js';
import { cudaProviderOptions, intraOpThreadsFor } from '../config/cuda-options.js';
import { cudaLibraryDirs, gpuMemory, gpuReport, loadCuda, type GpuInfo, type GpuReport } from '../native/cuda.js';
import { errors } from '../shared/errors.js';
import { ModelRegistry, ModelState } from './model-registry.js';
import { edgeHookThreads, HookPool } from '../actors/hooks/handle.js';
import { ModelRepository } from './repository.js';
import { watchRepository } from './repository-watcher.js';
import { HostWeights } from './host-weights.js';
import { SharedMemoryRegistry } from './shared-memory.js';
import { Statistics } from './statistics.js';
import { Health } from './health.js';
import { countExportFailuresIn, exportFailureMemory, startTracing, stopTracing, traceExportFailures, tracingOn } from '../shared/tracing.js';
import { Metrics } from './metrics.js';
import { Admission, admissionMetrics } from '../shared/admission.js';
import { Quotas } from '../shared/admission.js';
import { quotaMetrics } from './quota-metrics.js';
import type { Levels } from '../shared/backlog.js';
import { controlOperations } from './control-service.js';
import { nodeName } from './node-name.js';
import { GrpcEdge } from '../protocol/edge.js';
import { loadControlClient, loadInferenceClient } from '../protocol/proto.js';
import { markOwnedBuffers } from '../protocol/proto.js';
import { passEncodedResponses } from '../protocol/codec.js';
import { controlTable, inferenceTable } from '../protocol/grpc-services.js';
import { HealthService } from '../protocol/health-service.js';
import type { Operations } from '../shared/operations.js';
import { kserveOperations } from './inference-service.js';
import { restRoutes } from '../protocol/rest-routes.js';
import { HttpEdge } from '../protocol/http-edge.js';
import type { Infer } from '../shared/data-plane.js';
import { refuse } from './refusals.js';
import { Rooms } from '../actors/rooms/rooms.js';
import { edgeMetrics, EdgeThreads, type EdgeRooms } from '../actors/edge/handle.js';
import { Leases } from '../shared/leases.js';
import { RequestCounters } from '../shared/request-counters.js';
import type { EdgeRoute, RoomsStart } from '../shared/channels/edge.js';
import { edgeThreads } from '../config/edges.js';
import { startOrStop } from '../shared/lifecycle.js';
import { PACKAGE_VERSION } from '../shared/version.js';
import { modelOf, type InstanceKey } from '../shared/model-spec.js';

/** When this process started (ms since the epoch): of two addresses reporting one node name, the newer serves. */
const STARTED_MS = Math.round(performance.timeOrigin);


/** The compile cache must be writable before any model loads: say so once, clearly, at start-up. */
function ensureWritable(dir: string): void {
  try {
    mkdirSync(dir, { recursive: true });
    accessSync(dir, constants.W_OK);
  } catch (err) {
    throw errors.configInvalid(`cache_dir ${dir} is not a writable directory (${(err as NodeJS.ErrnoException).code ?? (err as Error).message}); compiled models are kept there: point cache_dir at one the server may write`);
  }
}

/**
 * A node's readiness: ready once every model has loaded or failed with a reason, while a device is
 * in service; the models still loading, and the devices taken out of service with why.
 */
function nodeReadiness(registry: ModelRegistry, isReady: () => boolean, outOfService: () => { device: number; reason: string }[]): AdminContext['readiness'] {
  return () => {
    const models = registry.all().map((r) => ({ name: r.name, state: r.state, reason: r.reason }));
    const loading = models.filter((m) => m.state === ModelState.LOADING).map((m) => m.name);
    const out = outOfService();
    return { ready: isReady(), loading, models, ...(out.length ? { devices_out_of_service: out } : {}) };
  };
}

export interface Ports {
  grpc: number;
  /** The REST port (endpoints.http_port). */
  http: number;
  admin: number;
}

export class StowageServer {
  readonly registry: ModelRegistry;
  readonly metrics: Metrics;
  readonly statistics: Statistics;
  readonly sharedMemory: SharedMemoryRegistry;
  /** Host RAM copies of weights, one per distinct tensor, shared by every device actor. */
  readonly hostWeights = new HostWeights();
  readonly ports: Ports = { grpc: 0, http: 0, admin: 0 };
  #config: NodeConfig;
  #logger: Logger;
  /** The gRPC edge, when the main thread is the only edge (endpoints.edge_threads 0). */
  #edge?: GrpcEdge;
  /** The edge threads, otherwise. */
  #edgeThreads?: EdgeThreads;
  /** Edge threads (endpoints.edge_threads, resolved once): every count shared between threads has a row per edge. */
  readonly #edgeCount: number;
  /** The main thread's rooms (actors/rooms/rooms.ts), beside every edge thread's. */
  #rooms?: Rooms;
  readonly #admission: Admission;
  #admin?: http.Server;
  #devices?: Devices;
  #repository?: ModelRepository;
  #ready = false;
  #stopWatching?: () => void;
  #hooks?: HookPool;
  #compiler?: Compiler;
  /** The REST edge (endpoints.http_port). */
  #http?: HttpEdge;
  /** What gRPC health probes hear (grpc.health.v1): a model's name is that model, any other name the server. */
  #health?: Health;
  /** The health service on the gRPC edge: its Watch streams end at shutdown. */
  #healthService?: HealthService;
  /** Devices taken out of service, with why (their GPU's context poisoned). */
  readonly #outOfService = new Map<number, string>();
  readonly #fatal = (() => {
    let resolve: (why: string) => void = () => undefined;
    const promise = new Promise<string>((r) => {
      resolve = r;
    });
    return { promise, resolve };
  })();
  /** Backend cuda: the GPUs were found (NVML is read again at each scrape). */
  #cudaStarted = false;
  /** The leases on models' instances and on shared-memory regions, every thread's. */
  readonly #leases: { models: Leases; regions: Leases };
  /** The node's quotas (shared/admission.ts), shared with the edges. */
  readonly #quotas: Quotas;
  /** Where every thread counts its requests, per lease slot (once the devices are known). */
  #counters: RequestCounters | null = null;

  private constructor(config: NodeConfig, logger: Logger) {
    this.#config = config;
    this.#logger = logger;
    this.statistics = new Statistics();
    this.metrics = new Metrics({ pendingByModel: () => this.registry.pending(), loadedModels: () => this.registry.all().filter((r) => r.state === ModelState.READY).map((r) => r.name), traceExportFailures, hostWeightBytes: () => this.hostWeights.bytes, statistics: this.statistics, threads: () => this.#threads(), gpus: () => this.#gpus(), devices: async () => (await this.#devices?.reports()) ?? [] });
    const { endpoints } = config.global;
    // One count of the inferences in flight for every edge of the process.
    this.#admission = new Admission(endpoints.max_concurrent_requests, endpoints.max_inflight_bytes);
    admissionMetrics(this.#admission, this.metrics.registry);
    // One count of each tenant's and model's quota for every thread that holds requests: the main thread's row 0.
    const { quotas } = config.global;
    const edgeCount = edgeThreads(endpoints.edge_threads);
    this.#edgeCount = edgeCount;
    this.#quotas = new Quotas(Quotas.create(quotas.tenants, quotas.models, edgeCount + 1), 0);
    quotaMetrics(this.#quotas, this.metrics.registry);
    // One lease mechanism for every thread that runs requests (shared/leases.ts): a row per edge
    // thread and the main thread's own, on models' instances and on shared-memory regions. A
    // segment of slots added later goes to the edges before anything names a slot in it.
    const leases = Leases.create(edgeCount, (segment) => {
      const counters = this.#counters?.grow();
      if (!counters) return;
      this.#rooms?.slotsGrown(segment, counters);
      this.#edgeThreads?.slotsGrown(segment, counters);
    });
    this.registry = new ModelRegistry(leases, (instance, slot) => this.statistics.fold(modelOf(instance), slot));
    const regionHolds = Leases.create(edgeCount, (segment) => {
      this.#rooms?.regionSlotsGrown(segment);
      this.#edgeThreads?.regionSlotsGrown(segment);
    });
    this.sharedMemory = new SharedMemoryRegistry((regionId) => this.#devices?.forgetRegion(regionId), regionHolds);
    this.#leases = { models: leases, regions: regionHolds };
  }

  /** The GPUs now, for the nv_gpu_* metrics (none on backend cpu). */
  #gpus(): GpuInfo[] {
    return this.#cudaStarted ? gpuReport().gpus : [];
  }

  /**
   * Backend cuda: load the CUDA libraries (an error naming what is missing and the command that
   * installs it, when they are not there), find the GPUs this process sees and log them.
   */
  #startCuda(): FoundGpus {
    let libraries: { loaded: string[] };
    let report: GpuReport;
    try {
      libraries = loadCuda(cudaLibraryDirs());
      report = gpuReport();
    } catch (err) {
      throw errors.cudaUnavailable((err as Error).message);
    }
    if (report.gpus.length === 0) throw errors.cudaUnavailable(`backend cuda: this process sees no GPU (CUDA_VISIBLE_DEVICES=${process.env.CUDA_VISIBLE_DEVICES ?? 'unset'})`);
    this.#cudaStarted = true;
    this.#logger.info({
      gpus: report.gpus.map((g) => ({ ordinal: g.ordinal, name: g.name, uuid: g.uuid, pciBusId: g.pciBusId, memoryTotalBytes: g.memoryTotalBytes, memoryFreeBytes: g.memoryTotalBytes - g.memoryUsedBytes })),
      driver: report.driverVersion,
      driverCuda: report.driverCuda,
      runtimeCuda: report.runtimeCuda,
      cudnn: report.cudnn,
      libraries: libraries.loaded.length,
      ...(report.nvmlError ? { nvmlError: report.nvmlError } : {}),
    }, 'GPUs found');
    // NVML's figures, or without NVML the CUDA runtime's (which makes a context on each GPU here).
    const free = new Map(report.gpus.map((g) => [g.ordinal, g.memoryTotalBytes > 0 ? g.memoryTotalBytes - g.memoryUsedBytes : gpuMemory(g.ordinal).freeBytes]));
    return { ordinals: report.gpus.map((g) => g.ordinal), freeBytes: (ordinal) => free.get(ordinal) ?? 0 };
  }

  /** Every worker thread, named as stowage_thread_heap_bytes labels them. */
  *#threads(): Iterable<[string, Worker]> {
    for (const device of this.#devices?.handles ?? []) yield [`device-${device.deviceId}`, device.thread];
    if (this.#compiler) for (const [i, thread] of this.#compiler.threads.entries()) yield [`compiler-${i}`, thread];
    if (this.#hooks) for (const [i, thread] of this.#hooks.threads.entries()) yield [`hook-${i}`, thread];
    if (this.#edgeThreads) yield* this.#edgeThreads.threads();
  }

  static start(config: NodeConfig, logger: Logger): Promise<StowageServer> {
    return startOrStop(new StowageServer(config, logger), (server) => server.#start());
  }

  /** The cap on inference RPCs in flight, and how many are. */
  get admission(): Admission {
    return this.#admission;
  }

  get ready(): boolean {
    return this.#ready;
  }

  /**
   * Settles with why when no device of the node is left in service (each taken out: its GPU's
   * context poisoned): the process can serve nothing more, and must be replaced (main.ts exits
   * non-zero, for the supervisor to start a new one).
   */
  get fatal(): Promise<string> {
    return this.#fatal.promise;
  }

  /**
   * A device's GPU context is poisoned: said in /readyz and the metrics; the other device actors on
   * its GPU go out with it; with none left, fatal.
   */
  #deviceOutOfService(deviceId: number, reason: string, cudaError: number): void {
    this.#outOfService.set(deviceId, reason);
    this.#edgeThreads?.deviceOut(deviceId, `it is out of service: ${reason}`);
    this.#devices?.outOfService(deviceId, reason, cudaError);
    const handles = this.#devices?.handles ?? [];
    if (handles.length > 0 && handles.every((h) => !h.serving)) {
      this.#ready = false;
      this.#health?.setServing(false);
      this.#fatal.resolve(`every device is out of service (${[...this.#outOfService].map(([d, why]) => `device ${d}: ${why}`).join('; ')})`);
    }
  }

  /**
   * A device lost an instance (its replacement worker could not load it again): the model is routed
   * to the devices that still have it, every edge told; where none has it, it is not ready, saying
   * why, until it is loaded again.
   */
  #instanceLost(instance: InstanceKey, why: string): void {
    const model = modelOf(instance);
    if (this.#devices?.lost(instance)) {
      this.#routeChanged(model, this.registry.routeOf(model));
      return;
    }
    void this.#repository?.lost(model, instance, `no device holds it any more: ${why}`);
  }

  /**
   * Start in order: the admin port (probes answer from the first moment), the runtime (tracing,
   * ONNX Runtime, CUDA), the device actors, the repository's models, then the edges that serve
   * requests; ready last.
   */
  async #start(): Promise<void> {
    await this.#startAdmin();
    const workers = await this.#startRuntime();
    const devices = await this.#startDevices(workers);
    this.#countRequests(devices);
    const edgeCount = this.#edgeCount;
    // Edge threads run the request path themselves, each with hook threads of its own.
    const repository = await this.#startRepository(devices, edgeCount > 0, Math.min(...workers.map((w) => w.scheduler.priority_levels)));
    const health = new Health(this.registry);
    this.#health = health;
    const ops = this.#operations(devices, repository, workers, health);
    const start = this.#roomsStart(devices, edgeCount);
    const rooms = this.#mainRooms(start, devices, edgeCount);
    if (edgeCount > 0) await this.#startEdgeThreads(edgeCount, start, devices, ops, rooms, health);
    else await this.#startMainEdge(ops, rooms, health);
    this.#ready = true;
    health.setServing(true);
    const { endpoints } = this.#config.global;
    const models = this.registry.all();
    this.#logger.info({
      grpc: `${endpoints.host}:${this.ports.grpc}`,
      http: `${endpoints.host}:${this.ports.http}`,
      admin: `${endpoints.host}:${this.ports.admin}`,
      node: nodeName(this.#config.node_name, this.ports.grpc),
      ready: models.filter((m) => m.state === ModelState.READY).map((m) => m.name),
      unavailable: models.filter((m) => m.state !== ModelState.READY).map((m) => m.name),
    }, 'serving');
  }

  /** /healthz, /readyz and /metrics, before anything else starts. */
  async #startAdmin(): Promise<void> {
    const { endpoints } = this.#config.global;
    this.#admin = createAdminServer({ readiness: nodeReadiness(this.registry, () => this.#ready, () => [...this.#outOfService].map(([device, reason]) => ({ device, reason }))), metrics: registryMetrics(this.metrics.registry, async () => this.#devices?.reported(), (render) => this.metrics.scraping(render)) });
    this.ports.admin = await listen(this.#admin, endpoints.host, endpoints.admin_port);
    this.#logger.info({ admin: `${endpoints.host}:${this.ports.admin}` }, 'admin listening: /healthz, /readyz, /metrics');
  }

  /** Tracing, ONNX Runtime's environment and (backend cuda) the GPUs; the device actors to start, one per worker. */
  async #startRuntime(): Promise<ResolvedWorker[]> {
    // ONNX Runtime's environment is made once per process, by whoever asks first, and keeps the
    // thread pools it was made with: make it here, before any thread (the compiler's onnxruntime-node
    // included) could make it without the process-wide pool runtime.thread_pool: process needs.
    // OpenTelemetry, when the OTEL_* environment asks for it (tracing.ts): before any request.
    await startTracing(this.#logger, this.#config.global.tracing);
    const { thread_pool: threadPool, intra_op_threads: intraOp, backend } = this.#config.global.runtime;
    initOrt(processThreadPool(threadPool, intraOpThreadsFor(backend, intraOp)));
    // Backend cuda: the CUDA libraries and the GPUs, before any device actor starts.
    const found = backend === 'cuda' ? this.#startCuda() : undefined;
    // One device actor per worker (per device); on backend cpu each is a virtual device of its own.
    const workers = resolveWorkers(this.#config, 'node file', found);
    if (workers.some((w) => w.weights)) ensureWritable(this.#config.cache_dir);
    return workers;
  }

  /** One device actor per worker, the compiler they open compiled models from, and the pool that routes to them. */
  async #startDevices(workers: ResolvedWorker[]): Promise<Devices> {
    const { backend } = this.#config.global.runtime;
    const policies = new ModelPolicies(workers.map((w) => ({ deviceId: w.deviceId, models: w.scheduler.models })));
    const handles = await Promise.all(workers.map((w) => this.#startDevice(w, policies)));
    const scheduling = this.#config.gateway.scheduling;
    // Models compile off the devices' threads, into the compile cache their weightless sessions open from.
    if (workers.some((w) => w.weights)) this.#compiler = new Compiler(this.#config.cache_dir, undefined, backend);
    const devices = new Devices(handles, {
      mode: scheduling.mode,
      policies,
      hostWeights: this.hostWeights,
      compiler: this.#compiler,
      logger: this.#logger,
      lpt: {
        defaultReplicas: scheduling.default_replicas,
        replicas: Object.fromEntries(Object.entries(scheduling.models).filter(([, m]) => m.replicas !== undefined).map(([name, m]) => [name, m.replicas!])),
        fillFactor: scheduling.routing_fill_factor,
        policy: scheduling.routing_policy,
        rebalanceSeconds: scheduling.rebalance_compute_seconds,
        budgets: new Map(workers.map((w) => [w.deviceId, w.weights?.budgetBytes ?? 0])),
      },
      onPlacement: (placement) => this.metrics.recordPlacement(placement),
      // A moved model's requests go to its new devices from every edge too.
      onModelMoved: (model) => this.#routeChanged(model, this.registry.routeOf(model)),
    });
    this.#devices = devices;
    new Gauge({
      name: 'stowage_device_in_service', help: 'Whether each device serves (1), or is stopped or out of service (0: its GPU context poisoned; /readyz says why)', labelNames: ['device'], registers: [this.metrics.registry],
      collect() {
        for (const h of devices.handles) this.set({ device: String(h.deviceId) }, h.serving ? 1 : 0);
      },
    });
    this.#logger.info({
      devices: workers.map((w) => w.deviceId),
      workers: workers.map((w) => ({
        name: w.name,
        device: w.deviceId,
        gpu: w.gpu,
        weightBudgetBytes: w.weights?.budgetBytes ?? null,
        pinned: Object.keys(w.scheduler.models).filter((m) => w.scheduler.models[m].residency === 'device'),
      })),
      gateway: this.#config.gateway.scheduling.mode,
      cacheDir: this.#config.cache_dir,
    }, 'device actors started');
    return devices;
  }

  /**
   * Where every thread counts the requests it answers, per lease slot and thread
   * (shared/request-counters.ts): statistics add the slots in use when read, and take a slot's
   * counts as the model's own when it is freed. A segment of counters for each segment of slots
   * taken already; later ones are added as the leases' are (the constructor).
   */
  #countRequests(devices: Devices): void {
    const counters = RequestCounters.create(this.#edgeCount, Math.max(...devices.handles.map((d) => d.deviceId)) + 1);
    for (let i = 0; i < this.#leases.models.shape.segments.length; i++) counters.grow();
    this.#counters = counters;
    this.statistics.shareCounters(counters, () => [...this.registry.slots()].map(([instance, slot]) => [modelOf(instance), slot]));
  }

  /** One worker's device actor, its executions, weights and supervision reported here. */
  #startDevice(w: ResolvedWorker, policies: ModelPolicies): Promise<DeviceHandle> {
    const { backend } = this.#config.global.runtime;
    const { models: _owned_by_policies, ...scheduling } = w.scheduler;
    this.metrics.recordWeights(w.deviceId, '', null, w.weights && { residentBytes: 0, logicalBytes: 0, budgetBytes: w.weights.budgetBytes });
    return DeviceHandle.create({
      deviceId: w.deviceId,
      intraOpThreads: intraOpThreadsFor(backend, w.runtime.intra_op_threads),
      inlineRunBelowMs: w.runtime.inline_run_below_ms,
      threadPool: w.runtime.thread_pool,
      scheduler: scheduling,
      policies,
      weights: w.weights,
      cuda: backend === 'cuda' ? { ordinal: w.gpu, providerOptions: cudaProviderOptions(w.runtime.cuda), libraryDirs: cudaLibraryDirs(), graphs: w.runtime.cuda.graphs, sharedArena: w.runtime.cuda.shared_arena } : null,
      warmup: w.runtime.warmup === 'on' || (w.runtime.warmup === 'auto' && backend === 'cuda'),
      sessions: {
        share: w.runtime.share_sessions, sharedActivations: backend === 'cpu' && w.runtime.share_activations, budgetBytes: w.runtime.session_budget_bytes,
        perBatchSize: w.runtime.session_per_batch_size === true || (w.runtime.session_per_batch_size === 'auto' && backend === 'cuda'),
      },
      hostWeights: this.hostWeights,
      logger: this.#logger,
      onExecutions: (report) => {
        this.statistics.recordExecutions(w.deviceId, report);
        for (const m of report.models) {
          this.metrics.recordWeightHits(m.model, m.weightHits);
          this.#devices?.recordExecution(m.model, m.batches.reduce((ns, b) => ns + b.computeInferNs, 0));
        }
      },
      onWeights: (model, load, memory) => this.metrics.recordWeights(w.deviceId, model, load, memory),
      onCompiled: (files, hits) => this.metrics.recordCompiles(files, hits),
      onOutOfService: (deviceId, reason, cudaError) => this.#deviceOutOfService(deviceId, reason, cudaError),
      // Edge threads' doors to the worker that died closed with it: new ones to its replacement.
      onServing: (deviceId) => this.#edgeThreads?.deviceServing(deviceId),
      onExited: (deviceId, why) => this.#edgeThreads?.deviceOut(deviceId, why),
      onLost: (_deviceId, instance, why) => this.#instanceLost(instance, why),
      // Fault injection (the supervision tests): a start timeout short enough to wait out in a test.
      ...(process.env.STOWAGE_FAULT_DEVICE_START_TIMEOUT_MS ? { startTimeoutMs: Number(process.env.STOWAGE_FAULT_DEVICE_START_TIMEOUT_MS) } : {}),
    });
  }

  /**
   * The hook threads, and every model of the repository loaded (and, in dynamic mode, watched).
   * With `edgePaths` the edges run hooks on pools of their own: this thread's pool has one thread,
   * which checks each model.js as it loads and runs what the edges send here.
   */
  async #startRepository(devices: Devices, edgePaths: boolean, priorityLevels: number): Promise<ModelRepository> {
    const { hooks: hookConfig, model_control_mode: mode, model_poll_seconds: pollSeconds } = this.#config.global;
    this.#hooks = new HookPool({
      threads: edgePaths ? 1 : hookConfig.threads,
      timeoutMs: hookConfig.timeout_seconds * 1000,
      importTimeoutMs: hookConfig.import_timeout_seconds * 1000,
      maxHeapMib: hookConfig.max_heap_mib,
    });
    const repository = new ModelRepository({
      dir: this.#config.model_repo,
      mode,
      include: this.#config.models_include,
      registry: this.registry,
      devices,
      priorityLevels,
      hooks: this.#hooks,
      logger: this.#logger,
      onLoaded: (model, loadMs) => this.metrics.recordLoad(model, loadMs / 1000),
    });
    this.#repository = repository;
    await repository.loadAll();
    await devices.repack('start-up'); // lpt_packing: every model placed at once, heaviest first
    if (mode === 'dynamic') this.#stopWatching = watchRepository(repository, this.#config.model_repo, pollSeconds, this.#logger);
    return repository;
  }

  /** Every operation the edges answer, as plain functions (shared/operations.ts). */
  #operations(devices: Devices, repository: ModelRepository, workers: ResolvedWorker[], health: Health): Operations {
    const { endpoints } = this.#config.global;
    const logger = this.#logger;
    const kserve = kserveOperations({ registry: this.registry, devices, repository, statistics: this.statistics, sharedMemory: this.sharedMemory,
      systemSharedMemory: endpoints.system_shared_memory, backend: this.#config.global.runtime.backend, logger, version: PACKAGE_VERSION, isReady: () => this.#ready,
      priorities: { levels: this.#config.global.scheduler.priority_levels, defaultLevel: this.#config.global.scheduler.default_priority } });
    // A load's, an unload's or a registration's answer waits until every edge has read the route or region it made: a
    // client's next request then finds it on whichever edge takes it.
    const edgesHaveIt = <Q, R>(op: (req: Q) => R | Promise<R>) => async (req: Q): Promise<R> => {
      const reply = await op(req);
      await this.#edgeThreads?.synced();
      return reply;
    };
    return {
      ...kserve,
      RepositoryModelLoad: edgesHaveIt(kserve.RepositoryModelLoad),
      RepositoryModelUnload: edgesHaveIt(kserve.RepositoryModelUnload),
      SystemSharedMemoryRegister: edgesHaveIt(kserve.SystemSharedMemoryRegister),
      CudaSharedMemoryRegister: edgesHaveIt(kserve.CudaSharedMemoryRegister),
      ...controlOperations({
        registry: this.registry, devices, statistics: this.statistics, logger,
        weightTraffic: (model) => this.metrics.weightTraffic(model),
        weightBudgetBytes: workers.reduce((sum, w) => sum + (w.weights?.budgetBytes ?? 0), 0),
        // A device without a session budget leaves the node's unbounded: none is reported then.
        sessionBudgetBytes: workers.every((w) => w.runtime.session_budget_bytes > 0) ? workers.reduce((sum, w) => sum + w.runtime.session_budget_bytes, 0) : 0,
        nodeName: () => nodeName(this.#config.node_name, this.ports.grpc),
        startedMs: STARTED_MS,
      }),
      HealthStatus: (req) => ({ status: health.status(req.service) }),
      // Edge threads log with loggers of their own: they follow the level this one is set to.
      LogSettings: (req) => {
        const settings = kserve.LogSettings(req);
        this.#edgeThreads?.setLogLevel(logger.level);
        return settings;
      },
    };
  }

  /**
   * Edge threads own the protocol and run the request path themselves, each in rooms of its own
   * (actors/rooms/rooms.ts); this thread answers what they ask and runs in its rooms what they send it.
   */
  async #startEdgeThreads(edgeCount: number, start: RoomsStart, devices: Devices, ops: Operations, rooms: Rooms, health: Health): Promise<void> {
    const { endpoints } = this.#config.global;
    // Tracing on: each edge exports its requests' spans itself, counting its failed exports where /metrics reads them.
    let traceFailures: SharedArrayBuffer | undefined;
    if (tracingOn()) {
      traceFailures = exportFailureMemory(edgeCount + 1);
      countExportFailuresIn(traceFailures, 0);
    }
    const edges = new EdgeThreads({ count: edgeCount, endpoints, admission: this.#admission, logLevel: this.#logger.level, operations: ops,
      infer: (request, options) => rooms.infer(request, options), rooms: this.#edgeRooms(start, devices), logger: this.#logger, metrics: edgeMetrics(this.metrics.registry),
      ...(traceFailures ? { traceExportFailures: traceFailures } : {}) });
    this.#edgeThreads = edges;
    health.watch(() => edges.healthChanged());
    const ports = await edges.start();
    this.ports.grpc = ports.grpc;
    this.ports.http = ports.http;
  }

  /** The main thread alone is the edge: gRPC (inference, control, health) and REST on it. */
  async #startMainEdge(ops: Operations, rooms: Rooms, health: Health): Promise<void> {
    const { endpoints } = this.#config.global;
    const logger = this.#logger;
    const edgeMetricsOf = edgeMetrics(this.metrics.registry);
    const infer: Infer = (request, options) => {
      edgeMetricsOf.viaMain('main');
      return rooms.infer(request, options);
    };
    const early = this.#quotas.earlyRefusal;
    const edge = new GrpcEdge(endpoints, logger, this.#admission, early);
    this.#edge = edge;
    edge.addService(loadControlClient().service, controlTable(edge, ops));
    // Large ModelInfer messages own their buffer: their tensors go to the device without a copy.
    edge.addService(passEncodedResponses(markOwnedBuffers(loadInferenceClient().service, ['ModelInfer', 'ModelStreamInfer'])), inferenceTable(edge, ops, infer));
    this.#healthService = new HealthService(health);
    this.#healthService.register(edge);
    // The REST twin of the gRPC service: the same operations, the same request path, the same admission.
    const http = new HttpEdge({
      host: endpoints.host, port: endpoints.http_port, maxBodyBytes: endpoints.max_receive_message_bytes, maxJsonBytes: endpoints.max_json_body_bytes,
      requestTimeoutMs: endpoints.http_request_timeout_seconds * 1000, admission: this.#admission, logger,
      ...(early ? { tenantGate: { key: endpoints.tenant_key, refusal: early } } : {}),
    });
    http.add(restRoutes(ops, infer, endpoints.tenant_key));
    this.#http = http;
    this.ports.http = await http.start();
    this.ports.grpc = await edge.start();
  }

  /**
   * What every thread's rooms stand on (actors/rooms/rooms.ts): the lease slots, request counters,
   * region holds and quotas in shared memory, the routing, each edge's share of the hook threads.
   */
  #roomsStart(devices: Devices, edgeCount: number): RoomsStart {
    const { hooks } = this.#config.global;
    return {
      routing: devices.mode === 'least_outstanding' ? 'least_outstanding' : 'round_robin',
      leases: this.#leases.models.shape,
      counters: this.#counters!.shape,
      regionHolds: this.#leases.regions.shape,
      quotas: this.#quotas.shape,
      levels: this.#levels(),
      costHalflifeMs: this.#config.global.scheduler.ema_halflife_seconds * 1000,
      hooks: { threads: edgeHookThreads(hooks.threads, edgeCount), timeoutMs: hooks.timeout_seconds * 1000, importTimeoutMs: hooks.import_timeout_seconds * 1000, maxHeapMib: hooks.max_heap_mib },
    };
  }

  /**
   * The main thread's rooms, in the last row of the leases, counters and holds (row 0 of the quotas), reaching each
   * device through its handle, running hooks on the node's hook pool; what they cannot take is refused saying why
   * (node/refusals.ts). Fed every route and region as it changes, before the edges are.
   */
  #mainRooms(start: RoomsStart, devices: Devices, edgeCount: number): Rooms {
    const rooms = new Rooms(start, { row: edgeCount, quotaRow: 0 }, {
      elsewhere: (req, options) => refuse(req, options, { registry: this.registry, sharedMemory: this.sharedMemory, devices }),
      lastRelease: (of) => (of === 'model' ? this.registry.released() : this.sharedMemory.released()),
      tracing: tracingOn(),
      hooks: this.#hooks!,
    });
    for (const device of devices.handles) rooms.reach(device, device.backlog);
    for (const route of this.registry.routes()) rooms.route(route.model, devices.routed(route, edgeCount));
    this.#rooms = rooms;
    this.registry.watchRoutes((model, route) => this.#routeChanged(model, route));
    this.sharedMemory.watch((name, region) => {
      rooms.region(name, region);
      this.#edgeThreads?.regionChanged(name, region);
    });
    return rooms;
  }

  /**
   * A model's route changed: every thread's rooms route it so from now on, this thread's first, with where lpt_packing
   * placed the model and which devices hold it when a device lost it (Devices.routed).
   */
  #routeChanged(model: string, registryRoute: EdgeRoute | null): void {
    const route = registryRoute && this.#devices ? this.#devices.routed(registryRoute, this.#edgeCount) : null;
    this.#rooms?.route(model, route);
    this.#edgeThreads?.routeChanged(model, route);
  }

  /** What the edge threads' handle needs to start each edge's rooms and keep them told. */
  #edgeRooms(start: RoomsStart, devices: Devices): EdgeRooms {
    return {
      start,
      leases: this.#leases.models,
      routes: () => this.registry.routes().map((r) => devices.routed(r, this.#edgeCount)),
      devices: devices.handles,
      counters: this.#counters!,
      regionHolds: this.#leases.regions,
      quotas: this.#quotas,
      regions: () => this.sharedMemory.edgeRegions(),
      regionsReleased: () => this.sharedMemory.released(),
      leasesReleased: () => this.registry.released(),
    };
  }

  /** How the scheduler resolves a request's priority level: the node file's default, and each model's where set. */
  #levels(): Levels {
    const { scheduler } = this.#config.global;
    const models = Object.entries(scheduler.models).flatMap(([model, m]) => (m.priority ? [[model, m.priority] as const] : []));
    return { defaultLevel: scheduler.default_priority, models: Object.fromEntries(models) };
  }

  /**
   * Graceful stop: report not ready, stop accepting calls, let the calls in flight finish (for at
   * most `graceMs`, by default endpoints.shutdown_grace_seconds), then stop the device actor,
   * close the shared-memory regions and the admin port.
   */
  async stop(graceMs = this.#config.global.endpoints.shutdown_grace_seconds * 1000): Promise<void> {
    this.#ready = false;
    // Health keeps answering (NOT_SERVING) while the edges drain; Watch streams end now.
    this.#health?.setServing(false);
    this.#healthService?.close();
    this.#stopWatching?.();
    await Promise.all([this.#edge?.stop(graceMs), this.#http?.stop(graceMs), this.#edgeThreads?.stop(graceMs)]);
    await this.#devices?.stop();
    await this.#hooks?.close();
    await this.#compiler?.close();
    this.sharedMemory.unregister('');
    this.sharedMemory.unregister('', 'cuda');
    await closeAdmin(this.#admin);
    await stopTracing(this.#logger); // flushes the spans of the last requests, within TRACE_FLUSH_MS
  }
}
