/**
 * Prometheus metrics, served on the admin port at /metrics. One registry, on the main thread:
 * device actors report through their execution messages. Triton's names and labels where a
 * Triton user looks for them (durations as cumulative microsecond counters, as Triton exports
 * them), `stowage_*` for ours, and prom-client's process and Node.js defaults (event-loop lag
 * among them).
 */
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { ExecutionTiming, WeightLoad, WeightMemory } from '../shared/channels/device.js';
import type { Placement } from '../actors/gateway/placement.js';
import { MODEL_VERSION } from '../shared/constants.js';
import type { ErrorCode } from '../shared/errors.js';

/** Triton's failure reasons. */
export function failureReason(code: ErrorCode | undefined): 'REJECTED' | 'CANCELED' | 'BACKEND' | 'OTHER' {
  switch (code) {
    case 'STOWAGE_QUEUE_FULL':
    case 'STOWAGE_SERVER_BUSY':
    case 'STOWAGE_DEADLINE_EXCEEDED':
      return 'REJECTED';
    case 'STOWAGE_CANCELLED':
      return 'CANCELED';
    case 'STOWAGE_EXECUTION_FAILED':
      return 'BACKEND';
    default:
      return 'OTHER';
  }
}

export interface MetricsSources {
  /** In-flight requests per model (nv_inference_pending_request_count). */
  pendingByModel: () => Map<string, number>;
  /** Host RAM held for weights by the process (stowage_weight_cache_host_bytes). */
  hostWeightBytes: () => number;
}

export class Metrics {
  readonly registry = new Registry();
  readonly #success: Counter;
  readonly #failure: Counter;
  readonly #count: Counter;
  readonly #execCount: Counter;
  readonly #requestUs: Counter;
  readonly #queueUs: Counter;
  readonly #inputUs: Counter;
  readonly #inferUs: Counter;
  readonly #outputUs: Counter;
  readonly #loadSecs: Gauge;
  readonly #queueDepth: Gauge;
  readonly #executions: Counter;
  readonly #batchRows: Histogram;
  readonly #weightGauges: Record<'residentBytes' | 'logicalBytes' | 'budgetBytes', Gauge>;
  readonly #sharing: Gauge;
  readonly #weightHits: Counter;
  readonly #weightMisses: Counter;
  readonly #evictions: Counter;
  readonly #weightLoadBytes: Counter;
  readonly #weightLoadSecs: Counter;
  readonly #compiles: Counter;
  readonly #routed: Counter;
  readonly #placedModels: Gauge;
  readonly #placedBytes: Gauge;
  readonly #placedLoad: Gauge;
  readonly #busy: Counter;

