/**
 * Trace context and spans, with OpenTelemetry's own JavaScript SDK, configured by the standard
 * `OTEL_*` environment variables (`OTEL_TRACES_EXPORTER=otlp` turns it on;
 * `OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_PROTOCOL` http/protobuf or http/json,
 * `OTEL_TRACES_SAMPLER`, `OTEL_SERVICE_NAME`, ...). Off by default: then nothing here runs beyond
 * one boolean test per request.
 *
 * A request (gRPC or REST) whose W3C `traceparent` names a trace gets a span in it, `infer <model>`,
 * with children: queue wait, hooks, a meta model's sub-calls. Each execution on a device is one
 * span, `execute <model>` (with a `weight load` child on a cold call), linked to every sampled
 * request it carried, since a coalesced batch serves several traces at once; a request whose
 * traceparent says not sampled (`-00`) is traced no further and linked from nothing. Device threads
 * keep no tracer: they report their timings (queue, compute, weight load) and the thread that runs
 * the request's path (shared/request-path.ts: an edge thread, or the main thread) places the
 * spans. Each such thread runs the SDK (the edge threads start it when the main thread has, from
 * the same OTEL_* environment) and exports to the one collector; a request's spans are all made on
 * its thread, so it is one trace, and a meta model's sub-call the main thread runs for an edge is
 * a child of the edge's sub-call span (`carrier`). An execution whose requests came from several
 * edges has an `execute` span on each, each linked to that edge's requests.
 *
 * The request span carries what Triton's traces carry, under Triton's names where a Triton user
 * would look for them (docs/protocol.md maps Triton's spans to these): `triton.model_name`,
 * `triton.model_version`, `triton.request_id`, and Triton's timestamps as events (QUEUE_START,
 * COMPUTE_START, COMPUTE_INPUT_END, COMPUTE_OUTPUT_START, COMPUTE_END), with the batch size and the
 * queue / compute input / infer / output durations as `stowage.*` attributes.
 *
 * The exporter is the collector's business, never the server's: an export that fails is logged
 * (once a minute at most, with how many failed since) and counted
 * (`stowage_trace_export_failures_total`), and stopping waits for the last spans at most
 * TRACE_FLUSH_MS, whatever the collector does, and never fails the shutdown.
 */
import { context, diag, DiagLogLevel, propagation, SpanKind, SpanStatusCode, trace, ROOT_CONTEXT, type Context, type Link, type Span } from '@opentelemetry/api';
import type { Logger } from 'pino';
import type { ExecutionTiming } from './channels/inference.js';
import type { TraceCarrier } from './data-plane.js';

let enabled = false;
let shutdown: (() => Promise<void>) | null = null;

/** How long stopping waits for the last spans to reach the collector. */
export const TRACE_FLUSH_MS = 2000;
/** Failed exports are logged at most once in this many ms. */
const EXPORT_FAILURE_LOG_MS = 60_000;

/** Exports that failed since start on this thread. */
let exportFailures = 0;
/** Every thread's failures, in shared memory (a slot per thread: 0 the main thread, e + 1 edge e), once shared. */
let sharedFailures: { counts: Int32Array; slot: number } | null = null;

/**
 * Exports that failed since start, every thread's that counts in shared memory (stowage_trace_export_failures_total
 * reads it).
 */
export function traceExportFailures(): number {
  if (!sharedFailures) return exportFailures;
  let sum = 0;
  for (let i = 0; i < sharedFailures.counts.length; i++) sum += Atomics.load(sharedFailures.counts, i);
  return sum;
}

/** Memory where `threads` threads count their failed exports together. */
export function exportFailureMemory(threads: number): SharedArrayBuffer {
  return new SharedArrayBuffer(threads * Int32Array.BYTES_PER_ELEMENT);
}

