/**
 * The standard gRPC health service (grpc.health.v1, with the service definition the grpc-node team
 * ships in grpc-health-check), which Kubernetes' gRPC probes and load balancers speak.
 *
 * Names, as Triton answers them (its Check reports the server's readiness whatever the name) with
 * models added:
 * - a model's name: that model, SERVING while it is READY (NOT_SERVING while it loads, after a
 *   failed load, once unloaded);
 * - any other name — "" (the protocol's whole server), "inference.GRPCInferenceService" (what a
 *   Kubernetes `grpc:` probe configured with the KServe service sends), anything else: the
 *   server, SERVING once it serves, NOT_SERVING while it starts or stops.
 *
 * Check answers through the whole shutdown (the port stays open while requests drain: a probe
 * hears NOT_SERVING, not a refused connection). Watch sends the status now and at each change; at
 * shutdown every Watch stream gets NOT_SERVING and ends, so none holds the process.
 */
import type * as grpc from '@grpc/grpc-js';
import { service as healthDefinition } from 'grpc-health-check';
import type { GrpcEdge } from '../protocol/edge.js';
import { ModelState, type ModelRegistry } from './model-registry.js';

type ServingStatus = 'SERVING' | 'NOT_SERVING';
interface HealthCheckRequest {
  service: string;
}
interface HealthCheckResponse {
  status: ServingStatus;
}

export class Health {
  readonly #registry: ModelRegistry;
  #server: ServingStatus = 'NOT_SERVING';
  readonly #watchers = new Set<{ service: string; call: grpc.ServerWritableStream<HealthCheckRequest, HealthCheckResponse>; last: ServingStatus }>();
  #closed = false;

  constructor(registry: ModelRegistry) {
    this.#registry = registry;
    registry.watch(() => this.#notify());
  }

  /** The status a probe of `service` hears now. */
  status(service: string): ServingStatus {
    const model = service === '' ? undefined : this.#registry.all().find((r) => r.name === service);
    if (model) return model.state === ModelState.READY ? 'SERVING' : 'NOT_SERVING';
    return this.#server;
  }

  /** The server starts serving, or stops (models keep their own status). */
  setServing(serving: boolean): void {
    this.#server = serving ? 'SERVING' : 'NOT_SERVING';
    this.#notify();
  }

  /** Shutdown begins: NOT_SERVING to every watcher, and their streams end. Check still answers. */
  close(): void {
    this.#server = 'NOT_SERVING';
    this.#closed = true;
    for (const w of this.#watchers) {
      w.call.write({ status: 'NOT_SERVING' });
      w.call.end();
    }
    this.#watchers.clear();
  }

  /** Check and Watch on `edge`. */
  register(edge: GrpcEdge): void {
    edge.addService(healthDefinition as unknown as grpc.ServiceDefinition, {
      Check: edge.unary('Check', (req: HealthCheckRequest) => ({ status: this.status(req.service ?? '') })),
      Watch: (call: grpc.ServerWritableStream<HealthCheckRequest, HealthCheckResponse>) => {
        const service = call.request?.service ?? '';
        const status = this.status(service);
        call.write({ status });
        if (this.#closed) {
          call.end();
          return;
        }
        const watcher = { service, call, last: status };
        this.#watchers.add(watcher);
        call.on('cancelled', () => this.#watchers.delete(watcher));
      },
    });
  }

  #notify(): void {
    for (const w of this.#watchers) {
      const now = this.status(w.service);
      if (now === w.last) continue;
      w.last = now;
      w.call.write({ status: now });
    }
  }
}
