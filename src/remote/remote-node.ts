/**
 * One remote Stowage node as a gateway-only process sees it: a gRPC channel,
 * whether it answers, which models it serves ready (from its RepositoryIndex),
 * and how many forwarded RPCs it has in flight. Calls carry raw message bytes
 * both ways: the gateway forwards requests unchanged. A pooled gateway also
 * reads the node's ModelControlStatus at each check (what placement needs:
 * NodeReport), apart from its health: a slow status read never takes the node
 * out of service; and it asks the node to PrefetchModel before moving a model there.
 *
 * At most `maxStreams` forwarded RPCs (unary calls and open streams) are in
 * flight to one node; more wait their turn, so a burst at the gateway cannot
 * overrun a node's own admission cap.
 */
import * as grpc from '@grpc/grpc-js';
import { readStatusReport, type NodeReport } from './status-report.js';

const raw = (b: Buffer) => b;

export interface RemoteNodeOptions {
  maxStreams: number;
  /** HTTP/2 receive window for the node's answers (endpoints.http2_window_bytes, as the gateway's own server uses). */
  windowBytes: number;
  /** Decodes the node's RepositoryIndex answer. */
  decodeIndex: (bytes: Buffer) => { models: { name: string; state: string }[] };
  encodeIndexRequest: () => Buffer;
  /**
   * A gateway pooling the fleet's memory (gateway.scheduling.mode pooled): with each health check it
   * also asks the node's ModelControlStatus (what placement needs), and it sends PrefetchModel.
   */
  control?: {
    encodeStatusRequest: () => Buffer;
    encodePrefetch: (model: string) => Buffer;
    /** The health probe of a pooled gateway: ServerReady (a few bytes), not the whole RepositoryIndex. */
    encodeReadyRequest: () => Buffer;
    decodeReady: (bytes: Buffer) => { ready: boolean };
    /**
     * How long placement may go on with the node's last report while its status reads fail or
     * time out (the node stays in service meanwhile: health is the ServerReady probe alone).
     */
    reportMaxAgeMs: number;
  };
}

const STATUS_PATH = '/stowage.control.ModelControl/ModelControlStatus';
const PREFETCH_PATH = '/stowage.control.ModelControl/PrefetchModel';

export class RemoteNode {
  readonly address: string;
  #client: grpc.Client;
  #o: RemoteNodeOptions;
  #up = false;
  #models = new Set<string>();
  /** The same, as a list made once per index read (placement walks it every check). */
  #modelList: readonly string[] = [];
  #report: NodeReport | null = null;
  /** When #report was read (Date.now()). */
  #reportAtMs = 0;
  #statusFailing = false;
  #statusFailures = 0;
  /** The repository digest the node reported when its RepositoryIndex was last read ('' : read it every check). */
  #indexDigest = '';
  #inflight = 0;
  #waiting: (() => void)[] = [];
  /** Set once the node is being retired (discovery lost it): it takes no new requests. */
  #draining = false;
  #idle?: () => void;

