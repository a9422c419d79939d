/**
 * The main thread's handle on the edge threads (`endpoints.edge_threads`): starts them on the
 * node's ports (the first chooses them when they are 0, the others listen beside it), answers
 * what they ask (shared/channels/edge.ts: each operation by name, each inference it does not take
 * itself through the main thread's path, cancelled when its client goes), tells them what changes
 * (health, the log level), and drains them at shutdown. What is one per process stays here: the
 * registry and readiness, the shared-memory regions, statistics and /metrics, tracing; admission
 * is one count in shared memory.
 *
 * The path on the edges (actors/rooms/rooms.ts): the edges run the request path themselves,
 * to the device actors and through hook threads of their own. This handle gives each edge what that takes: every
 * model's route as the registry changes it, the leases' shared memory, and a door to each device actor that serves
 * (again after a device restarts, none to one taken out of service), and the shared memory where
 * it counts what each such request did (shared/request-counters.ts), which statistics and metrics
 * read there.
 *
 * An edge thread that dies (an uncaught error) has failed only its own connections: its
 * inferences still running are cancelled, its leases given back, and a replacement starts on the
 * same ports (stowage_edge_restarts_total), unless it crashed EDGE_MAX_CONSECUTIVE_CRASHES times in
 * a row with no replacement lasting (shared/restarts.ts). Requests per edge: stowage_edge_requests_total{edge},
 * of them those it served itself: stowage_edge_served_requests_total{edge}.
 */
import v8 from 'node:v8';
import type { MessagePort, Worker } from 'node:worker_threads';
import type { Logger } from 'pino';
import { Counter, type Registry } from 'prom-client';
import type { RoomsStart, EdgeRegion, EdgeRoute, EdgeStart, FromEdge, ToEdge } from '../../shared/channels/edge.js';
import type { Leases } from '../../shared/leases.js';
import type { RequestCounters } from '../../shared/request-counters.js';
import { callOperation, type Operations } from '../../shared/operations.js';
import type { Infer, InferenceAnswer } from '../../shared/data-plane.js';
import { errors, toErrorData } from '../../shared/errors.js';
import type { Admission } from '../../shared/admission.js';
import { Outbox } from '../../shared/thread-messages.js';
import { startWorker } from '../../shared/worker-start.js';
import { ConsecutiveCrashes } from '../../shared/restarts.js';
import { EDGE_HEALTHY_AFTER_MS, EDGE_MAX_CONSECUTIVE_CRASHES } from '../../shared/constants.js';
import type { Quotas } from '../../shared/admission.js';

const WORKER_URL = new URL('./worker.js', import.meta.url);

/**
 * How long a load's or a registration's answer waits for the edges to have read it (`synced`): an edge busy past it
 * hands such requests to the main thread meanwhile, which serves them.
 */
const EDGE_SYNC_TIMEOUT_MS = 2_000;

/**
 * An edge thread's start must not take longer than this (it loads the protos and binds two ports);
 * STOWAGE_START_TIMEOUT_SCALE lengthens it with every other worker's (shared/worker-start.ts).
 */
const EDGE_START_TIMEOUT_MS = 30_000;

/**
 * The main thread's V8 old-space floor (main.js: `--initial-old-space-size`), which every other
 * thread's isolate goes without, given to the edge threads' too: they do the protocol's work the
 * main thread did when it was the edge, and without it V8 ran the same full collections there
 * (600 KiB one at a time through one edge thread: 0.62× of edge_threads 0 without it, 0.99× with
 * it, and half the process's CPU per request; bench/edges.js, docs/performance.md). V8 reads the
 * flag when it makes an isolate, on the new thread: it is set while an edge starts and taken back
 * once every edge starting has listened (a worker of another kind made meanwhile gets it too).
 */
const OLD_SPACE_FLAG = process.execArgv.find((a) => a.startsWith('--initial-old-space-size='));
let startingEdges = 0;
async function withEdgeHeap<T>(start: () => Promise<T>): Promise<T> {
  if (!OLD_SPACE_FLAG) return start();
  if (startingEdges++ === 0) v8.setFlagsFromString(OLD_SPACE_FLAG);
  try {
    return await start();
  } finally {
    if (--startingEdges === 0) v8.setFlagsFromString('--initial-old-space-size=0');
  }
}

