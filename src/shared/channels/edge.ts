/**
 * The channel between the main thread and an edge thread (actors/edge/): each edge terminates
 * gRPC and REST on the node's ports (the kernel spreads connections over the edges), decodes,
 * admits and encodes, and hands the main thread what only it may answer: every operation of
 * shared/operations.ts by name, and every inference as the data plane's request
 * (data-plane.ts), whose answer comes back to the edge that asked. Types only; both sides
 * `import type` it. Each side sends what one event-loop turn produced as one array of these
 * (shared/thread-messages.ts, Outbox).
 *
 * Ownership: an inference's inline bytes travel with it, their ArrayBuffers transferred (an edge
 * copies bytes its request does not own into a buffer of their own first, so nothing it keeps is
 * detached); its answer's output buffers come back transferred the same way.
 */
import type { MessagePort } from 'node:worker_threads';
import type { ErrorData } from '../errors.js';
import type { AnyOperationReply, OperationCall } from '../operations.js';
import type { CountersShape } from '../request-counters.js';
import type { LeasesShape } from '../leases.js';
import type { QuotasShape } from '../admission.js';
import type { Levels } from '../backlog.js';
import type { HookPoolOptions } from './hooks.js';
import type { DataPlaneRequest, InferenceAnswer, InferOptions } from '../data-plane.js';
import type { InstanceKey, ModelSpec } from '../model-spec.js';
import type { FillPolicy, NodeConfig } from '../config-schema.js';

/**
 * Where `lpt_packing` placed a model (node/devices.ts), for an edge to route it there itself: its
 * replicas' devices, and how many of its requests one edge keeps in flight on a replica before it
 * opens the next (a full batch times routing_fill_factor, shared among the edges).
 */
export interface EdgePlacement {
  devices: number[];
  capacity: number;
  policy: FillPolicy;
}

/**
 * A model a thread's rooms may run (actors/rooms/rooms.ts): its spec, the instance that serves
 * it, and its lease slot and tag (shared/leases.ts) that say whether it still does. The main
 * thread tells every thread's rooms a model's route each time it changes (its own first); null:
 * not routed (not ready, or loading, or no slot left): an edge's requests for it go to the main
 * thread, whose rooms refuse them saying why.
 */
export interface EdgeRoute {
  model: string;
  spec: ModelSpec;
  instance: InstanceKey;
  slot: number;
  tag: number;
  /** lpt_packing over several devices: where the model is placed; absent: any device. */
  placement?: EdgePlacement;
  /**
   * The devices that hold the instance, when not every device in service does (a device's
   * replacement worker could not load it again): the edge routes it only there. Absent: every device.
   */
  devices?: number[];
}

/**
 * A registered shared-memory region as a thread's rooms take requests that name it (actors/rooms/regions.ts):
 * what a slice of it carries (node/shared-memory.ts), and its slot in the region holds, tagged with
 * its id (shared/leases.ts), where the thread counts the requests that hold it.
 */
export interface EdgeRegion {
  id: number;
  slot: number;
  kind: 'system' | 'cuda';
  key: string;
  /** The open descriptor (the process's: threads share descriptors); -1 for a CUDA region. */
  fd: number;
  cuda?: { gpu: number; handle: Uint8Array };
  offset: number;
  byteSize: number;
}

/** What an edge needs to route requests to the devices itself; absent: every inference goes through the main thread. */
export interface RoomsStart {
  /** The leases' shared memory (shared/leases.ts); the edge's row is its index. */
  leases: LeasesShape;
  /** How the edge picks among the devices it has doors to (gateway.scheduling.mode). */
  routing: 'round_robin' | 'least_outstanding';
  /**
   * Where the edge counts the requests it routes itself (shared/request-counters.ts; its row is its
   * index): statistics and metrics read them there, one count per process.
   */
  counters: CountersShape;
  /** The edge's own hook pool, started at its first hooked or meta request: its share of hooks.threads. */
  hooks: HookPoolOptions;
  /** The holds on shared-memory regions (shared/leases.ts: a slot per region; the edge's row is its index). */
  regionHolds: LeasesShape;
  /** The node's quotas (shared/admission.ts; the edge's row is its index + 1). */
  quotas: QuotasShape;
  /** How the scheduler resolves a request's priority level, for refusing at admission what would miss its deadline. */
  levels: Levels;
  /** The half-life of the runs admission learns (scheduler.ema_halflife_seconds, as the devices learn theirs). */
  costHalflifeMs: number;
}

