/**
 * One remote Stowage node as a gateway-only process sees it: a gRPC channel,
 * whether it answers, which models it serves ready (from its RepositoryIndex),
 * and how many forwarded RPCs it has in flight. Calls carry raw message bytes
 * both ways: the gateway forwards requests unchanged. A pooled gateway keeps
 * its health alone here (ServerReady, then the node's health Watch); what placement reads of the node (its
 * status, its index, prefetches) its placement thread reads on a channel of its
 * own (node-status.ts), and tells this side what the node serves.
 *
 * At most `maxStreams` forwarded RPCs (unary calls and open streams) are in
 * flight to one node; more wait their turn, so a burst at the gateway cannot
 * overrun a node's own admission cap.
 */
import * as grpc from '@grpc/grpc-js';
import { nodeChannel, serverStreamRaw, unaryRaw } from './node-channel.js';
import { readReadyModels } from './index-report.js';

export interface RemoteNodeOptions {
  maxStreams: number;
  /** HTTP/2 receive window for the node's answers (endpoints.http2_window_bytes, as the gateway's own server uses). */
  windowBytes: number;
  encodeIndexRequest: () => Buffer;
  /**
   * A gateway pooling the fleet's memory (gateway.scheduling.mode pooled): its health probe is
   * ServerReady (a few bytes), not the whole RepositoryIndex, and what the node serves comes from
   * the placement thread (`setModels`).
   */
  ready?: {
    encodeReadyRequest: () => Buffer;
    decodeReady: (bytes: Buffer) => { ready: boolean };
    /** The health Watch of the whole server (grpc.health.v1, service ""), and its answers. */
    encodeWatchRequest: () => Buffer;
    decodeWatch: (bytes: Buffer) => { status: string };
    /** The gateway's check interval: the health channel's keepalive pings go at this pace. */
    intervalMs: number;
    /** How long a keepalive ping may go unanswered before the node is taken for gone. */
    timeoutMs: number;
  };
}

const WATCH_PATH = '/grpc.health.v1.Health/Watch';

/** Routine health probes in a row that time out before a node that was up is marked down. */
const SLOW_PROBES_DOWN = 2;

/** A models list -> its set, while some node holds the list. */
const SETS = new WeakMap<readonly string[], Set<string>>();

export class RemoteNode {
  readonly address: string;
  #client: grpc.Client;
  #o: RemoteNodeOptions;
  #up = false;
  #models = new Set<string>();
  /** The same, as a list. */
  #modelList: readonly string[] = [];
  #inflight = 0;
  #waiting: (() => void)[] = [];
  /** Set once the node is being retired (discovery lost it): it takes no new requests. */
  #draining = false;
  #idle?: () => void;
  /**
   * Pooled: the node's health Watch while open, on a channel of its own whose keepalive pings find
   * a node that stopped answering. While it is open, the node's word (SERVING or not) is its health
   * and a check probes nothing: at 64 nodes the checks' ServerReady probes were most of the main
   * thread's CPU per check.
   */
  #watch: grpc.ClientReadableStream<Buffer> | null = null;
  #healthClient: grpc.Client | null = null;
  /** The node answered Watch UNIMPLEMENTED: a ServerReady probe each check. */
  #watchUnsupported = false;
  /** Up as the last probe told its caller (the watch may change #up between probes). */
  #told = false;
  /** Routine probes in a row that timed out while the node was up (SLOW_PROBES_DOWN marks it down). */
  #slowProbes = 0;

  constructor(address: string, options: RemoteNodeOptions) {
    this.address = address;
    this.#o = options;
    this.#client = nodeChannel(address, options.windowBytes);
  }

  get up(): boolean {
    return this.#up;
  }

  get inflight(): number {
    return this.#inflight;
  }

  serves(model: string): boolean {
    return this.#up && !this.#draining && this.#models.has(model);
  }

  get draining(): boolean {
    return this.#draining;
  }