/**
 * The edges' metrics: inference requests per edge ("main" when the main thread is the only edge),
 * those through the main thread's path counted here and those an edge routed itself read where the edge
 * counted them (`servedFrom`), and restarts.
 */
export function edgeMetrics(registry: Registry) {
  const viaMain = new Map<string, number>();
  let served: () => Map<string, number> = () => new Map();
  new Counter({
    name: 'stowage_edge_requests_total', help: 'Inference requests each edge took (gRPC and REST; edge "main" when endpoints.edge_threads is 0)', labelNames: ['edge'], registers: [registry],
    collect() {
      this.reset();
      const routed = served();
      for (const edge of new Set([...viaMain.keys(), ...routed.keys()])) this.inc({ edge }, (viaMain.get(edge) ?? 0) + (routed.get(edge) ?? 0));
    },
  });
  // The old design's name ("the direct path") stays one release as a deprecated alias with the same
  // values: docs/operations.md, *Deprecated metric names*.
  for (const [name, help] of [
    ['stowage_edge_served_requests_total', 'Of the inference requests each edge thread took, those it served itself (its request path), not handed to the main thread'],
    ['stowage_edge_direct_requests_total', 'Deprecated alias of stowage_edge_served_requests_total (same values), kept for one release'],
  ]) {
    new Counter({
      name, help, labelNames: ['edge'], registers: [registry],
      collect() {
        this.reset();
        for (const [edge, n] of served()) this.inc({ edge }, n);
      },
    });
  }
  return {
    /** An edge handed a request to the main thread's path. */
    viaMain: (edge: string) => viaMain.set(edge, (viaMain.get(edge) ?? 0) + 1),
    /** Where the edges' own requests are counted, per edge. */
    servedFrom: (source: () => Map<string, number>) => {
      served = source;
    },
    restarts: new Counter({ name: 'stowage_edge_restarts_total', help: 'Edge threads that died (an uncaught error) and were replaced', registers: [registry] }),
  };
}

/** A device actor as the edges' doors need it (actors/device/handle.ts). */
export interface DoorSource {
  readonly deviceId: number;
  readonly waitBoundMs: number;
  /** Its predicted backlog (shared/backlog.ts). */
  readonly backlog: { readonly memory: SharedArrayBuffer };
  /** A new door to it, or null while it does not serve. */
  openEdgeDoor(): { port: MessagePort; link: number } | null;
}

/** What the edges' rooms need of the main thread (absent: every inference goes through it). */
export interface EdgeRooms {
  /** What every thread's rooms stand on (each edge in its own row). */
  start: RoomsStart;
  /** The leases on models' instances, a row per edge and the main thread's last (shared/leases.ts). */
  leases: Leases;
  /** Every model's route now (a new edge's start); changes come through `routeChanged`. */
  routes(): EdgeRoute[];
  devices: readonly DoorSource[];
  /** Where the edges count the requests they route themselves (statistics and metrics read them there). */
  counters: RequestCounters;
  /** The holds on shared-memory regions (node/shared-memory.ts), a row per edge and the main thread's last. */
  regionHolds: Leases;
  /** The node's quotas: a dead edge's places are given back. */
  quotas: Quotas;
  /** Every region the edges may take requests for now (a new edge's start); changes come through `regionChanged`. */
  regions(): [string, EdgeRegion][];
  /** An edge gave back its last hold on an unregistered region, or died with holds: close what nothing holds. */
  regionsReleased(): void;
  /**
   * An edge gave back its last lease on a closed model slot, or died with leases: an unload or reload waiting for them
   * looks again.
   */
  leasesReleased(): void;
}

export interface EdgeOptions {
  count: number;
  /** The node file's endpoints section, as it is. */
  endpoints: EdgeStart['endpoints'];
  /** The process's admission: its counters are shared with the edges, and a dead edge's share is given back. */
  admission: Admission;
  logLevel: string;
  /** Every operation the edges may ask for (shared/operations.ts), by name. */
  operations: Operations;
  infer: Infer;
  /** The rooms' sources; absent: every inference goes through `infer`. */
  rooms?: EdgeRooms;
  /** Tracing on: where the edges count their failed exports (shared/tracing.ts); absent: off. */
  traceExportFailures?: SharedArrayBuffer;
  logger: Logger;
  metrics: ReturnType<typeof edgeMetrics>;
}