/** What an edge thread starts with (its workerData). */
export interface EdgeStart {
  /** 0, 1, ...: the edge's number in logs and metrics. */
  edge: number;
  /** The node file's endpoints section. */
  endpoints: NodeConfig['global']['endpoints'];
  /** The ports to listen on (with SO_REUSEPORT, beside the other edges); 0: a free one, reported back. */
  ports: { grpc: number; http: number };
  /** The admission's shared counters (shared/admission.ts). */
  admission: SharedArrayBuffer;
  logLevel: string;
  /** The path on the edge's start; null: every inference goes through the main thread. */
  rooms: RoomsStart | null;
  /**
   * Tracing is on (the main thread started OpenTelemetry's SDK; the edge starts its own from the
   * same OTEL_* environment): where the edge counts its failed exports, its slot its index + 1
   * (shared/tracing.ts). Null: off.
   */
  tracing: { exportFailures: SharedArrayBuffer } | null;
}

export type ToEdge =
  /** The reply to `call` `id`. */
  | { type: 'reply'; id: number; reply: AnyOperationReply }
  /** The answer to `infer` `id`, its output buffers transferred. */
  | { type: 'answer'; id: number; answer: InferenceAnswer }
  /** `call` or `infer` `id` failed. */
  | { type: 'failed'; id: number; error: ErrorData }
  /** A health status may have changed: Watch streams look again. */
  | { type: 'health' }
  /** The log level changed (LogSettings). */
  | { type: 'logLevel'; level: string }
  /**
   * Shutdown: refuse new inferences, let those in flight finish within `graceMs`, close the ports, answer `drained`.
   */
  | { type: 'drain'; graceMs: number }
  /** A model's route changed (for the edge's rooms); null: send its requests to the main thread. */
  | { type: 'route'; model: string; route: EdgeRoute | null }
  /**
   * A door to device actor `deviceId` (shared/channels/device.ts's ToDeviceDoor and FromDeviceDoor),
   * replacing any before it; `waitBoundMs`: how long a request without a deadline may wait there
   * before the edge stops waiting (the device's queue bound and the execution watchdog); `link`:
   * the door's number on that device (how hook threads name its requests, HookFeed.link).
   */
  | { type: 'door'; deviceId: number; port: MessagePort; link: number; waitBoundMs: number; backlog: SharedArrayBuffer }
  /**
   * Device `deviceId` was taken out of service, or its worker ended (`why`, its exit code included):
   * route nothing more to it, and close its door, failing what was pending there saying why.
   */
  | { type: 'deviceOut'; deviceId: number; why: string }
  /**
   * A shared-memory region `name` was registered (its slot open before this is sent); null: unregistered (its slot
   * closed).
   */
  | { type: 'region'; name: string; region: EdgeRegion | null }
  /**
   * The main thread added a segment of model lease slots, and of the counters beside them: sent before any route names
   * a slot in it.
   */
  | { type: 'slotsGrown'; leases: SharedArrayBuffer; counters: SharedArrayBuffer }
  /** The main thread added a segment of region hold slots: sent before any region names a slot in it. */
  | { type: 'regionSlotsGrown'; holds: SharedArrayBuffer }
  /** Answer `synced` once what was sent before this is read (a load's or a registration's answer waits for it). */
  | { type: 'sync'; id: number };

export type FromEdge =
  /** Listening on these ports: the process's ports, when the first edge chose them. */
  | { type: 'listening'; ports: { grpc: number; http: number } }
  /** An operation of shared/operations.ts by name with its request, answered `reply` or `failed`. */
  | ({ type: 'call'; id: number } & OperationCall)
  /**
   * An inference the edge does not take, for the main thread's path, its inline buffers transferred; answered `answer`
   * or `failed`.
   */
  | { type: 'infer'; id: number; request: DataPlaneRequest; options: Omit<InferOptions, 'signal'> }
  /** The client of inference `id` went away: cancel it. */
  | { type: 'cancel'; id: number }
  /**
   * The last lease on a closed model slot (`model`: an unload or a reload waits for it), or the
   * last hold on an unregistered region (`region`: the main thread closes it), was given back here.
   */
  | { type: 'lastRelease'; of: 'model' | 'region' }
  /** The ports are closed and nothing is in flight here any more. */
  | { type: 'drained' }
  /** Everything sent before `sync` `id` is read. */
  | { type: 'synced'; id: number };