  /**
   * Take no new requests and resolve once those in flight (and those waiting for a slot) are
   * done, or after `timeoutMs`; then close the channel.
   */
  async drain(timeoutMs: number): Promise<void> {
    this.#draining = true;
    if (this.#inflight > 0) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        new Promise<void>((resolve) => { this.#idle = resolve; }),
        new Promise<void>((resolve) => { timer = setTimeout(resolve, timeoutMs); }),
      ]);
      clearTimeout(timer);
    }
    this.close();
  }

  get models(): readonly string[] {
    return this.#modelList;
  }

  /**
   * Pooled: what the node serves ready, as the placement thread read it from its RepositoryIndex.
   * Nodes given the same list (one repository) share one set.
   */
  setModels(models: readonly string[]): void {
    this.#modelList = models;
    let set = SETS.get(models);
    if (!set) SETS.set(models, (set = new Set(models)));
    this.#models = set;
  }

  /**
   * One health check (at each of the gateway's checks, and after a failed call): up if the node
   * answers. Pooled, ServerReady, ready (a node starting or stopping is not), then kept by the
   * node's health Watch, which a check reads without a call (`fresh`: probe anyway, as after a
   * failed call; a failed probe closes the watch); otherwise its RepositoryIndex, which also says
   * what it serves. Returns whether up changed since the last probe said.
   */
  async probe(timeoutMs: number, { fresh = false }: { fresh?: boolean } = {}): Promise<boolean> {
    const ready = this.#o.ready;
    if (ready && this.#watch && !fresh) return this.#settle();
    try {
      if (ready) {
        const bytes = await this.#unaryRaw('/inference.GRPCInferenceService/ServerReady', ready.encodeReadyRequest(), new grpc.Metadata(), Date.now() + timeoutMs);
        this.#up = ready.decodeReady(bytes).ready;
      } else {
        await this.#readIndex(timeoutMs);
        this.#up = true;
      }
      this.#slowProbes = 0;
    } catch (err) {
      // A node that answers late is busy, not gone: one routine probe past its timeout keeps it in
      // service (a loaded machine's node answered a second late and failed every request until the
      // next check). A refused connection, a second late probe in a row, or a late probe after a
      // failed call (`fresh`) takes it out.
      const late = (err as grpc.ServiceError).code === grpc.status.DEADLINE_EXCEEDED;
      this.#slowProbes = late && this.#up && !fresh ? this.#slowProbes + 1 : SLOW_PROBES_DOWN;
      if (this.#slowProbes >= SLOW_PROBES_DOWN) this.#up = false;
    }
    if (!this.#up) this.#closeWatch();
    else if (ready && !this.#watch && !this.#watchUnsupported && !this.#draining) this.#openWatch(ready);
    return this.#settle();
  }

  #settle(): boolean {
    const changed = this.#told !== this.#up;
    this.#told = this.#up;
    return changed;
  }

  /** Watch the node's health: each answer sets up; the stream's end or failure (but UNIMPLEMENTED) sets it down. */
  #openWatch(ready: NonNullable<RemoteNodeOptions['ready']>): void {
    // Keepalive on this channel alone: a ping unanswered cuts only the watch, never a forwarded request.
    this.#healthClient ??= nodeChannel(this.address, this.#o.windowBytes, {
      'grpc.keepalive_time_ms': ready.intervalMs,
      'grpc.keepalive_timeout_ms': ready.timeoutMs,
    });
    const watch = serverStreamRaw(this.#healthClient, WATCH_PATH, ready.encodeWatchRequest());
    this.#watch = watch;
    watch.on('data', (bytes: Buffer) => {
      if (this.#watch === watch) this.#up = ready.decodeWatch(bytes).status === 'SERVING';
    });
    const closed = (err?: grpc.ServiceError) => {
      if (this.#watch !== watch) return;
      this.#watch = null;
      if (err?.code === grpc.status.UNIMPLEMENTED) this.#watchUnsupported = true;
      else this.#up = false;
    };
    watch.on('error', closed);
    watch.on('end', () => closed());
  }

  #closeWatch(): void {
    const watch = this.#watch;
    this.#watch = null;
    watch?.cancel();
  }

  async #readIndex(timeoutMs: number): Promise<void> {
    const bytes = await this.#unaryRaw('/inference.GRPCInferenceService/RepositoryIndex', this.#o.encodeIndexRequest(), new grpc.Metadata(), Date.now() + timeoutMs);
    this.#modelList = readReadyModels(bytes);
    this.#models = new Set(this.#modelList);
  }

  /** Forward one unary call's bytes; waits for a stream slot first. */
  async unary(path: string, request: Buffer, metadata: grpc.Metadata, deadline: grpc.Deadline): Promise<Buffer> {
    await this.#acquire();
    try {
      return await this.#unaryRaw(path, request, metadata, deadline);
    } finally {
      this.#release();
    }
  }

  close(): void {
    this.#closeWatch();
    this.#healthClient?.close();
    this.#client.close();
  }

  #unaryRaw(path: string, request: Buffer, metadata: grpc.Metadata, deadline: grpc.Deadline): Promise<Buffer> {
    return unaryRaw(this.#client, path, request, metadata, deadline);
  }

  #acquire(): Promise<void> {
    if (this.#inflight < this.#o.maxStreams) {
      this.#inflight++;
      return Promise.resolve();
    }
    return new Promise((resolve) => this.#waiting.push(() => {
      this.#inflight++;
      resolve();
    }));
  }

  #release(): void {
    this.#inflight--;
    this.#waiting.shift()?.();
    if (this.#inflight === 0) this.#idle?.();
  }
}