/** One edge thread, as the main thread sees it. */
interface Edge {
  index: number;
  worker: Worker;
  /** What this turn tells it, sent as one message at the turn's end. */
  outbox: Outbox<ToEdge>;
  /** Its inferences on the main thread's path, to cancel when the client goes or the edge dies. */
  inferences: Map<number, AbortController>;
  /** Resolves when it has drained (or exited). */
  drained: Promise<void>;
  markDrained: () => void;
  /** Set once it listens: when its crashes in a row count as over. */
  healthy?: NodeJS.Timeout;
  /** Its `sync`s not yet answered, each resolved by `synced` or the edge's end. */
  syncs: Map<number, () => void>;
}

/** The buffers an answer's outputs are views of, each once. */
function answerBuffers(answer: InferenceAnswer): ArrayBuffer[] {
  const buffers = new Set<ArrayBuffer>();
  if (answer.framed) buffers.add(answer.framed.bytes.buffer as ArrayBuffer);
  for (const t of answer.outputs) if (!(t.data.buffer instanceof SharedArrayBuffer)) buffers.add(t.data.buffer as ArrayBuffer);
  return [...buffers];
}

export class EdgeThreads {
  readonly #o: EdgeOptions;
  readonly #edges: (Edge | undefined)[] = [];
  readonly #metrics: ReturnType<typeof edgeMetrics>;
  /** Per edge: its crashes in a row (a crash loop is not fed for ever). */
  readonly #crashes = new Map<number, ConsecutiveCrashes>();
  #ports = { grpc: 0, http: 0 };
  #stopping = false;
  #nextSync = 1;

  constructor(options: EdgeOptions) {
    this.#o = options;
    this.#metrics = options.metrics;
    const { count, rooms } = options;
    // Every edge's series from its start, at 0 before its first request.
    options.metrics.servedFrom(() => new Map(Array.from({ length: count }, (_, i) => [String(i), rooms?.counters.servedOf(i) ?? 0])));
  }

  /**
   * Start every edge: the first on the configured ports (choosing them when 0), the rest beside it. Resolves to the
   * ports.
   */
  async start(): Promise<{ grpc: number; http: number }> {
    this.#ports = { grpc: this.#o.endpoints.grpc_port, http: this.#o.endpoints.http_port };
    for (let i = 0; i < this.#o.count; i++) {
      this.#ports = await withEdgeHeap(() => this.#spawn(i));
    }
    return this.#ports;
  }

