/**
 * Prometheus metrics, served on the admin port at /metrics. One registry, on the main thread:
 * device actors report through their execution messages. What every request or execution
 * changes (Triton's per-model counters, the device totals, routes) is kept as plain numbers by
 * Statistics and the router's counts and read here at scrape time: the request path does no
 * label lookups. Triton's names and labels where a
 * Triton user looks for them (durations as cumulative microsecond counters, as Triton exports
 * them), `stowage_*` for ours, and prom-client's process and Node.js defaults (event-loop lag
 * among them).
 */
import { getHeapStatistics } from 'node:v8';
import type { Worker } from 'node:worker_threads';
import type { GpuInfo } from '../native/cuda.js';
import { SESSION_CLOSE_REASONS, SESSION_OPEN_REASONS, type DeviceReport } from '../shared/channels/device.js';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { WeightLoad, WeightMemory } from '../shared/channels/device.js';
import type { Placement } from '../routing/placement.js';
import { MODEL_VERSION } from '../shared/constants.js';
import type { DeviceCounters, ModelCounters, Statistics } from './statistics.js';
import { FAILURE_REASONS } from '../shared/failure-reason.js';
import { DURATION_BUCKETS_MS, type CountedSeries } from '../shared/request-counters.js';

export interface MetricsSources {
  /** In-flight requests per model (nv_inference_pending_request_count). */
  pendingByModel: () => Map<string, number>;
  /** The models loaded (READY) now: each has every per-model series, at 0 before its first request, as Triton's do. */
  loadedModels?: () => Iterable<string>;
  /** Trace exports that failed (stowage_trace_export_failures_total). */
  traceExportFailures?: () => number;
  /** Host RAM held for weights by the process (stowage_weight_cache_host_bytes). */
  hostWeightBytes: () => number;
  /** Per-model and per-device counts of requests and executions. */
  statistics: Statistics;
  /** The worker threads by name (device-0, compiler-0, hook-1, ...), for stowage_thread_heap_bytes. */
  threads: () => Iterable<[string, Worker]>;
  /** Backend cuda: the GPUs as NVML reads them now (nv_gpu_*); empty on the CPU. */
  gpus?: () => GpuInfo[];
  /** Every device's loaded instances (queue, residency) and sessions now: asked for at each scrape. */
  devices?: () => Promise<readonly DeviceReport[]>;
}

/** A model's weight-cache traffic since the process started, over every device. */
export interface WeightTraffic {
  hits: number;
  misses: number;
  /** Seconds its batches waited for its weights to come onto a device (stowage_weight_cache_load_seconds_total). */
  loadSeconds: number;
}

/** The scrapes rendering now, and the devices' reports they share (Metrics.scraping). */
interface Scrape {
  depth: number;
  devices: Promise<readonly DeviceReport[]> | undefined;
}

/** A counter set at scrape time from a running total (Prometheus counters are totals since start). */
function totals(counter: Counter, read: (set: (labels: Record<string, string>, value: number) => void) => void): void {
  counter.reset();
  read((labels, value) => {
    if (value > 0) counter.inc(labels, value);
  });
}

export class Metrics {
  readonly registry = new Registry();
  readonly #loadSecs: Gauge;
  /** Requests routed, per model and device (stowage_requests_routed_total). */
  readonly #weightGauges: Record<'residentBytes' | 'logicalBytes' | 'budgetBytes', Gauge>;
  readonly #sharing: Gauge;
  /**
   * Per model: executions that found its weights on the device, and those that brought them on (ModelControlStatus
   * reads them).
   */
  readonly #weightTraffic = new Map<string, WeightTraffic>();
  readonly #weightHits: Counter;
  readonly #weightMisses: Counter;
  readonly #evictions: Counter;
  readonly #weightLoadBytes: Counter;
  readonly #weightLoadSecs: Counter;
  readonly #weightUploadsBeside: Counter;
  readonly #weightHiddenSecs: Counter;
  readonly #compiles: Counter;
  readonly #placedModels: Gauge;
  readonly #placedBytes: Gauge;
  readonly #placedLoad: Gauge;
  readonly #statistics: Statistics;
  readonly #scrape: Scrape = { depth: 0, devices: undefined };