  constructor(sources: MetricsSources) {
    const registers = [this.registry];
    const model = ['model', 'version'] as const;
    const counter = (name: string, help: string, labelNames: readonly string[] = model) => new Counter({ name, help, labelNames, registers });
    this.#success = counter('nv_inference_request_success', 'Number of successful inference requests, all batch sizes');
    this.#failure = counter('nv_inference_request_failure', 'Number of failed inference requests, all batch sizes', ['model', 'version', 'reason']);
    this.#count = counter('nv_inference_count', 'Number of inferences performed (rows: a batch of 8 counts 8)');
    this.#execCount = counter('nv_inference_exec_count', 'Number of model executions performed (a coalesced batch counts 1)');
    this.#requestUs = counter('nv_inference_request_duration_us', 'Cumulative inference request duration in microseconds');
    this.#queueUs = counter('nv_inference_queue_duration_us', 'Cumulative inference queuing duration in microseconds');
    this.#inputUs = counter('nv_inference_compute_input_duration_us', 'Cumulative compute input duration in microseconds');
    this.#inferUs = counter('nv_inference_compute_infer_duration_us', 'Cumulative compute inference duration in microseconds');
    this.#outputUs = counter('nv_inference_compute_output_duration_us', 'Cumulative inference compute output duration in microseconds');
    new Gauge({
      name: 'nv_inference_pending_request_count', help: 'Instantaneous number of pending requests awaiting execution per-model', labelNames: model, registers,
      collect() {
        this.reset();
        for (const [name, n] of sources.pendingByModel()) this.set({ model: name, version: MODEL_VERSION }, n);
      },
    });
    this.#loadSecs = new Gauge({ name: 'nv_model_load_duration_secs', help: 'Model load time in seconds', labelNames: model, registers });
    this.#queueDepth = new Gauge({ name: 'stowage_device_queue_depth', help: 'Requests queued on the device after its last execution', labelNames: ['device'], registers });
    this.#executions = counter('stowage_device_executions_total', 'Executions run on the device', ['device']);
    this.#batchRows = new Histogram({
      name: 'stowage_device_batch_rows', help: 'Rows per execution (sum/count is the average batch size)', labelNames: ['device'],
      buckets: [1, 2, 4, 8, 16, 32, 64, 128, 256], registers,
    });
    const device = ['device'] as const;
    const gauge = (name: string, help: string) => new Gauge({ name, help, labelNames: device, registers });
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
    this.#weightLoadSecs = counter('stowage_weight_cache_load_seconds_total', 'Seconds spent bringing the model\'s weights onto a device', ['model']);
    this.#routed = counter('stowage_gateway_routed_total', 'Requests the gateway sent to each device, per model', ['model', 'device']);
    this.#placedModels = gauge('stowage_gateway_placed_models', 'Models placed on the device by lpt_packing');
    this.#placedBytes = gauge('stowage_gateway_placed_bytes', 'Weight bytes of the models placed on the device by lpt_packing');
    this.#placedLoad = gauge('stowage_gateway_placed_load_seconds', 'Device-seconds of work measured, in the last packing window, for the models lpt_packing placed on the device');
    this.#busy = counter('stowage_device_busy_seconds_total', 'Seconds the device spent running models (compute, without input and output handling)', ['device']);
    this.#compiles = counter('stowage_compile_cache_lookups_total', 'ONNX files opened, by whether cache_dir had them compiled already', ['result']);
    collectDefaultMetrics({ register: this.registry });
  }

  recordExecution(model: string, device: number, timing: ExecutionTiming, queued: number): void {
    const labels = { model, version: MODEL_VERSION };
    this.#execCount.inc(labels);
    this.#executions.inc({ device: String(device) });
    this.#batchRows.observe({ device: String(device) }, timing.batchRows);
    this.#busy.inc({ device: String(device) }, timing.computeInferNs / 1e9);
    this.#queueDepth.set({ device: String(device) }, queued);
  }

  recordSuccess(model: string, rows: number, totalNs: number, queueNs: number, timing: ExecutionTiming): void {
    const labels = { model, version: MODEL_VERSION };
    this.#success.inc(labels);
    this.#count.inc(labels, Math.max(rows, 1));
    this.#requestUs.inc(labels, totalNs / 1000);
    this.#queueUs.inc(labels, queueNs / 1000);
    this.#inputUs.inc(labels, timing.computeInputNs / 1000);
    this.#inferUs.inc(labels, timing.computeInferNs / 1000);
    this.#outputUs.inc(labels, timing.computeOutputNs / 1000);
  }

  recordFailure(model: string, code: ErrorCode | undefined, totalNs: number): void {
    this.#failure.inc({ model, version: MODEL_VERSION, reason: failureReason(code) });
    this.#requestUs.inc({ model, version: MODEL_VERSION }, totalNs / 1000);
  }

  recordLoad(model: string, seconds: number): void {
    this.#loadSecs.set({ model, version: MODEL_VERSION }, seconds);
  }

  /** A device's weight traffic: one model's load (or hit), and the memory after it. */
  recordWeights(device: number, model: string, load: WeightLoad | null, memory: WeightMemory | null): void {
    if (load) {
      (load.hit ? this.#weightHits : this.#weightMisses).inc({ model });
      if (!load.hit) {
        this.#weightLoadBytes.inc({ model, source: 'host' }, load.loadedBytes - load.diskBytes);
        this.#weightLoadBytes.inc({ model, source: 'disk' }, load.diskBytes);
        this.#weightLoadSecs.inc({ model }, load.loadMs / 1000);
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

  recordRoute(model: string, device: number): void {
    this.#routed.inc({ model, device: String(device) });
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
