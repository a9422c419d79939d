/**
 * The request path on an edge thread: the one path (shared/request-path.ts), standing on this
 * edge's own rooms, so that a request off the wire reaches the device, and its answer the wire,
 * without the main thread. The main thread only reads what the edge counted, and hears the
 * device's executions summed (actors/device/execution-tally.ts).
 *
 *   [edge: decode] -> lease (shared memory, on the route the main thread sent) -> check -> route
 *     -> [preprocess, on this edge's hook thread, which feeds the device through its own door]
 *     -> [device, through this edge's door] -> [postprocess, on this edge's hook thread] -> count -> [edge: encode]
 *
 * The rooms:
 * - Leases: each ready model's route, sent by the main thread when it changes (its spec, the
 *   instance serving it, its lease slot in shared memory: shared/leases.ts makes an unload wait
 *   for the requests an edge holds).
 * - Devices: this edge's doors to them (actors/device/door.ts). `round_robin` or `least_outstanding`
 *   over the doors, as this edge sees them; under `lpt_packing` the model's replicas (the route's
 *   placement), filled as the main thread fills them (routing/routing.ts `fill`), each edge
 *   filling its share of a batch.
 * - Hooks: a hook pool of this edge's own (Piscina threads of this thread: actors/hooks/), started
 *   at its first hooked or meta request, of `hooks.threads` shared among the edges. A preprocess
 *   hook's tensors go from its thread to the device through a door that thread makes, handed to
 *   the device through this edge's door; a meta model's sub-calls come back to this thread and
 *   take this path again.
 * - Counts: each request's in shared memory per lease slot (shared/request-counters.ts), before
 *   its answer goes and before its lease is given back.
 *
 * - Regions: the shared-memory regions the main thread sent, each request's held in shared memory
 *   until it is answered (edge-regions.ts).
 *
 * What it does not take (`infer` answers null, and the edge sends the request to the main thread
 * as it is): a model without a route here (not ready, unknown, being reloaded), another version,
 * a model no device this edge has a door to holds, a lease slot being drained, and a request
 * naming a region this edge has not heard of (registered a moment ago through another edge, or
 * unknown: the main thread's registry words why). A meta model's sub-call to a model without a
 * route here goes to the main thread likewise (`elsewhere`), its spans children of the edge's.
 * With tracing on, this edge makes its requests' spans itself (shared/tracing.ts).
 */
import type { MessagePort } from 'node:worker_threads';
import type { RoomsStart, EdgePlacement, EdgeRegion, EdgeRoute } from '../../shared/channels/edge.js';
import { fill, Router, type FillState } from '../../routing/routing.js';
import type { InferenceRequest, InferenceResult, WireTensor } from '../../shared/channels/inference.js';
import type { HookFeedTarget } from '../../shared/channels/device.js';
import { MODEL_VERSION } from '../../shared/constants.js';
import type { DataPlaneRequest, Infer, InferenceAnswer, InferOptions } from '../../shared/data-plane.js';
import { failureReason } from '../../shared/failure-reason.js';
import { RequestCounters } from '../../shared/request-counters.js';
import { Leases } from '../../shared/leases.js';
import { Quotas } from '../../shared/quotas.js';
import { Backlog } from '../../shared/backlog.js';
import { DeadlineAdmission } from '../../shared/deadline-admission.js';
import type { InstanceKey, ModelSpec } from '../../shared/model-spec.js';
import { RequestPath, type PathRooms } from '../../shared/request-path.js';
import { RequestTrace } from '../../shared/tracing.js';
import { HookPool } from '../hooks/handle.js';
import { DeviceDoor } from '../device/door.js';
import { EdgeRegions } from './edge-regions.js';

/** A model taken on this edge for one request: its route's spec, instance and slot, and the door it goes through. */
interface EdgeLease {
  spec: ModelSpec;
  instance: InstanceKey;
  slot: number;
  tag: number;
  /** Null for a meta model: it runs on no device itself. */
  door: DeviceDoor | null;
}