  constructor(address: string, options: RemoteNodeOptions) {
    this.address = address;
    this.#o = options;
    // Reconnect quickly: a node that comes back should be found within the health interval.
    this.#client = new grpc.Client(address, grpc.credentials.createInsecure(), {
      'grpc.initial_reconnect_backoff_ms': 200,
      'grpc.max_reconnect_backoff_ms': 1000,
      'grpc.max_receive_message_length': -1,
      'grpc.max_send_message_length': -1,
      'grpc-node.flow_control_window': options.windowBytes,
    });
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
   * What the node last reported (pooled mode), while it is up and the report is younger than
   * `reportMaxAgeMs`; null before, while down, or once too old for placement to go on with.
   */
  get report(): NodeReport | null {
    const maxAge = this.#o.control?.reportMaxAgeMs ?? 0;
    return this.#up && this.#report && Date.now() - this.#reportAtMs <= maxAge ? this.#report : null;
  }

  /** The name placement knows the node by: the node_name it last reported, else its address. */
  get name(): string {
    return this.#report?.nodeName || this.address;
  }

  /** How old its last report is (ms); null before the first. */
  get reportAgeMs(): number | null {
    return this.#report ? Date.now() - this.#reportAtMs : null;
  }

  /** Whether its last status read failed or timed out (pooled mode), and how many have so far. */
  get statusFailing(): boolean {
    return this.#statusFailing;
  }

  get statusFailures(): number {
    return this.#statusFailures;
  }

  /**
   * One health check: what the node serves (RepositoryIndex: up if it answers in time, down if not)
   * and, pooled, its status for placement, asked at once beside it. A status read that fails or
   * is slow leaves the node up and its last report in place (`report` ages it out); only the index
   * decides whether the node takes traffic. Returns whether up changed.
   */
  async refresh(timeoutMs: number): Promise<boolean> {
    const control = this.#o.control;
    if (!control) return this.probe(timeoutMs);
    // Pooled: health (ServerReady) and status (the active models only) side by side; the whole
    // RepositoryIndex only when the node's repository digest says it changed, or says nothing.
    const [changed, digest] = await Promise.all([this.probe(timeoutMs), this.#readStatus(control, timeoutMs)]);
    if (this.#up && (!digest || digest !== this.#indexDigest)) {
      try {
        await this.#readIndex(timeoutMs);
        this.#indexDigest = digest ?? '';
      } catch {
        // Up by its probe: it keeps the models it had; the next check reads the index again.
      }
    }
    return changed;
  }

  /**
   * The health half of a check alone (after a failed call too): up if the node answers. Pooled,
   * ServerReady, ready (a node starting or stopping is not); otherwise its RepositoryIndex, which
   * also says what it serves.
   */
  async probe(timeoutMs: number): Promise<boolean> {
    const was = this.#up;
    const control = this.#o.control;
    try {
      if (control) {
        const bytes = await this.#unaryRaw('/inference.GRPCInferenceService/ServerReady', control.encodeReadyRequest(), new grpc.Metadata(), Date.now() + timeoutMs);
        this.#up = control.decodeReady(bytes).ready;
        if (this.#up && !was) this.#indexDigest = ''; // back: read what it serves now
      } else {
        await this.#readIndex(timeoutMs);
        this.#up = true;
      }
    } catch {
      this.#up = false;
    }
    return was !== this.#up;
  }

  async #readIndex(timeoutMs: number): Promise<void> {
    const bytes = await this.#unaryRaw('/inference.GRPCInferenceService/RepositoryIndex', this.#o.encodeIndexRequest(), new grpc.Metadata(), Date.now() + timeoutMs);
    this.#modelList = this.#o.decodeIndex(bytes).models.filter((m) => m.state === 'READY').map((m) => m.name);
    this.#models = new Set(this.#modelList);
  }

  /** One status read for placement; the node's repository digest, or undefined when it failed or gave none. */
  async #readStatus(control: NonNullable<RemoteNodeOptions['control']>, timeoutMs: number): Promise<string | undefined> {
    try {
      const { report, digest } = readStatusReport(await this.#unaryRaw(STATUS_PATH, control.encodeStatusRequest(), new grpc.Metadata(), Date.now() + timeoutMs));
      this.#report = report;
      this.#reportAtMs = Date.now();
      this.#statusFailing = false;
      return digest || undefined;
    } catch {
      this.#statusFailing = true;
      this.#statusFailures++;
      return undefined;
    }
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

  /** Ask the node to make `model`'s weights resident now (PrefetchModel); rejects with its error. */
  async prefetch(model: string, timeoutMs: number): Promise<void> {
    const control = this.#o.control;
    if (!control) throw new Error('RemoteNode.prefetch needs the control options (gateway.scheduling.mode pooled)');
    await this.#unaryRaw(PREFETCH_PATH, control.encodePrefetch(model), new grpc.Metadata(), Date.now() + timeoutMs);
  }

  close(): void {
    this.#client.close();
  }

  #unaryRaw(path: string, request: Buffer, metadata: grpc.Metadata, deadline: grpc.Deadline): Promise<Buffer> {
    return new Promise((resolve, reject) => {
      this.#client.makeUnaryRequest(path, raw, raw, request, metadata, { deadline }, (err, res) => (err ? reject(err) : resolve(res as Buffer)));
    });
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