/** Count this thread's failed exports in `memory`'s `slot` from now on (those before included). */
export function countExportFailuresIn(memory: SharedArrayBuffer, slot: number): void {
  const counts = new Int32Array(memory);
  Atomics.add(counts, slot, exportFailures);
  sharedFailures = { counts, slot };
}

/** The node file's global.tracing: what the OTEL_* environment leaves unset. */
export interface TracingConfig {
  exporter: 'none' | 'otlp';
  endpoint: string;
  protocol: 'http/protobuf' | 'http/json';
  sample_ratio: number;
}

/**
 * Start the SDK when the environment (or the node file) asks for it; idempotent. The node file's
 * settings become the OTEL_* variables the environment does not set, since the SDK reads those.
 */
export async function startTracing(logger: Logger, config?: TracingConfig, env: NodeJS.ProcessEnv = process.env): Promise<void> {
  if (config && config.exporter !== 'none') {
    env.OTEL_TRACES_EXPORTER ??= config.exporter;
    if (config.endpoint) env.OTEL_EXPORTER_OTLP_ENDPOINT ??= config.endpoint;
    env.OTEL_EXPORTER_OTLP_PROTOCOL ??= config.protocol;
    if (config.sample_ratio < 1) {
      env.OTEL_TRACES_SAMPLER ??= 'parentbased_traceidratio';
      env.OTEL_TRACES_SAMPLER_ARG ??= String(config.sample_ratio);
    }
  }
  // The SDK would start metrics and logs exporters too: only traces are Stowage's to export.
  env.OTEL_METRICS_EXPORTER ??= 'none';
  env.OTEL_LOGS_EXPORTER ??= 'none';
  const exporter = env.OTEL_TRACES_EXPORTER;
  if (enabled || !exporter || exporter === 'none') return;
  const { NodeSDK } = await import('@opentelemetry/sdk-node');
  // The service's name by the standard resolution (OTEL_SERVICE_NAME, else service.name in
  // OTEL_RESOURCE_ATTRIBUTES); "stowage" only when neither names it.
  if (!env.OTEL_SERVICE_NAME && !/(^|,)\s*service\.name\s*=/.test(env.OTEL_RESOURCE_ATTRIBUTES ?? '')) env.OTEL_SERVICE_NAME = 'stowage';
  watchExports(logger);
  // No automatic instrumentation: the spans are the ones this file makes. The SDK reads the
  // exporter, endpoint, protocol, sampler, propagators (W3C trace context by default) and
  // resource from the OTEL_* variables itself.
  const sdk = new NodeSDK({ instrumentations: [] });
  sdk.start();
  enabled = true;
  shutdown = () => sdk.shutdown();
  logger.info({ exporter, endpoint: env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT ?? env.OTEL_EXPORTER_OTLP_ENDPOINT ?? 'the SDK\'s default', protocol: env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ?? env.OTEL_EXPORTER_OTLP_PROTOCOL ?? 'the SDK\'s default' }, 'tracing on (OpenTelemetry)');
}

/**
 * OpenTelemetry reports a failed export through its diagnostic logger (the span processor's
 * global error handler): those are logged here, rate-limited, and counted.
 */
function watchExports(logger: Logger): void {
  let lastLogged = 0;
  let unlogged = 0;
  const failed = (message: string, args: unknown[]) => {
    exportFailures++;
    if (sharedFailures) Atomics.add(sharedFailures.counts, sharedFailures.slot, 1);
    unlogged++;
    const now = Date.now();
    if (now - lastLogged < EXPORT_FAILURE_LOG_MS) return;
    lastLogged = now;
    const detail = args.map((a) => (a instanceof Error ? a.message : typeof a === 'string' ? a : JSON.stringify(a) ?? String(a))).join(' ');
    logger.warn({ failures: unlogged, total: exportFailures, endpoint: process.env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT ?? process.env.OTEL_EXPORTER_OTLP_ENDPOINT }, `trace export failed (${unlogged} since the last report): ${message} ${detail}`.trim());
    unlogged = 0;
  };
  diag.setLogger({
    error: (message, ...args) => failed(message, args),
    warn: (message, ...args) => logger.debug({ otel: args }, `OpenTelemetry: ${message}`),
    info: () => undefined,
    debug: () => undefined,
    verbose: () => undefined,
  }, { logLevel: DiagLogLevel.WARN, suppressOverrideMessage: true });
}