export class EdgePath {
  readonly #leases: Leases;
  /** round_robin or least_outstanding over the open doors, as the device pool routes. */
  readonly #router: Router;
  readonly #routes = new Map<string, EdgeRoute>();
  /** Open doors by device; a device without one (restarting, out of service) gets nothing from here. */
  readonly #doors = new Map<number, DeviceDoor>();
  /** Doors whose worker ended, their pending requests waiting for the main thread to say why. */
  readonly #ending = new Map<number, DeviceDoor>();
  /** The doors' list, made again when one opens or goes (routing reads it for every request). */
  #open: DeviceDoor[] = [];
  /** lpt_packing: each model's replica being filled, and its requests in flight from here per device. */
  readonly #filling = new Map<string, FillState & { inflight: Map<number, number> }>();
  /** What this edge counts of its requests, where the main thread reads it (shared/request-counters.ts). */
  readonly #counters: RequestCounters;
  readonly #hookOptions: RoomsStart['hooks'];
  /** This edge's hook threads, started at the first request that needs them. */
  #hooks: HookPool | null = null;
  readonly #path: RequestPath<EdgeLease>;
  /** The shared-memory regions this edge takes requests for. */
  readonly #regions: EdgeRegions;
  /** The node's quotas, counted in this edge's row (the main thread's is 0). */
  readonly #quotas: Quotas;
  /** What this edge learned of its models' runs, against the devices' published backlogs. */
  readonly #deadlines: DeadlineAdmission;
  /** Each device's published backlog (shared/backlog.ts), from its door's message. */
  readonly #backlogs = new Map<number, Backlog>();
  readonly #tracing: boolean;

  /**
   * `row`: this edge's row in the leases and the counters. `viaMain`: how a request this edge does
   * not take reaches the main thread's path (a meta model's sub-call to a model without a route here).
   * `tracing`: this edge makes its requests' spans (shared/tracing.ts).
   */
  constructor(start: RoomsStart, row: number, viaMain: Infer, lastRelease: (of: 'model' | 'region') => void, tracing = false) {
    this.#tracing = tracing;
    // A lease given back that may be the last on a slot the main thread closed (an unload or a
    // reload waits for it to drain) tells it, whether a release or an acquire that lost the race.
    this.#leases = new Leases(start.leases, row, null, () => lastRelease('model'));
    this.#router = new Router(start.routing);
    this.#counters = new RequestCounters(start.counters, row);
    this.#hookOptions = start.hooks;
    this.#regions = new EdgeRegions(start.regionHolds, row, () => lastRelease('region'));
    this.#quotas = new Quotas(start.quotas, row + 1);
    this.#deadlines = new DeadlineAdmission(start.levels);
    this.#path = new RequestPath(this.#rooms(viaMain));
  }

  #rooms(viaMain: Infer): PathRooms<EdgeLease> {
    const counters = this.#counters;
    const edge = this;
    return {
      acquire: (model, version) => this.#acquire(model, version),
      release: (lease) => this.#release(lease),
      infer: (lease, request, signal, feedFromHook) => this.#infer(lease, request, signal, feedFromHook),
      adoptDoor: (target: HookFeedTarget, port: MessagePort) => {
        const door = this.#doors.get(target.deviceId);
        if (door) door.adoptDoor(port, target.generation);
        else port.close(); // that device's door is gone: the worker the hook fed is too
      },
      get hooks() {
        return edge.#hookPool();
      },
      regions: this.#regions,
      quotas: this.#quotas,
      aheadMs: (lease, level) => (lease.door ? this.#backlogs.get(lease.door.deviceId)?.aheadMs(level) ?? 0 : 0),
      deadlines: this.#deadlines,
      succeeded: (lease, batchSize, durationNs, queueNs, timing) => counters.succeeded(lease.slot, batchSize, durationNs, queueNs, timing),
      failed: (lease, code, durationNs) => counters.failed(lease.slot, failureReason(code), durationNs),
      elsewhere: async (model, tensors, outputs, { deadlineMs, priority }, signal, trace) =>
        (await viaMain(subCallRequest(model, tensors, outputs, priority), { callDeadlineMs: deadlineMs, signal, outputs: null, protocol: 'grpc', ...(trace ? { trace } : {}) })).outputs,
      trace: this.#tracing ? (request, carrier, protocol, admitted) => RequestTrace.request(request, carrier, protocol, admitted) : () => null,
    };
  }

