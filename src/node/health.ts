/**
 * The standard gRPC health service (grpc.health.v1, the grpc-node team's grpc-health-check), which
 * Kubernetes' gRPC probes and load balancers speak: the service "" is the server (SERVING once it
 * serves, NOT_SERVING while it starts or stops), and each model is a service of its own name,
 * SERVING while it is READY (NOT_SERVING while it loads, after a failed load, once unloaded). An
 * unknown name answers NOT_FOUND, as the protocol says.
 */
import { HealthImplementation } from 'grpc-health-check';
import { ModelState, type ModelRegistry } from './model-registry.js';

export function healthService(registry: ModelRegistry): HealthImplementation {
  const health = new HealthImplementation({ '': 'NOT_SERVING' });
  registry.watch((name, state) => health.setStatus(name, state === ModelState.READY ? 'SERVING' : 'NOT_SERVING'));
  return health;
}
