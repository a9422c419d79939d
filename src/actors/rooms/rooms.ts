/**
 * The rooms of every thread that holds requests: an edge thread's, and the main thread's, one
 * class fed the same routes, doors and regions (on the main thread in-process, from the registry,
 * the device handles and the shared-memory registry; on an edge as messages,
 * shared/channels/edge.ts). They stand under the one request path (shared/request-path.ts):
 *
 *   [edge: decode] -> lease (shared memory, on the model's route) -> check -> route
 *     -> [preprocess, on this thread's hook threads, which feed the device through their own door]
 *     -> [device, through this thread's door] -> [postprocess] -> count -> [edge: encode]
 *
 * The rooms:
 * - Leases: each ready model's route (its spec, the instance serving it, its lease slot in shared
 *   memory: shared/leases.ts makes an unload wait for the requests any thread holds), in this
 *   thread's row.
 * - Devices: the choice of device, written once here: `round_robin` or `least_outstanding` over
 *   the devices this thread reaches, as it sees them; under `lpt_packing` the model's replicas (the
 *   route's placement), filled as routing/routing.ts `fill` says, each thread filling its share
 *   of a batch. Among the devices that hold the model, the settled ones first (a device whose
 *   replacement worker is still loading the models again takes only what no other can).
 *   An edge reaches each device through a door of its own (actors/device/door.ts); the main
 *   thread through the device's handle, whose door holds requests while its worker restarts.
 * - Hooks: a hook pool (Piscina threads: actors/hooks/), an edge's own started at its first hooked
 *   or meta request, of `hooks.threads` shared among the edges; the main thread's is the node's.
 *   A preprocess hook's tensors go from its thread to the device through a door that thread makes,
 *   handed to the device through this thread's; a meta model's sub-calls take this path again.
 * - Counts: each request's in shared memory per lease slot (shared/request-counters.ts), before
 *   its answer goes and before its lease is given back, in this thread's row.
 * - Regions: the shared-memory regions registered, each request's held in shared memory until it
 *   is answered (regions.ts).
 *
 * What the rooms cannot take goes `elsewhere`, as it is: a model without a route here (not ready,
 * unknown, being reloaded), another version, a model no device this thread reaches holds, a lease
 * slot being drained, a region this thread has not heard of. An edge's elsewhere is the main
 * thread, whose rooms hear of every change first (in-process); the main thread's is the refusal
 * that says why (node/refusals.ts), since no thread knows more. With tracing on, the rooms make
 * their requests' spans (shared/tracing.ts).
 */
import type { MessagePort } from 'node:worker_threads';
import type { RoomsStart, EdgePlacement, EdgeRegion, EdgeRoute } from '../../shared/channels/edge.js';
import { fill, Router, type FillState } from '../../routing/routing.js';
import type { InferenceRequest, InferenceResult } from '../../shared/channels/inference.js';
import type { DeviceClient, HookFeedTarget } from '../../shared/channels/device.js';
import { MODEL_VERSION } from '../../shared/constants.js';
import type { DataPlaneRequest, Infer, InferenceAnswer, InferOptions } from '../../shared/data-plane.js';
import { failureReason } from '../../shared/failure-reason.js';
import { RequestCounters } from '../../shared/request-counters.js';
import { Leases } from '../../shared/leases.js';
import { Quotas } from '../../shared/admission.js';
import { Backlog, DeadlineAdmission } from '../../shared/backlog.js';
import type { InstanceKey, ModelSpec } from '../../shared/model-spec.js';
import { RequestPath, type PathRooms } from '../../shared/request-path.js';
import { RequestTrace } from '../../shared/tracing.js';
import { HookPool } from '../hooks/handle.js';
import { DeviceDoor } from '../device/door.js';
import { Regions } from './regions.js';

/**
 * A device as the rooms route to it: an edge's door (door.ts), or on the main thread the device's
 * handle (actors/device/handle.ts), which stays while its worker restarts.
 */
export interface RoomDevice extends DeviceClient {
  /** Requests may go to it: not stopped, not out of service. */
  readonly serving: boolean;
  /** Serving with every model it holds loaded (not a replacement worker still loading them again). */
  readonly settled: boolean;
}

/** Where this thread stands in the shared counts: its row in the leases, counters and holds, and in the quotas. */
export interface RoomsRows {
  row: number;
  quotaRow: number;
}

/** What differs by thread, beside the shared memory every thread starts with (RoomsStart). */
export interface RoomsOptions {
  /** What the rooms cannot take goes here, as it is (see the header). */
  elsewhere: Infer;
  /** This thread gave back what may be the last lease or hold on a closed slot: whoever waits on it looks again. */
  lastRelease: (of: 'model' | 'region') => void;
  /** This thread makes its requests' spans (shared/tracing.ts). */
  tracing: boolean;
  /** The hook pool to use; absent: one of this thread's own, started at the first request that needs it. */
  hooks?: HookPool;
}

