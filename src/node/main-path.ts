/**
 * The request path's rooms on the main thread (shared/request-path.ts has the path itself, the
 * same on every thread, and the table of its copies and hops): leases from the model registry,
 * devices through the device pool (node/devices.ts), hooks on the main thread's hook pool,
 * shared-memory regions from this thread's registry, spans from shared/tracing.ts, and each request
 * counted in the request counters' row of the main thread (shared/request-counters.ts), as an
 * edge counts in its own. The main thread runs the path for every request when it is the only
 * edge, and with edge threads for what an edge sends it: a model the edge has no route for (not
 * ready, unknown, another version: the registry words why), a region the edge has not heard of,
 * and a meta model's sub-call to a model without a route on its edge.
 */
import type { Devices } from './devices.js';
import type { HookPool } from '../actors/hooks/handle.js';
import type { DataPlaneRequest, InferenceAnswer, InferOptions } from '../shared/data-plane.js';
import type { ModelLease, ModelRegistry } from './model-registry.js';
import type { SharedMemoryRegistry } from './shared-memory.js';
import type { RequestCounters } from '../shared/request-counters.js';
import type { Quotas } from '../shared/quotas.js';
import { DeadlineAdmission, type Levels } from '../shared/deadline-admission.js';
import { failureReason } from '../shared/failure-reason.js';
import { RequestTrace, tracingOn } from '../shared/tracing.js';
import { RequestPath } from '../shared/request-path.js';

export interface MainPathContext {
  registry: ModelRegistry;
  hooks: HookPool;
  /** Which device serves a request (a pass-through with one device). */
  devices: Devices;
  /** Where this thread counts its requests: its row (RequestCounters.create), per lease slot. */
  counters: RequestCounters;
  sharedMemory: SharedMemoryRegistry;
  /** The node's quotas, the main thread's row. */
  quotas: Quotas;
  /** How the scheduler resolves a request's priority level (scheduler.default_priority, each model's priority). */
  levels: Levels;
}

export class MainPath {
  readonly #path: RequestPath<ModelLease>;

  constructor({ registry, hooks, devices, counters, sharedMemory, quotas, levels }: MainPathContext) {
    this.#path = new RequestPath<ModelLease>({
      acquire: (model, version) => registry.acquire(model, version),
      release: (lease) => registry.release(lease),
      infer: (_lease, request, signal, feedFromHook) => devices.infer(request, signal, feedFromHook),
      adoptDoor: (target, port) => devices.device(target.deviceId).adoptDoor(port, target.generation),
      hooks,
      regions: sharedMemory,
      quotas,
      aheadMs: (lease, level) => devices.aheadMs(lease.instance, level),
      deadlines: new DeadlineAdmission(levels),
      succeeded: (lease, batchSize, durationNs, queueNs, timing) => counters.succeeded(lease.slot, batchSize, durationNs, queueNs, timing),
      failed: (lease, code, durationNs) => counters.failed(lease.slot, failureReason(code), durationNs),
      // Tracing starts before the request path is made (node/server.ts), and is off for good once stopped.
      trace: tracingOn() ? (request, carrier, protocol, admitted) => RequestTrace.request(request, carrier, protocol, admitted) : () => null,
    });
  }

  /**
   * One inference request from an edge (shared/request-path.ts `RequestPath.infer`): the registry leases every model it
   * knows, or says why not.
   */
  infer(req: DataPlaneRequest, options: InferOptions): Promise<InferenceAnswer> {
    const answer = this.#path.infer(req, options);
    if (!answer) throw new Error('unreachable: the registry leases a model or throws why not');
    return answer;
  }
}
