/**
 * The standard gRPC health service (grpc.health.v1, with the service definition the grpc-node team
 * ships in grpc-health-check), which Kubernetes' gRPC probes and load balancers speak, on one
 * gRPC edge. What a name's status is belongs to the node (node/health.ts, on the main thread);
 * this is its wire: Check answers it, Watch sends it now and at each change.
 *
 * Check answers through the whole shutdown (the port stays open while requests drain: a probe
 * hears NOT_SERVING, not a refused connection). At shutdown (`close`) every Watch stream gets
 * NOT_SERVING and ends, so none holds the process.
 */
import type * as grpc from '@grpc/grpc-js';
import { service as healthDefinition } from 'grpc-health-check';
import type { GrpcEdge } from './edge.js';
import type { ServingStatus } from '../shared/operations.js';

interface HealthCheckRequest {
  service: string;
}
interface HealthCheckResponse {
  status: ServingStatus;
}

/** Where statuses come from: the node itself, or the main thread seen from an edge thread. */
export interface HealthSource {
  status(service: string): ServingStatus | Promise<ServingStatus>;
  /** `listener` is called whenever a status may have changed. */
  watch(listener: () => void): void;
}

export class HealthService {
  readonly #source: HealthSource;
  readonly #watchers = new Set<{ service: string; call: grpc.ServerWritableStream<HealthCheckRequest, HealthCheckResponse>; last: ServingStatus }>();
  #closed = false;

  constructor(source: HealthSource) {
    this.#source = source;
    source.watch(() => void this.#notify());
  }

  /** Check and Watch on `edge`. */
  register(edge: GrpcEdge): void {
    edge.addService(healthDefinition as unknown as grpc.ServiceDefinition, {
      Check: edge.unary('Check', async (req: HealthCheckRequest) => ({ status: await this.#source.status(req.service ?? '') })),
      Watch: (call: grpc.ServerWritableStream<HealthCheckRequest, HealthCheckResponse>) => void this.#watch(call),
    });
  }

  /** Shutdown begins: NOT_SERVING to every watcher, and their streams end. Check still answers. */
  close(): void {
    this.#closed = true;
    for (const w of this.#watchers) {
      w.call.write({ status: 'NOT_SERVING' });
      w.call.end();
    }
    this.#watchers.clear();
  }

  async #watch(call: grpc.ServerWritableStream<HealthCheckRequest, HealthCheckResponse>): Promise<void> {
    const service = call.request?.service ?? '';
    const status = this.#closed ? 'NOT_SERVING' : await Promise.resolve(this.#source.status(service)).catch(() => 'NOT_SERVING' as const);
    call.write({ status });
    if (this.#closed) {
      call.end();
      return;
    }
    const watcher = { service, call, last: status };
    this.#watchers.add(watcher);
    call.on('cancelled', () => this.#watchers.delete(watcher));
  }

  async #notify(): Promise<void> {
    for (const w of this.#watchers) {
      const now = await Promise.resolve(this.#source.status(w.service)).catch(() => 'NOT_SERVING' as const);
      if (now === w.last || !this.#watchers.has(w)) continue;
      w.last = now;
      w.call.write({ status: now });
    }
  }
}
