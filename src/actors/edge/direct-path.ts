/**
 * The direct path: an edge thread hands a plain inference to a device actor itself, over its own
 * door to that device (device-doors.ts), and frames the answer when it comes back, so that the
 * main thread is off the request path: it hears only what it counts (statistics and metrics, one
 * message per turn of the edge) and each execution's report from the device.
 *
 *   [edge: decode] -> route (the main thread's, sent ahead) -> lease (shared memory) -> check
 *     (shared/request-check.ts) -> [device, through this edge's door] -> [edge: encode]
 *
 * Which requests take it: a ready model's (the main thread sends each model's route when it
 * changes; shared/leases.ts makes an unload wait for the requests an edge holds), with no hook
 * and not a meta model, every tensor inline (shared-memory regions are the main thread's
 * registry's), its version the one served, while tracing is off (spans are made on the main
 * thread). Any other request, or one arriving while its device has no door open (restarting),
 * goes through the main thread's pipeline as before; its answer is the same either way, and so
 * are its errors: a request that fails here fails with what the pipeline would say.
 *
 * Which device: `round_robin` or `least_outstanding` over the devices this edge has doors to, as
 * this edge sees them; under `lpt_packing` the model's replicas (the route's placement), filled as
 * the main thread fills them (routing/routing.ts `fill`), each edge filling its share of a batch.
 *
 * The copies are the pipeline's (node/pipeline.ts's table): the check makes the small message's
 * copy (`inlineData`) here instead of on the main thread, and the hops are edge -> device -> edge.
 */
import type { MessagePort } from 'node:worker_threads';
import type { DirectStart, EdgePlacement, EdgeRoute } from '../../shared/channels/edge.js';
import { fill, Router, type FillState } from '../../routing/routing.js';
import { nowMs, type InferenceRequest } from '../../shared/channels/inference.js';
import { MODEL_VERSION } from '../../shared/constants.js';
import { frameOf, type DataPlaneRequest, type InferenceAnswer, type InferOptions } from '../../shared/data-plane.js';
import { StowageError } from '../../shared/errors.js';
import { failureReason } from '../../shared/failure-reason.js';
import { RequestCounters } from '../../shared/request-counters.js';
import { Leases } from '../../shared/leases.js';
import type { TensorSpec } from '../../shared/model-spec.js';
import { checkRequest } from '../../shared/request-check.js';
import { DeviceDoor } from './device-doors.js';

export class DirectPath {
  readonly #leases: Leases;
  /** round_robin or least_outstanding over the open doors, as the device pool routes. */
  readonly #router: Router;
  readonly #routes = new Map<string, EdgeRoute>();
  /** Open doors by device; a device without one (restarting, out of service) gets nothing from here. */
  readonly #doors = new Map<number, DeviceDoor>();
  /** The doors' list, made again when one opens or goes (routing reads it for every request). */
  #open: DeviceDoor[] = [];
  /** lpt_packing: each model's replica being filled, and its requests in flight from here per device. */
  readonly #filling = new Map<string, FillState & { inflight: Map<number, number> }>();
  /** What this edge counts of its requests, where the main thread reads it (shared/request-counters.ts). */
  readonly #counters: RequestCounters;

  /** `row`: this edge's row in the leases and the counters. */
  constructor(start: DirectStart, row: number) {
    this.#leases = new Leases(start.leases, row);
    this.#router = new Router(start.routing);
    this.#counters = new RequestCounters(start.counters, row);
  }

  /** A model's route changed; null: its requests go through the main thread. */
  route(model: string, route: EdgeRoute | null): void {
    if (route) this.#routes.set(model, route);
    else this.#routes.delete(model);
    const filling = this.#filling.get(model);
    if (filling) filling.open = 0; // moved or reloaded: fill its replicas from the first again
  }

  /** A door to device `deviceId` (replacing one before it, whose worker has ended). */
  door(deviceId: number, port: MessagePort, waitBoundMs: number): void {
    this.#doors.get(deviceId)?.close('its worker was replaced');
    const door = new DeviceDoor(deviceId, port, waitBoundMs, (closed) => {
      if (this.#doors.get(deviceId) === closed) this.#forgetDoor(deviceId);
    });
    this.#doors.set(deviceId, door);
    this.#open = [...this.#doors.values()];
  }

  /** Device `deviceId` is out of service: route nothing more to it; what is pending on its door fails UNAVAILABLE. */
  deviceOut(deviceId: number, why: string): void {
    this.#doors.get(deviceId)?.close(why);
    this.#forgetDoor(deviceId);
  }

  #forgetDoor(deviceId: number): void {
    this.#doors.delete(deviceId);
    this.#open = [...this.#doors.values()];
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

  /** A placed model's requests in flight from here on `deviceId` (fill routing's count). */
  #count(model: string, deviceId: number, by: number): void {
    const counts = this.#filling.get(model)?.inflight;
    if (counts) counts.set(deviceId, (counts.get(deviceId) ?? 0) + by);
  }

  /**
   * The request's answer by the direct path, or null when it does not take it (the caller hands it
   * to the main thread). `options` are the edge's, as the pipeline takes them.
   */
  infer(req: DataPlaneRequest, options: InferOptions): Promise<InferenceAnswer> | null {
    if (req.refused || (req.version !== '' && req.version !== MODEL_VERSION)) return null;
    const route = this.#routes.get(req.model);
    if (!route || route.spec.kind === 'meta' || route.spec.hooks) return null;
    if (req.inputs.some((t) => t.bytes.kind !== 'inline') || req.outputs.some((o) => o.region)) return null;
    const door = this.#pick(req.model, route.placement, route.devices);
    if (!door || !this.#leases.acquire(route.slot, route.tag)) return null;
    return this.#run(req, options, route, door);
  }

  async #run(req: DataPlaneRequest, { callDeadlineMs, signal, outputs }: InferOptions, route: EdgeRoute, door: DeviceDoor): Promise<InferenceAnswer> {
    const started = process.hrtime.bigint();
    const { spec, instance } = route;
    const counters = this.#counters;
    // Counted here before the answer goes and before the lease is given back: whoever asks for
    // statistics after the answer finds it counted, and the slot is freed only once it is.
    const elapsedNs = () => Number(process.hrtime.bigint() - started);
    try {
      const checked = checkRequest(req, spec, undefined, 'any');
      const request: InferenceRequest = {
        instance,
        inputs: checked.inputs,
        rows: checked.rows,
        outputs: checked.outputs,
        outputRegions: checked.outputRegions,
        frame: outputs ? frameOf(outputs, checked.outputs.map((name) => spec.clientOutputs.find((t) => t.name === name) as TensorSpec)) : null,
        deadlineMs: Math.min(callDeadlineMs, req.timeoutUs === undefined ? Infinity : nowMs() + req.timeoutUs / 1000),
      };
      const device = door.deviceId;
      counters.routed(route.slot, device);
      this.#count(spec.name, device, 1);
      let result;
      try {
        result = await door.infer(request, signal);
      } finally {
        this.#count(spec.name, device, -1);
      }
      counters.succeeded(route.slot, checked.batchSize, elapsedNs(), result.queueNs, result.timing);
      return { outputs: result.outputs, framed: result.framed && request.frame ? { bytes: result.framed, frame: request.frame } : null };
    } catch (err) {
      counters.failed(route.slot, failureReason(err instanceof StowageError ? err.code : undefined), elapsedNs());
      throw err;
    } finally {
      this.#leases.release(route.slot);
    }
  }
}