  #hookPool(): HookPool {
    this.#hooks ??= new HookPool(this.#hookOptions);
    return this.#hooks;
  }

  /** The node's quotas as this edge counts them (its edge refuses a tenant over its quota from a call's metadata). */
  get quotas(): Quotas {
    return this.#quotas;
  }

  /** A model's route changed; null: its requests go through the main thread. */
  route(model: string, route: EdgeRoute | null): void {
    if (route) this.#routes.set(model, route);
    else this.#routes.delete(model);
    const filling = this.#filling.get(model);
    if (filling) filling.open = 0; // moved or reloaded: fill its replicas from the first again
  }

  /** A door to device `deviceId`, `link` its number there (replacing one before it, whose worker has ended). */
  door(deviceId: number, port: MessagePort, link: number, waitBoundMs: number, backlog: SharedArrayBuffer): void {
    if (this.#backlogs.get(deviceId)?.memory !== backlog) this.#backlogs.set(deviceId, new Backlog(backlog));
    this.#doors.get(deviceId)?.close('its worker was replaced');
    this.#ending.delete(deviceId);
    const door = new DeviceDoor(deviceId, port, link, waitBoundMs, (closed) => {
      if (this.#doors.get(deviceId) !== closed) return;
      this.#forgetDoor(deviceId);
      this.#ending.set(deviceId, closed); // its pending requests wait for why (deviceOut)
    });
    this.#doors.set(deviceId, door);
    this.#open = [...this.#doors.values()];
  }

  /**
   * Device `deviceId` is out of service, or its worker ended (`why` as the main thread says it):
   * route nothing more to it; what is pending on its door fails UNAVAILABLE saying why.
   */
  deviceOut(deviceId: number, why: string): void {
    (this.#doors.get(deviceId) ?? this.#ending.get(deviceId))?.close(why);
    this.#ending.delete(deviceId);
    this.#forgetDoor(deviceId);
  }

  #forgetDoor(deviceId: number): void {
    const door = this.#doors.get(deviceId);
    if (!door) return;
    this.#doors.delete(deviceId);
    this.#open = [...this.#doors.values()];
  }

  /**
   * The request's answer by the path on this edge, or null when this edge does not take it (the
   * caller hands it to the main thread). `options` are the edge's, as the path takes them.
   */
  infer(req: DataPlaneRequest, options: InferOptions): Promise<InferenceAnswer> | null {
    // A region this edge has not heard of (registered a moment ago through another edge, or
    // unknown: the main thread's registry words why) is the main thread's to find.
    const regions = this.#regions;
    if (req.inputs.some((t) => t.bytes.kind === 'region' && !regions.knows(t.bytes.region)) || req.outputs.some((o) => o.region && !regions.knows(o.region.region))) return null;
    return this.#path.infer(req, options);
  }

  /** Shared-memory region `name` was registered, or (null) unregistered. */
  region(name: string, region: EdgeRegion | null): void {
    this.#regions.set(name, region);
  }

  /** The main thread added a segment of lease slots and of the counters beside them (before any route names it). */
  slotsGrown(leases: SharedArrayBuffer, counters: SharedArrayBuffer): void {
    this.#leases.adopt(leases);
    this.#counters.adopt(counters);
  }

  /** The main thread added a segment of region hold slots (before any region names it). */
  regionSlotsGrown(holds: SharedArrayBuffer): void {
    this.#regions.adopt(holds);
  }

  /** The hook threads stop (the edge is draining, its ports closed). */
  async close(): Promise<void> {
    await this.#hooks?.close();
  }

  /** A lease on `model` here: its route, a door to a device that holds it, and its slot still open; else null. */
  #acquire(model: string, version: string): EdgeLease | null {
    if (version !== '' && version !== MODEL_VERSION) return null;
    const route = this.#routes.get(model);
    if (!route) return null;
    const door = route.spec.kind === 'meta' ? null : this.#pick(model, route.placement, route.devices) ?? null;
    if ((!door && route.spec.kind !== 'meta') || !this.#leases.acquire(route.slot, route.tag)) return null;
    return { spec: route.spec, instance: route.instance, slot: route.slot, tag: route.tag, door };
  }

  /**
   * A lease given back; the last on a slot the main thread closed (an unload or reload waits) tells it (Leases'
   * lastOut).
   */
  #release(lease: EdgeLease): void {
    this.#leases.release(lease.slot, lease.tag);
  }

  #infer(lease: EdgeLease, request: InferenceRequest, signal: AbortSignal, feedFromHook?: (to: HookFeedTarget) => void): Promise<InferenceResult> {
    const { door, spec } = lease;
    if (!door) return Promise.reject(new Error(`unreachable: meta model ${spec.name} runs on no device`));
    this.#counters.routed(lease.slot, door.deviceId);
    // lpt_packing counts a placed model's requests in flight per device (fill routing); others go as they are.
    const counts = this.#filling.get(spec.name)?.inflight;
    if (!counts) return door.infer(request, signal, feedFromHook);
    return this.#counted(counts, door, request, signal, feedFromHook);
  }

  async #counted(counts: Map<number, number>, door: DeviceDoor, request: InferenceRequest, signal: AbortSignal, feedFromHook?: (to: HookFeedTarget) => void): Promise<InferenceResult> {
    const device = door.deviceId;
    counts.set(device, (counts.get(device) ?? 0) + 1);
    try {
      return await door.infer(request, signal, feedFromHook);
    } finally {
      counts.set(device, (counts.get(device) ?? 0) - 1);
    }
  }

  #pick(model: string, placement: EdgePlacement | undefined, holders: number[] | undefined): DeviceDoor | undefined {
    if (placement && (!holders || placement.devices.every((id) => holders.includes(id)))) return this.#fill(model, placement);
    // Only the devices that hold the model, when a device lost it.
    const open = holders ? this.#open.filter((d) => holders.includes(d.deviceId)) : this.#open;
    if (open.length <= 1) return open[0];
    return this.#router.pick(open);
  }

  /**
   * A placed model's replica: the one being filled until this edge has its share of a batch in
   * flight there, then the next. A replica without a door (restarting, or out of service) sends
   * the request to the main thread, which knows what to do with it.
   */
  #fill(model: string, placement: EdgePlacement): DeviceDoor | undefined {
    const replicas = placement.devices.map((id) => this.#doors.get(id));
    if (replicas.some((d) => !d)) return undefined;
    const doors = replicas as DeviceDoor[];
    let state = this.#filling.get(model);
    if (!state) this.#filling.set(model, (state = { open: 0, inflight: new Map() }));
    const counts = state.inflight;
    if (state.open >= doors.length) state.open = 0;
    return doors[fill(doors, (i) => counts.get(doors[i].deviceId) ?? 0, placement.capacity, placement.policy, state)];
  }

}

/**
 * A meta model's sub-call as a request of its own, for the main thread's path (its tensors are its
 * own: the hook thread made them), at its parent's priority.
 */
function subCallRequest(model: string, tensors: WireTensor[], outputs: string[], priority: number): DataPlaneRequest {
  return {
    ...(priority > 0 ? { priority } : {}),
    model,
    version: '',
    id: '',
    inputs: tensors.map((t) => ({ name: t.name, datatype: t.datatype, shape: t.shape, bytes: { kind: 'inline', data: t.data, owned: true } })),
    outputs: outputs.map((name) => ({ name, region: null })),
    parameters: {},
  };
}