  constructor(sources: MetricsSources) {
    const registers = [this.registry];
    const { statistics } = sources;
    this.#statistics = statistics;
    modelMetrics(sources, registers);
    gpuMetrics(sources, registers);
    instanceMetrics(sources, registers, this.#scrape);
    this.#loadSecs = new Gauge({ name: 'nv_model_load_duration_secs', help: 'Model load time in seconds', labelNames: ['model', 'version'], registers });
    deviceMetrics(statistics, registers);
    const counter = (name: string, help: string, labelNames: readonly string[]) => new Counter({ name, help, labelNames, registers });
    const gauge = (name: string, help: string) => new Gauge({ name, help, labelNames: ['device'], registers });
    this.#weightGauges = {
      residentBytes: gauge('stowage_weight_cache_resident_bytes', 'Bytes of weights on the device (each distinct tensor once)'),
      logicalBytes: gauge('stowage_weight_cache_logical_bytes', 'Bytes the resident models would take without sharing tensors'),
      budgetBytes: gauge('stowage_weight_cache_budget_bytes', 'The device\'s weight budget: the arena\'s size'),
    };
    this.#sharing = gauge('stowage_weight_cache_sharing_ratio', 'Logical over resident bytes: how many times over shared tensors would be stored without sharing (1: no sharing)');
    new Gauge({
      name: 'stowage_weight_cache_host_bytes', help: 'Bytes of weights in host RAM for system and device models: each distinct tensor once, shared by every device', registers,
      collect() {
        this.set(sources.hostWeightBytes());
      },
    });
    this.#weightHits = counter('stowage_weight_cache_hits_total', 'Executions whose model\'s weights were on the device already', ['model']);
    this.#weightMisses = counter('stowage_weight_cache_misses_total', 'Executions that had to bring their model\'s weights onto the device first', ['model']);
    this.#evictions = counter('stowage_weight_cache_evictions_total', 'Times the model\'s weights were evicted from a device to make room', ['model']);
    this.#weightLoadBytes = counter('stowage_weight_cache_load_bytes_total', 'Bytes of the model\'s weights copied onto a device, by where they came from (host RAM or disk)', ['model', 'source']);
    this.#weightLoadSecs = counter('stowage_weight_cache_load_seconds_total', 'Seconds the model\'s batches waited for its weights to come onto a device', ['model']);
    this.#weightUploadsBeside = counter('stowage_weight_cache_uploads_beside_total', 'Cold loads of the model whose weights were copied while the device ran other models (runtime.upload_beside_execution)', ['model']);
    this.#weightHiddenSecs = counter('stowage_weight_cache_load_hidden_seconds_total', 'Seconds of the model\'s weight copies that ran beside other models\' executions, which no batch of it waited for', ['model']);
    // The old design's name (a gateway actor routed) stays one release as a deprecated alias with the
    // same values: docs/operations.md, *Deprecated metric names*.
    for (const [name, help] of [
      ['stowage_requests_routed_total', 'Requests sent to each device, per model'],
      ['stowage_gateway_routed_total', 'Deprecated alias of stowage_requests_routed_total (same values), kept for one release'],
    ]) {
      new Counter({
        name, help, labelNames: ['model', 'device'], registers,
        collect() {
          // Every thread's routes, counted where it routes (shared/request-counters.ts).
          totals(this, (set) => {
            for (const [m, devices] of statistics.routes()) for (const [device, n] of devices) set({ model: m, device: String(device) }, n);
          });
        },
      });
    }
    this.#placedModels = gauge('stowage_gateway_placed_models', 'Models placed on the device by lpt_packing');
    this.#placedBytes = gauge('stowage_gateway_placed_bytes', 'Weight bytes of the models placed on the device by lpt_packing');
    this.#placedLoad = gauge('stowage_gateway_placed_load_seconds', 'Device-seconds of work measured, in the last packing window, for the models lpt_packing placed on the device');
    this.#compiles = counter('stowage_compile_cache_lookups_total', 'ONNX files opened, by whether cache_dir had them compiled already', ['result']);
    processMetrics(sources, registers);
    collectDefaultMetrics({ register: this.registry });
  }

