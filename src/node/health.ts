/**
 * What a gRPC health probe of a name hears (grpc.health.v1; the wire is protocol/health-service.ts,
 * on every gRPC edge). Names, as Triton answers them (its Check reports the server's readiness
 * whatever the name) with models added:
 * - a model's name: that model, SERVING while it is READY (NOT_SERVING while it loads, after a
 *   failed load, once unloaded);
 * - any other name — "" (the protocol's whole server), "inference.GRPCInferenceService" (what a
 *   Kubernetes `grpc:` probe configured with the KServe service sends), anything else: the
 *   server, SERVING once it serves, NOT_SERVING while it starts or stops.
 */
import type { HealthSource } from '../protocol/health-service.js';
import type { ServingStatus } from '../shared/operations.js';
import { ModelState, type ModelRegistry } from './model-registry.js';

export class Health implements HealthSource {
  readonly #registry: ModelRegistry;
  #server: ServingStatus = 'NOT_SERVING';
  readonly #listeners: (() => void)[] = [];

  constructor(registry: ModelRegistry) {
    this.#registry = registry;
    registry.watch(() => this.#changed());
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
    this.#changed();
  }

  watch(listener: () => void): void {
    this.#listeners.push(listener);
  }

  #changed(): void {
    for (const listener of this.#listeners) listener();
  }
}