/** A model taken here for one request: its route's spec, instance and slot, and the device it goes to. */
interface RoomLease {
  spec: ModelSpec;
  instance: InstanceKey;
  slot: number;
  tag: number;
  /** Null for a meta model: it runs on no device itself. */
  door: RoomDevice | null;
}

export class Rooms {
  readonly #leases: Leases;
  /** round_robin or least_outstanding over the devices reached, as the node's routing says. */
  readonly #router: Router;
  readonly #routes = new Map<string, EdgeRoute>();
  /** The devices this thread reaches, by id; one without a door here (restarting, out of service) gets nothing. */
  readonly #doors = new Map<number, RoomDevice>();
  /** The doors this thread opened itself (an edge's), by device. */
  readonly #ownDoors = new Map<number, DeviceDoor>();
  /** An edge's doors whose worker ended, their pending requests waiting for the main thread to say why. */
  readonly #ending = new Map<number, DeviceDoor>();
  /** The devices' list, made again when one comes or goes (routing reads it for every request). */
  #open: RoomDevice[] = [];
  /** lpt_packing: each model's replica being filled, and its requests in flight from here per device. */
  readonly #filling = new Map<string, FillState & { inflight: Map<number, number> }>();
  /** What this thread counts of its requests, where the main thread reads it (shared/request-counters.ts). */
  readonly #counters: RequestCounters;
  readonly #hookOptions: RoomsStart['hooks'];
  /** This thread's hook threads (an edge's started at the first request that needs them). */
  #hooks: HookPool | null;
  readonly #path: RequestPath<RoomLease>;
  /** The shared-memory regions this thread takes requests for. */
  readonly #regions: Regions;
  /** The node's quotas, counted in this thread's row. */
  readonly #quotas: Quotas;
  /** What this thread learned of its models' runs, against the devices' published backlogs. */
  readonly #deadlines: DeadlineAdmission;
  /** Each device's published backlog (shared/backlog.ts). */
  readonly #backlogs = new Map<number, Backlog>();
  readonly #elsewhere: Infer;

  /** `start`: the shared memory every thread's rooms stand on; `rows`: this thread's place in it. */
  constructor(start: RoomsStart, { row, quotaRow }: RoomsRows, options: RoomsOptions) {
    const { lastRelease } = options;
    // A lease given back that may be the last on a slot the main thread closed (an unload or a
    // reload waits for it to drain) tells it, whether a release or an acquire that lost the race.
    this.#leases = new Leases(start.leases, row, null, () => lastRelease('model'));
    this.#router = new Router(start.routing);
    this.#counters = new RequestCounters(start.counters, row);
    this.#hookOptions = start.hooks;
    this.#hooks = options.hooks ?? null;
    this.#regions = new Regions(start.regionHolds, row, () => lastRelease('region'));
    this.#quotas = new Quotas(start.quotas, quotaRow);
    this.#deadlines = new DeadlineAdmission(start.levels, start.costHalflifeMs);
    this.#elsewhere = options.elsewhere;
    this.#path = new RequestPath(this.#rooms(options.tracing));
  }