  /**
   * `render` (a /metrics scrape, rendered in slices) with one reading of the devices and of the
   * models' counters for the whole of it: read per family, each slice read them anew, and the
   * families that ask the devices waited for them one after another.
   */
  async scraping<T>(render: () => Promise<T>): Promise<T> {
    const scrape = this.#scrape;
    scrape.depth++;
    scrape.devices = undefined;
    try {
      return await this.#statistics.scraping(render);
    } finally {
      if (--scrape.depth === 0) scrape.devices = undefined;
    }
  }

  recordLoad(model: string, seconds: number): void {
    this.#loadSecs.set({ model, version: MODEL_VERSION }, seconds);
  }

  /** A device's weight traffic: one model's load (or hit), and the memory after it. */
  recordWeights(device: number, model: string, load: WeightLoad | null, memory: WeightMemory | null): void {
    if (load) {
      (load.hit ? this.#weightHits : this.#weightMisses).inc({ model });
      let traffic = this.#weightTraffic.get(model);
      if (!traffic) this.#weightTraffic.set(model, (traffic = { hits: 0, misses: 0, loadSeconds: 0 }));
      traffic[load.hit ? 'hits' : 'misses']++;
      if (!load.hit) {
        traffic.loadSeconds += load.loadMs / 1000;
        this.#weightLoadBytes.inc({ model, source: 'host' }, load.loadedBytes - load.diskBytes);
        this.#weightLoadBytes.inc({ model, source: 'disk' }, load.diskBytes);
        this.#weightLoadSecs.inc({ model }, load.loadMs / 1000);
        if (load.hiddenMs !== undefined) {
          this.#weightUploadsBeside.inc({ model });
          this.#weightHiddenSecs.inc({ model }, load.hiddenMs / 1000);
        }
      }
      for (const evicted of load.evicted) this.#evictions.inc({ model: evicted });
    }
    if (!memory) return;
    const labels = { device: String(device) };
    this.#weightGauges.residentBytes.set(labels, memory.residentBytes);
    this.#weightGauges.logicalBytes.set(labels, memory.logicalBytes);
    this.#weightGauges.budgetBytes.set(labels, memory.budgetBytes);
    this.#sharing.set(labels, memory.residentBytes > 0 ? memory.logicalBytes / memory.residentBytes : 1);
  }

  /** Executions of `model` whose weights were on the device already (a device's report sums them). */
  recordWeightHits(model: string, hits: number): void {
    if (hits === 0) return;
    this.#weightHits.inc({ model }, hits);
    let traffic = this.#weightTraffic.get(model);
    if (!traffic) this.#weightTraffic.set(model, (traffic = { hits: 0, misses: 0, loadSeconds: 0 }));
    traffic.hits += hits;
  }

  /** A model's weight-cache hits and misses so far, and seconds its batches waited for weights, over all devices. */
  weightTraffic(model: string): WeightTraffic {
    return this.#weightTraffic.get(model) ?? { hits: 0, misses: 0, loadSeconds: 0 };
  }

  recordPlacement(placement: Placement): void {
    for (const [device, bytes] of placement.bytes) {
      this.#placedBytes.set({ device: String(device) }, bytes);
      this.#placedLoad.set({ device: String(device) }, placement.load.get(device) ?? 0);
      this.#placedModels.set({ device: String(device) }, [...placement.devices.values()].filter((ids) => ids.includes(device)).length);
    }
  }

  recordCompiles(files: number, cacheHits: number): void {
    if (cacheHits > 0) this.#compiles.inc({ result: 'hit' }, cacheHits);
    if (files > cacheHits) this.#compiles.inc({ result: 'miss' }, files - cacheHits);
  }

}

/**
 * Triton's per-model series: every model that has counted something, and every loaded model at 0
 * before it has (Triton exports each loaded model's series from its load on, so a dashboard's
 * rate() and an alert on absence both work for a model nobody has called yet).
 */
function modelMetrics(sources: MetricsSources, registers: Registry[]): void {
  const { statistics } = sources;
  const model = ['model', 'version'] as const;
  const loaded = () => new Set(sources.loadedModels?.() ?? []);
  const perModel = (name: string, help: string, value: (c: Readonly<ModelCounters>) => number) => new Counter({
    name, help, labelNames: model, registers,
    collect() {
      this.reset();
      const zeros = loaded();
      for (const [m, c] of statistics.models()) {
        this.inc({ model: m, version: MODEL_VERSION }, value(c));
        zeros.delete(m);
      }
      for (const m of zeros) this.inc({ model: m, version: MODEL_VERSION }, 0);
    },
  });
  perModel('nv_inference_request_success', 'Number of successful inference requests, all batch sizes', (c) => c.success.count);
  new Counter({
    name: 'nv_inference_request_failure', help: 'Number of failed inference requests, all batch sizes', labelNames: ['model', 'version', 'reason'], registers,
    collect() {
      this.reset();
      // Each of Triton's reasons, at 0 until it happens, for every loaded model.
      for (const m of loaded()) for (const reason of FAILURE_REASONS) this.inc({ model: m, version: MODEL_VERSION, reason }, 0);
      for (const [m, c] of statistics.models()) for (const [reason, n] of c.failures) this.inc({ model: m, version: MODEL_VERSION, reason }, n);
    },
  });
  perModel('nv_inference_count', 'Number of inferences performed (rows: a batch of 8 counts 8)', (c) => c.inferenceCount);
  perModel('nv_inference_exec_count', 'Number of model executions performed (a coalesced batch counts 1)', (c) => c.executionCount);
  perModel('nv_inference_request_duration_us', 'Cumulative inference request duration in microseconds', (c) => (c.success.ns + c.fail.ns) / 1000);
  requestDurations(statistics, registers);
  perModel('nv_inference_queue_duration_us', 'Cumulative inference queuing duration in microseconds', (c) => c.queue.ns / 1000);
  perModel('nv_inference_compute_input_duration_us', 'Cumulative compute input duration in microseconds', (c) => c.computeInput.ns / 1000);
  perModel('nv_inference_compute_infer_duration_us', 'Cumulative compute inference duration in microseconds', (c) => c.computeInfer.ns / 1000);
  perModel('nv_inference_compute_output_duration_us', 'Cumulative inference compute output duration in microseconds', (c) => c.computeOutput.ns / 1000);
  new Gauge({
    name: 'nv_inference_pending_request_count', help: 'Instantaneous number of pending requests awaiting execution per-model', labelNames: model, registers,
    collect() {
      this.reset();
      for (const m of loaded()) this.set({ model: m, version: MODEL_VERSION }, 0);
      for (const [name, n] of sources.pendingByModel()) this.set({ model: name, version: MODEL_VERSION }, n);
    },
  });
}

/** The GPUs, in Triton's names and units (utilization 0..1, power in watts, energy in joules). */
function gpuMetrics(sources: MetricsSources, registers: Registry[]): void {
  const perGpu = (name: string, help: string, value: (g: GpuInfo) => number) => new Gauge({
    name, help, labelNames: ['gpu_uuid'], registers,
    collect() {
      this.reset();
      for (const g of sources.gpus?.() ?? []) this.set({ gpu_uuid: g.uuid || `cuda:${g.ordinal}` }, value(g));
    },
  });
  perGpu('nv_gpu_utilization', 'GPU utilization rate [0.0 - 1.0)', (g) => g.utilization);
  perGpu('nv_gpu_memory_total_bytes', 'GPU total memory, in bytes', (g) => g.memoryTotalBytes);
  perGpu('nv_gpu_memory_used_bytes', 'GPU used memory, in bytes', (g) => g.memoryUsedBytes);
  perGpu('nv_gpu_power_usage', 'GPU power usage in watts', (g) => g.powerWatts);
  perGpu('nv_gpu_power_limit', 'GPU power management limit in watts', (g) => g.powerLimitWatts);
  perGpu('nv_energy_consumption', 'GPU energy consumption in joules since the driver loaded', (g) => g.energyJoules);
}

/**
 * Signals for autoscalers (KEDA, HPA through an adapter) and per-model memory, read from the
 * devices at each scrape: once per scrape for every gauge (collected in the same turn), not once
 * per gauge.
 */
function instanceMetrics(sources: MetricsSources, registers: Registry[], scrape: Scrape): void {
  let snapshot: Promise<readonly DeviceReport[]> | undefined;
  const devices = async () => {
    if (!sources.devices) return [];
    // A scrape rendered in slices (admin/exposition.ts) spans many turns: one reading for all of it.
    if (scrape.depth > 0) return (scrape.devices ??= sources.devices());
    snapshot ??= sources.devices().finally(() => setImmediate(() => { snapshot = undefined; }));
    return snapshot;
  };
  const instances = async () => (await devices()).flatMap((r) => r.instances.map((s) => ({ ...s, device: r.device })));
  new Gauge({
    name: 'stowage_model_queue_depth', help: 'Requests of the model waiting in the devices\' queues (not yet running), all devices', labelNames: ['model'], registers,
    async collect() {
      this.reset();
      const depth = new Map<string, number>();
      for (const s of await instances()) depth.set(s.model, (depth.get(s.model) ?? 0) + s.queued);
      for (const [m, n] of depth) this.set({ model: m }, n);
    },
  });
  new Gauge({
    name: 'stowage_weight_cache_model_resident_bytes', help: 'Bytes of the model\'s weights on the device now (0 when evicted)', labelNames: ['model', 'device'], registers,
    async collect() {
      this.reset();
      for (const s of await instances()) this.inc({ model: s.model, device: String(s.device) }, s.resident ? s.weightBytes : 0);
    },
  });
  new Gauge({
    name: 'stowage_model_session_device_bytes', help: 'GPU memory the model\'s sessions took at load and warm-up, beyond its weights (backend cuda)', labelNames: ['model', 'device'], registers,
    async collect() {
      this.reset();
      for (const s of await instances()) if (s.sessionDeviceBytes !== null) this.inc({ model: s.model, device: String(s.device) }, s.sessionDeviceBytes);
    },
  });
  sessionMetrics(devices, instances, registers);
}

/**
 * What loaded models pin beside their weights (actors/device/sessions.ts): sessions per device,
 * the models on them, their bytes against the weights', the shared activation arena, and opens and
 * closes by reason; per model, its share of its sessions' bytes.
 */
function sessionMetrics(devices: () => Promise<readonly DeviceReport[]>, instances: () => Promise<(DeviceReport['instances'][number] & { device: number })[]>, registers: Registry[]): void {
  const perDevice = (name: string, help: string, value: (r: DeviceReport) => number) => new Gauge({
    name, help, labelNames: ['device'], registers,
    async collect() {
      this.reset();
      for (const r of await devices()) this.set({ device: String(r.device) }, value(r));
    },
  });
  perDevice('stowage_device_sessions', 'ONNX Runtime sessions open on the device now', (r) => r.sessions.open);
  perDevice('stowage_device_session_graphs', 'Distinct sessions the device\'s loaded models run on, open or closed (one per distinct graph when shared)', (r) => r.sessions.sessions);
  perDevice('stowage_device_models_per_session', 'Model executables per distinct session on the device (loaded models sharing a graph share a session)', (r) => (r.sessions.sessions > 0 ? r.sessions.users / r.sessions.sessions : 0));
  perDevice('stowage_device_session_bytes', 'Bytes the device\'s open sessions hold beside weights and shared activations, measured as each opened', (r) => r.sessions.bytes);
  perDevice('stowage_device_session_budget_bytes', 'runtime.session_budget_bytes: beyond it idle sessions close (0: no budget)', (r) => r.sessions.budgetBytes);
  const counted = <R extends string>(name: string, help: string, reasons: readonly R[], value: (r: DeviceReport, reason: R) => number) => new Counter({
    name, help, labelNames: ['device', 'reason'], registers,
    async collect() {
      this.reset();
      for (const r of await devices()) for (const reason of reasons) this.inc({ device: String(r.device), reason }, value(r, reason));
    },
  });
  counted('stowage_device_session_opens_total', 'Sessions opened: for a load, or again on a call after the budget closed them (reopen)', SESSION_OPEN_REASONS, (r, reason) => r.sessions.opens[reason]);
  counted('stowage_device_session_closes_total', 'Sessions closed: their last model went (unload), beyond the budget (budget), or to make room for an open that ran out of memory (memory)', SESSION_CLOSE_REASONS, (r, reason) => r.sessions.closes[reason]);
  new Counter({
    name: 'stowage_device_session_reopen_seconds_total', help: 'Seconds calls waited for sessions the budget had closed to open again', labelNames: ['device'], registers,
    async collect() {
      this.reset();
      for (const r of await devices()) this.inc({ device: String(r.device) }, r.sessions.reopenMs / 1000);
    },
  });
  new Gauge({
    name: 'stowage_activation_arena_bytes', help: 'Backend cpu with shared activations: the process\'s one ONNX Runtime arena for every session\'s activations (reserved: taken from the system; in_use: handed out now; max_in_use: the most at once)', labelNames: ['kind'], registers,
    async collect() {
      this.reset();
      const a = (await devices()).find((r) => r.sessions.activations)?.sessions.activations;
      if (!a) return;
      this.set({ kind: 'reserved' }, a.reservedBytes);
      this.set({ kind: 'in_use' }, a.inUseBytes);
      this.set({ kind: 'max_in_use' }, a.maxInUseBytes);
    },
  });
  new Gauge({
    name: 'stowage_model_session_bytes', help: 'The model\'s share of its open sessions\' bytes (each session\'s bytes over the models sharing it)', labelNames: ['model', 'device'], registers,
    async collect() {
      this.reset();
      for (const s of await instances()) this.inc({ model: s.model, device: String(s.device) }, s.sessionBytes);
    },
  });
}

/** Per device: its queue, executions, busy time and the rows per execution. */
function deviceMetrics(statistics: Statistics, registers: Registry[]): void {
  new Gauge({
    name: 'stowage_device_queue_depth', help: 'Requests queued on the device after its last execution', labelNames: ['device'], registers,
    collect() {
      for (const [device, d] of statistics.devices()) this.set({ device: String(device) }, d.queued);
    },
  });
  const perDevice = (name: string, help: string, value: (d: Readonly<DeviceCounters>) => number) => new Counter({
    name, help, labelNames: ['device'], registers,
    collect() {
      totals(this, (set) => {
        for (const [device, d] of statistics.devices()) set({ device: String(device) }, value(d));
      });
    },
  });
  perDevice('stowage_device_executions_total', 'Executions run on the device', (d) => d.executions);
  perDevice('stowage_device_busy_seconds_total', 'Seconds the device spent running models (compute, without input and output handling)', (d) => d.busyNs / 1e9);
  const batchRows = new Histogram({
    name: 'stowage_device_batch_rows', help: 'Rows per execution (sum/count is the average batch size)', labelNames: ['device'],
    buckets: [1, 2, 4, 8, 16, 32, 64, 128, 256], registers,
  });
  // A histogram keeps buckets, not a total: it is observed once per execution a report sums (cached per device, so no
  // label hashing).
  const rowsOf = new Map<number, ReturnType<Histogram['labels']>>();
  statistics.onBatchRows = (device, rows, executions) => {
    let child = rowsOf.get(device);
    if (!child) rowsOf.set(device, (child = batchRows.labels({ device: String(device) })));
    for (let i = 0; i < executions; i++) child.observe(rows);
  };
}

/** The process's own: trace exports that failed, and every thread's heap. */
function processMetrics(sources: MetricsSources, registers: Registry[]): void {
  new Counter({
    name: 'stowage_trace_export_failures_total', help: 'Trace exports to the OpenTelemetry collector that failed (the collector down, hung or refusing)', registers,
    collect() {
      this.reset();
      this.inc(sources.traceExportFailures?.() ?? 0);
    },
  });
  new Gauge({
    name: 'stowage_thread_heap_bytes', help: 'V8 heap of each thread (main and every worker): used, and total reserved', labelNames: ['thread', 'kind'], registers,
    // prom-client's defaults see only the main thread's heap; a worker's is asked for across
    // threads, and a thread that is exiting just does not answer.
    async collect() {
      this.reset();
      const main = getHeapStatistics();
      this.set({ thread: 'main', kind: 'used' }, main.used_heap_size);
      this.set({ thread: 'main', kind: 'total' }, main.total_heap_size);
      await Promise.all([...sources.threads()].map(async ([thread, worker]) => {
        const heap = await worker.getHeapStatistics().catch(() => null);
        if (!heap) return;
        this.set({ thread, kind: 'used' }, heap.used_heap_size);
        this.set({ thread, kind: 'total' }, heap.total_heap_size);
      }));
    },
  });
}

/**
 * stowage_request_duration_seconds{model}: successful requests by their whole time, a Prometheus
 * histogram (p50/p99 per model by histogram_quantile), every thread's requests (counted in shared
 * memory, request-counters.ts).
 */
function requestDurations(statistics: Statistics, registers: Registry[]): void {
  countedHistogram('stowage_request_duration_seconds', 'Successful inference requests by their whole time on the server, per model (a histogram)', 'model', () =>
    [...statistics.models()].map(([model, c]) => ({ label: model, buckets: c.durations, count: c.success.count, seconds: c.success.ns / 1e9 })), registers);
}

/**
 * A histogram over DURATION_BUCKETS_MS whose counts are kept elsewhere (in shared memory, by every thread), written
 * as a histogram's series from `read()` at each scrape, labelled `labelName`. prom-client's Histogram observes values
 * one by one, so this is a metric object of its shape, not one of its classes: the registry only reads `get`.
 */
export function countedHistogram(name: string, help: string, labelName: string, read: () => CountedSeries[], registers: Registry[]): void {
  const metric = {
    name, help, type: 'histogram', aggregator: 'sum',
    get: () => {
      const values: { labels: Record<string, string | number>; value: number; metricName: string }[] = [];
      for (const { label, buckets, count, seconds } of read()) {
        let cumulative = 0;
        for (const [i, le] of DURATION_BUCKETS_MS.entries()) {
          cumulative += buckets[i];
          values.push({ labels: { [labelName]: label, le: le / 1000 }, value: cumulative, metricName: `${name}_bucket` });
        }
        values.push({ labels: { [labelName]: label, le: '+Inf' }, value: count, metricName: `${name}_bucket` });
        values.push({ labels: { [labelName]: label }, value: seconds, metricName: `${name}_sum` });
        values.push({ labels: { [labelName]: label }, value: count, metricName: `${name}_count` });
      }
      return { name, help, type: 'histogram', values, aggregator: 'sum' };
    },
    reset: () => {},
  };
  for (const r of registers) r.registerMetric(metric as unknown as Parameters<Registry['registerMetric']>[0]);
}