/** Whether spans are made on this thread (an exporter is set). */
export function tracingOn(): boolean {
  return enabled;
}

/**
 * Flush and stop: spans ended before this are exported if the collector takes them within
 * TRACE_FLUSH_MS. A collector down or hung delays the shutdown no longer, and fails nothing.
 */
export async function stopTracing(logger?: Logger): Promise<void> {
  const stop = shutdown;
  shutdown = null;
  enabled = false;
  if (!stop) return;
  let timer: NodeJS.Timeout | undefined;
  const waited = new Promise<'timeout'>((resolve) => {
    timer = setTimeout(() => resolve('timeout'), TRACE_FLUSH_MS);
  });
  try {
    const outcome = await Promise.race([stop().then(() => 'flushed' as const), waited]);
    if (outcome === 'timeout') logger?.warn({ waitedMs: TRACE_FLUSH_MS }, 'tracing: the collector did not take the last spans in time; stopping without them');
  } catch (err) {
    logger?.warn({ err }, `tracing: the last spans were not exported: ${(err as Error).message}`);
  } finally {
    clearTimeout(timer);
  }
}


const tracer = () => trace.getTracer('stowage');

/** One execution's span, shared by the requests that rode in it: ended once every one has linked itself. */
const executions = new WeakMap<ExecutionTiming, { span: Span; links: Link[] }>();

/** The spans of one request (or of a meta model's sub-call): made only when tracing is on. */
export class RequestTrace {
  readonly span: Span;
  readonly #ctx: Context;

  private constructor(span: Span, parent: Context) {
    this.span = span;
    this.#ctx = trace.setSpan(parent, span);
  }

  /**
   * A request from an edge: a span in the trace its traceparent names (a new trace without one);
   * null when tracing is off. `request`: the model's name and version and the request's id.
   */
  static request(request: { model: string; version: string; id: string }, carrier: TraceCarrier | undefined, protocol: 'grpc' | 'http', admitted?: { bytes: number; inflightBytes: number }): RequestTrace | null {
    if (!enabled) return null;
    const { model } = request;
    const parent = carrier?.traceparent ? propagation.extract(ROOT_CONTEXT, carrier) : ROOT_CONTEXT;
    const span = tracer().startSpan(`infer ${model}`, {
      kind: SpanKind.SERVER,
      attributes: {
        'stowage.model': model, 'rpc.system': protocol === 'grpc' ? 'grpc' : 'http',
        'triton.model_name': model, 'triton.model_version': request.version,
        ...(request.id ? { 'triton.request_id': request.id } : {}),
      },
    }, parent);
    // Admission at the edge, before this span began: what it weighed (max_inflight_bytes).
    if (admitted) span.addEvent('admitted', { 'stowage.request_bytes': admitted.bytes, 'stowage.inflight_bytes': admitted.inflightBytes });
    return new RequestTrace(span, parent);
  }