  #rooms(tracing: boolean): PathRooms<RoomLease> {
    const counters = this.#counters;
    const rooms = this;
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
        return rooms.#hookPool();
      },
      regions: this.#regions,
      quotas: this.#quotas,
      backlog: (lease) => (lease.door ? this.#backlogs.get(lease.door.deviceId) : undefined),
      deadlines: this.#deadlines,
      succeeded: (lease, batchSize, durationNs, queueNs, timing) => counters.succeeded(lease.slot, batchSize, durationNs, queueNs, timing),
      failed: (lease, code, durationNs) => counters.failed(lease.slot, failureReason(code), durationNs),
      elsewhere: this.#elsewhere,
      trace: tracing ? (request, carrier, protocol, admitted) => RequestTrace.request(request, carrier, protocol, admitted) : () => null,
    };
  }

  #hookPool(): HookPool {
    this.#hooks ??= new HookPool(this.#hookOptions);
    return this.#hooks;
  }

  /** The node's quotas as this thread counts them (its edge refuses a tenant over its quota from a call's metadata). */
  get quotas(): Quotas {
    return this.#quotas;
  }

  /** A model's route changed; null: its requests go elsewhere. */
  route(model: string, route: EdgeRoute | null): void {
    if (route) this.#routes.set(model, route);
    else this.#routes.delete(model);
    const filling = this.#filling.get(model);
    if (filling) filling.open = 0; // moved or reloaded: fill its replicas from the first again
  }

  /**
   * A device this thread reaches through `device` itself (the main thread: the device's handle), its published backlog
   * `backlog`.
   */
  reach(device: RoomDevice, backlog: Backlog): void {
    this.#backlogs.set(device.deviceId, backlog);
    this.#doors.set(device.deviceId, device);
    this.#open = [...this.#doors.values()];
  }

  /** A door to device `deviceId`, `link` its number there (replacing one before it, whose worker has ended). */
  door(deviceId: number, port: MessagePort, link: number, waitBoundMs: number, backlog: SharedArrayBuffer): void {
    if (this.#backlogs.get(deviceId)?.memory !== backlog) this.#backlogs.set(deviceId, new Backlog(backlog));
    this.#ownDoors.get(deviceId)?.close('its worker was replaced');
    this.#ending.delete(deviceId);
    const door = new DeviceDoor(deviceId, port, link, waitBoundMs, (closed) => {
      if (this.#ownDoors.get(deviceId) !== closed) return;
      this.#forgetDoor(deviceId);
      this.#ending.set(deviceId, closed); // its pending requests wait for why (deviceOut)
    });
    this.#ownDoors.set(deviceId, door);
    this.#doors.set(deviceId, door);
    this.#open = [...this.#doors.values()];
  }

  /**
   * Device `deviceId` is out of service, or its worker ended (`why` as the main thread says it): route nothing more to
   * it through this thread's door; what is pending there fails UNAVAILABLE saying why.
   */
  deviceOut(deviceId: number, why: string): void {
    (this.#ownDoors.get(deviceId) ?? this.#ending.get(deviceId))?.close(why);
    this.#ending.delete(deviceId);
    this.#forgetDoor(deviceId);
  }

  #forgetDoor(deviceId: number): void {
    this.#ownDoors.delete(deviceId);
    if (!this.#doors.delete(deviceId)) return;
    this.#open = [...this.#doors.values()];
  }

  /** The request's answer: by the path here, or by what the rooms send it to when they cannot take it (`elsewhere`). */
  infer(req: DataPlaneRequest, options: InferOptions): Promise<InferenceAnswer> {
    // A region this thread has not heard of (on an edge: registered a moment ago through another
    // edge, or unknown) is for elsewhere to find, or to word why not.
    const regions = this.#regions;
    const unheard = req.inputs.some((t) => t.bytes.kind === 'region' && !regions.knows(t.bytes.region)) || req.outputs.some((o) => o.region && !regions.knows(o.region.region));
    return (!unheard && this.#path.infer(req, options)) || this.#elsewhere(req, options);
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

  /** A lease on `model` here: its route, a device that holds it, and its slot still open; else null. */
  #acquire(model: string, version: string): RoomLease | null {
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
  #release(lease: RoomLease): void {
    this.#leases.release(lease.slot, lease.tag);
  }

  #infer(lease: RoomLease, request: InferenceRequest, signal: AbortSignal, feedFromHook?: (to: HookFeedTarget) => void): Promise<InferenceResult> {
    const { door, spec } = lease;
    if (!door) return Promise.reject(new Error(`unreachable: meta model ${spec.name} runs on no device`));
    this.#counters.routed(lease.slot, door.deviceId);
    // lpt_packing counts a placed model's requests in flight per device (fill routing); others go as they are.
    const counts = this.#filling.get(spec.name)?.inflight;
    if (!counts) return door.infer(request, signal, feedFromHook);
    return this.#counted(counts, door, request, signal, feedFromHook);
  }

  async #counted(counts: Map<number, number>, door: RoomDevice, request: InferenceRequest, signal: AbortSignal, feedFromHook?: (to: HookFeedTarget) => void): Promise<InferenceResult> {
    const device = door.deviceId;
    counts.set(device, (counts.get(device) ?? 0) + 1);
    try {
      return await door.infer(request, signal, feedFromHook);
    } finally {
      counts.set(device, (counts.get(device) ?? 0) - 1);
    }
  }

  /**
   * The device for a request, among those that serve and hold its instance (`holders`; absent: every one): the
   * settled ones when there are any, so that a restarting device takes none of a model that others serve; then the
   * model's placement when every replica is among them, else the router. Undefined: none here.
   */
  #pick(model: string, placement: EdgePlacement | undefined, holders: number[] | undefined): RoomDevice | undefined {
    let open = holders ? this.#open.filter((d) => holders.includes(d.deviceId)) : this.#open;
    if (!open.every((d) => d.settled)) {
      const serving = open.filter((d) => d.serving);
      const settled = serving.filter((d) => d.settled);
      open = settled.length > 0 ? settled : serving;
    }
    if (placement && placement.devices.every((id) => open.some((d) => d.deviceId === id))) return this.#fill(model, placement);
    if (open.length <= 1) return open[0];
    return this.#router.pick(open);
  }

  /**
   * A placed model's replica: the one being filled until this thread has its share of a batch in flight there, then
   * the next.
   */
  #fill(model: string, placement: EdgePlacement): RoomDevice {
    const doors = placement.devices.map((id) => this.#doors.get(id) as RoomDevice);
    let state = this.#filling.get(model);
    if (!state) this.#filling.set(model, (state = { open: 0, inflight: new Map() }));
    const counts = state.inflight;
    if (state.open >= doors.length) state.open = 0;
    return doors[fill(doors, (i) => counts.get(doors[i].deviceId) ?? 0, placement.capacity, placement.policy, state)];
  }
}