  /** Every edge thread now, named as stowage_thread_heap_bytes labels them. */
  *threads(): Iterable<[string, Worker]> {
    for (const edge of this.#edges) if (edge) yield [`edge-${edge.index}`, edge.worker];
  }

  /** A health status may have changed: every edge's Watch streams look again. */
  healthChanged(): void {
    this.#broadcast({ type: 'health' });
  }

  setLogLevel(level: string): void {
    this.#broadcast({ type: 'logLevel', level });
  }

  /**
   * A shared-memory region was registered (its hold slot open) or (null) unregistered (its slot closed): every edge
   * hears it.
   */
  regionChanged(name: string, region: EdgeRegion | null): void {
    if (this.#o.rooms) this.#broadcast({ type: 'region', name, region });
  }

  /**
   * The main thread added a segment of model lease slots and their counters: every edge takes it before the routes that
   * name it.
   */
  slotsGrown(leases: SharedArrayBuffer, counters: SharedArrayBuffer): void {
    if (this.#o.rooms) this.#broadcast({ type: 'slotsGrown', leases, counters });
  }

  /** The main thread added a segment of region hold slots. */
  regionSlotsGrown(holds: SharedArrayBuffer): void {
    if (this.#o.rooms) this.#broadcast({ type: 'regionSlotsGrown', holds });
  }

  /** A model's route changed (the registry's watcher): every edge routes it so from now on. */
  routeChanged(model: string, route: EdgeRoute | null): void {
    if (this.#o.rooms) this.#broadcast({ type: 'route', model, route });
  }

  /** Device `deviceId` serves again (a replacement worker, its models loaded): every edge gets a new door to it. */
  deviceServing(deviceId: number): void {
    const device = this.#o.rooms?.devices.find((d) => d.deviceId === deviceId);
    if (device) for (const edge of this.#edges) if (edge) this.#openDoor(edge, device);
  }

  /**
   * Device `deviceId` was taken out of service, or its worker ended (`why`): no edge routes to it any more, and its
   * doors close saying why.
   */
  deviceOut(deviceId: number, why: string): void {
    if (this.#o.rooms) this.#broadcast({ type: 'deviceOut', deviceId, why });
  }

  #openDoor(edge: Edge, device: DoorSource): void {
    const door = device.openEdgeDoor();
    if (door) edge.outbox.push({ type: 'door', deviceId: device.deviceId, port: door.port, link: door.link, waitBoundMs: device.waitBoundMs, backlog: device.backlog.memory }, [door.port]);
  }

  /**
   * Resolves once every edge has read what it was sent before now (a route, a region), or after EDGE_SYNC_TIMEOUT_MS:
   * the answer to a load or a registration waits for it, so that a client's next request finds its model or region on
   * whichever edge takes it (until then an edge hands such a request to the main thread, which serves it).
   */
  synced(): Promise<void> {
    const edges = this.#edges.filter((e): e is Edge => e !== undefined);
    const all = Promise.all(edges.map((edge) => new Promise<void>((resolve) => {
      const id = this.#nextSync++;
      edge.syncs.set(id, resolve);
      edge.outbox.push({ type: 'sync', id });
    })));
    let timer: NodeJS.Timeout | undefined;
    const bound = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, EDGE_SYNC_TIMEOUT_MS);
    });
    return Promise.race([all.then(() => undefined), bound]).finally(() => clearTimeout(timer));
  }

  /** Drain every edge (new inferences refused, those in flight answered within `graceMs`), then end their threads. */
  async stop(graceMs: number): Promise<void> {
    this.#stopping = true;
    const edges = this.#edges.filter((e): e is Edge => e !== undefined);
    this.#broadcast({ type: 'drain', graceMs });
    await Promise.all(edges.map((e) => e.drained));
    await Promise.all(edges.map((e) => e.worker.terminate()));
  }

  #broadcast(msg: ToEdge): void {
    for (const edge of this.#edges) edge?.outbox.push(msg);
  }

  #spawn(index: number): Promise<{ grpc: number; http: number }> {
    const { endpoints, admission, logLevel, logger } = this.#o;
    const rooms = this.#o.rooms;
    const start: EdgeStart = { edge: index, endpoints, ports: this.#ports, admission: admission.memory, logLevel: logger.level ?? logLevel,
      rooms: rooms ? { ...rooms.start, leases: rooms.leases.shape, counters: rooms.counters.shape, regionHolds: rooms.regionHolds.shape } : null,
      tracing: this.#o.traceExportFailures ? { exportFailures: this.#o.traceExportFailures } : null };
    let markDrained = () => {};
    const drained = new Promise<void>((resolve) => {
      markDrained = resolve;
    });
    // Its messages come before `edge` is made only if the worker could answer before this returns: it cannot.
    let edge!: Edge;
    const { worker, started } = startWorker<FromEdge[], { grpc: number; http: number }>({
      url: WORKER_URL,
      name: `edge-${index}`,
      workerData: start,
      startTimeoutMs: EDGE_START_TIMEOUT_MS,
      onMessage: (messages, markStarted) => {
        for (const msg of messages) {
          if (msg.type === 'listening') markStarted(msg.ports);
          else this.#serve(edge, msg);
        }
      },
      onStartTimeout: (limitMs) => errors.internal(`edge thread ${index} did not start listening within ${limitMs} ms`),
      exitedBeforeStart: (code, lastError) => errors.internal(`edge thread ${index} exited (code ${code}) before listening: ${lastError?.message ?? 'no error reported'}`),
      onExit: (code, lastError, listening) => this.#exited(edge, code, lastError, listening),
    });
    edge = { index, worker, outbox: new Outbox<ToEdge>((messages, transfer) => worker.postMessage(messages, transfer)), inferences: new Map(), drained, markDrained, syncs: new Map() };
    // Listening a while without crashing: its crashes in a row start again at 0.
    void started.then(() => {
      edge.healthy = setTimeout(() => this.#crashes.get(index)?.healthy(), EDGE_HEALTHY_AFTER_MS);
      edge.healthy.unref();
    }, () => undefined);
    this.#edges[index] = edge;
    if (rooms) {
      // Routes and doors first: they wait in the worker's inbox until it listens to its port.
      for (const route of rooms.routes()) edge.outbox.push({ type: 'route', model: route.model, route });
      for (const [name, region] of rooms.regions()) edge.outbox.push({ type: 'region', name, region });
      for (const device of rooms.devices) this.#openDoor(edge, device);
    }
    return started;
  }

  /** An edge thread ended: what it held is given back; one that had listened and crashed is replaced. */
  #exited(edge: Edge, code: number, lastError: Error | undefined, listening: boolean): void {
    const { admission, logger, rooms } = this.#o;
    const { index } = edge;
    edge.markDrained();
    for (const synced of edge.syncs.values()) synced();
    edge.syncs.clear();
    for (const abort of edge.inferences.values()) abort.abort();
    edge.inferences.clear();
    // What it had admitted will never leave: its share of the counts is given back, and its leases.
    admission.forget(index + 1);
    rooms?.leases.forget(index);
    rooms?.regionHolds.forget(index);
    rooms?.quotas.forget(index + 1);
    rooms?.regionsReleased();
    rooms?.leasesReleased();
    if (this.#edges[index] === edge) this.#edges[index] = undefined;
    clearTimeout(edge.healthy);
    if (!listening || this.#stopping) return;
    // Its connections died with it; the others never noticed. A replacement listens beside them.
    const crashes = this.#crashes.get(index) ?? this.#crashes.set(index, new ConsecutiveCrashes(EDGE_MAX_CONSECUTIVE_CRASHES)).get(index)!;
    if (!crashes.crashed()) {
      logger.error({ edge: index, code, err: lastError, crashes: crashes.count }, 'edge thread crashed again and again, none of its replacements lasting; not replacing it: the other edges serve on the same ports');
      return;
    }
    this.#metrics.restarts.inc();
    logger.error({ edge: index, code, err: lastError, crashes: crashes.count }, 'edge thread crashed: its connections are closed; starting another');
    withEdgeHeap(() => this.#spawn(index)).then(
      () => logger.info({ edge: index }, 'edge thread restarted'),
      (err: unknown) => logger.error({ edge: index, err }, 'edge thread could not be restarted'),
    );
  }

  #serve(edge: Edge, msg: FromEdge): void {
    const reply = (out: ToEdge, transfer: ArrayBuffer[] = []) => {
      if (this.#edges[edge.index] === edge) edge.outbox.push(out, transfer);
    };
    switch (msg.type) {
      case 'call': {
        const { id, type: _call, ...call } = msg;
        Promise.resolve()
          .then(() => {
            if (typeof this.#o.operations[call.op] !== 'function') throw errors.unimplementedRpc(call.op);
            return callOperation(this.#o.operations, call);
          })
          .then((value) => reply({ type: 'reply', id, reply: value }), (err: unknown) => reply({ type: 'failed', id, error: toErrorData(err) }));
        return;
      }
      case 'infer': {
        const abort = new AbortController();
        edge.inferences.set(msg.id, abort);
        this.#metrics.viaMain(String(edge.index));
        this.#o.infer(msg.request, { ...msg.options, signal: abort.signal })
          .then((answer) => reply({ type: 'answer', id: msg.id, answer }, answerBuffers(answer)), (err: unknown) => reply({ type: 'failed', id: msg.id, error: toErrorData(err) }))
          .finally(() => edge.inferences.delete(msg.id));
        return;
      }
      case 'cancel':
        edge.inferences.get(msg.id)?.abort();
        return;
      case 'lastRelease':
        if (msg.of === 'region') this.#o.rooms?.regionsReleased();
        else this.#o.rooms?.leasesReleased();
        return;
      case 'drained':
        edge.markDrained();
        return;
      case 'synced':
        edge.syncs.get(msg.id)?.();
        edge.syncs.delete(msg.id);
        return;
      case 'listening':
        return;
    }
  }
}
