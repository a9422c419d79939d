/**
 * Prometheus metrics, served on the admin port at /metrics. One registry, on the main thread:
 * device actors report through their execution messages. Triton's names and labels where a
 * Triton user looks for them (durations as cumulative microsecond counters, as Triton exports
 * them), `stowage_*` for ours, and prom-client's process and Node.js defaults (event-loop lag
 * among them).
 */
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { ExecutionTiming } from './actors/messages.js';
import { MODEL_VERSION } from './constants.js';
import type { ErrorCode } from './errors.js';

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
  /** In-flight inference RPCs (stowage_grpc_inflight_requests). */
  inflightRpcs: () => number;
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
  readonly #shed: Counter;

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
    new Gauge({
      name: 'stowage_grpc_inflight_requests', help: 'Inference RPCs in flight (ModelInfer calls and open streams)', registers,
      collect() {
        this.set(sources.inflightRpcs());
      },
    });
    this.#shed = counter('stowage_grpc_shed_total', 'Inference RPCs refused because endpoints.max_concurrent_requests were in flight', []);
    collectDefaultMetrics({ register: this.registry });
  }

  recordExecution(model: string, device: number, timing: ExecutionTiming, queued: number): void {
    const labels = { model, version: MODEL_VERSION };
    this.#execCount.inc(labels);
    this.#executions.inc({ device: String(device) });
    this.#batchRows.observe({ device: String(device) }, timing.batchRows);
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

  recordShed(): void {
    this.#shed.inc();
  }
}