  /** This span's context as a W3C traceparent, for work another thread does as its child. */
  carrier(): TraceCarrier {
    const carrier: TraceCarrier = {};
    propagation.inject(this.#ctx, carrier);
    return carrier;
  }

  /** A meta model's sub-call, a child of this request. */
  subCall(model: string): RequestTrace {
    const span = tracer().startSpan(`sub-call ${model}`, { kind: SpanKind.INTERNAL, attributes: { 'stowage.model': model } }, this.#ctx);
    return new RequestTrace(span, this.#ctx);
  }

  /** A child span over a known interval (ms since the epoch, as nowMs() gives). */
  interval(name: string, startMs: number, endMs: number, attributes: Record<string, string | number> = {}): void {
    tracer().startSpan(name, { startTime: startMs, attributes }, this.#ctx).end(endMs);
  }

  /** A child span around `work` (a hook call). */
  async around<T>(name: string, work: () => Promise<T>): Promise<T> {
    const span = tracer().startSpan(name, {}, this.#ctx);
    try {
      return await work();
    } catch (err) {
      span.recordException(err as Error);
      span.setStatus({ code: SpanStatusCode.ERROR, message: (err as Error).message });
      throw err;
    } finally {
      span.end();
    }
  }

  /**
   * The request's time on the device: its queue wait (from the hand-over to the execution's
   * start), and the execution it rode in, one span per execution linked to each request (and a
   * weight load inside it on a cold call).
   */
  device(model: string, handedOverMs: number, queueNs: number, timing: ExecutionTiming): void {
    // A request its caller did not sample is traced no further: nothing links to it.
    if (!this.span.isRecording()) return;
    const startMs = handedOverMs + queueNs / 1e6;
    this.interval('queue', handedOverMs, startMs);
    // Triton's timestamps of a request, and its figures, on the request's span.
    const inputEndMs = startMs + timing.computeInputNs / 1e6;
    const outputStartMs = inputEndMs + timing.computeInferNs / 1e6;
    const computeEndMs = outputStartMs + timing.computeOutputNs / 1e6;
    this.span.addEvent('QUEUE_START', handedOverMs);
    this.span.addEvent('COMPUTE_START', startMs);
    this.span.addEvent('COMPUTE_INPUT_END', inputEndMs);
    this.span.addEvent('COMPUTE_OUTPUT_START', outputStartMs);
    this.span.addEvent('COMPUTE_END', computeEndMs);
    this.span.setAttributes({
      'stowage.batch_size': timing.executedBatchSize, 'stowage.batch_rows': timing.batchRows,
      'stowage.queue_ns': queueNs, 'stowage.compute_input_ns': timing.computeInputNs,
      'stowage.compute_infer_ns': timing.computeInferNs, 'stowage.compute_output_ns': timing.computeOutputNs,
    });
    let execution = executions.get(timing);
    if (!execution) {
      const endMs = startMs + (timing.computeInputNs + timing.computeInferNs + timing.computeOutputNs) / 1e6;
      // Its own trace root, linked to the requests: a batch serves several traces at once.
      const span = tracer().startSpan(`execute ${model}`, {
        kind: SpanKind.INTERNAL, root: true, startTime: startMs,
        attributes: { 'stowage.model': model, 'stowage.batch_rows': timing.batchRows, 'stowage.executed_batch_size': timing.executedBatchSize, 'stowage.requests': timing.requests },
      });
      // The session's open comes first, then the weights' copy.
      const openMs = timing.sessionOpenMs ?? 0;
      if (openMs > 0) {
        tracer().startSpan('session open', { startTime: startMs, attributes: { 'stowage.model': model } }, trace.setSpan(context.active(), span)).end(startMs + openMs);
      }
      if (timing.weightLoadMs !== undefined) {
        tracer().startSpan('weight load', { startTime: startMs + openMs, attributes: { 'stowage.model': model } }, trace.setSpan(context.active(), span)).end(startMs + openMs + timing.weightLoadMs);
      }
      execution = { span, links: [] };
      executions.set(timing, execution);
      const ending = execution;
      // Every request of the batch resolves in the same turn: end once they have all linked.
      setImmediate(() => ending.span.end(endMs));
    }
    execution.span.addLink({ context: this.span.spanContext() });
    this.span.addLink({ context: execution.span.spanContext(), attributes: { 'stowage.link': 'execution' } });
  }

  /** End the request's span, with its error if it failed. */
  end(err?: unknown): void {
    if (err) {
      this.span.recordException(err as Error);
      this.span.setStatus({ code: SpanStatusCode.ERROR, message: (err as Error).message });
    }
    this.span.end();
  }
}
