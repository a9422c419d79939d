/**
 * One node as a pooled gateway's placement thread sees it (remote/placement/worker.ts): its own gRPC
 * channel to the node, apart from the one requests are forwarded on, for what placement needs of it
 * - its status report (NodeReport), decoded here, off the requests' thread: a stream the node answers
 *   once per window (WatchModelControlStatus), or from a node without it one ModelControlStatus read
 *   a check;
 * - its RepositoryIndex (the models it serves ready), and with it one full ModelControlStatus for
 *   every model's weight bytes (what the homes are bounded by: routing/fleet-homes.ts), read again
 *   only when its repository digest changes;
 * - PrefetchModel before a model is moved onto it.
 * Whether it is up or draining is the main thread's to say (its health probe, discovery); a status
 * read that fails or is slow never takes the node out of service, it only ages its report.
 */
import * as grpc from '@grpc/grpc-js';
import type { FleetMember } from './fleet-routes.js';
import { nodeChannel, serverStreamRaw, unaryRaw } from './node-channel.js';
import { readReadyModels } from './index-report.js';
import { applyChanges, readStatusReport, readWeightBytes, type NodeReport } from './status-report.js';

const STATUS_PATH = '/stowage.control.ModelControl/ModelControlStatus';
const PREFETCH_PATH = '/stowage.control.ModelControl/PrefetchModel';
const INDEX_PATH = '/inference.GRPCInferenceService/RepositoryIndex';
const WATCH_PATH = '/stowage.control.ModelControl/WatchModelControlStatus';

export interface NodeStatusOptions {
  /** HTTP/2 receive window for the node's answers (endpoints.http2_window_bytes). */
  windowBytes: number;
  /** The status request (a read's or the stream's): its versioned report, changes since `since` (0: the whole). */
  encodeStatusRequest: (since: number) => Buffer;
  /** The window the status request names: the stream answers once per window. */
  windowMs: number;
  encodeIndexRequest: () => Buffer;
  encodePrefetch: (model: string) => Buffer;
  /** How long placement may go on with the node's last report while its status reads fail or time out. */
  reportMaxAgeMs: number;
  /**
   * The status request for every model's weight bytes, read with the index: no window, every model,
   * from the node's snapshot (absent: none read, and the homes stay hashed).
   */
  encodeBytesRequest?: () => Buffer;
  /**
   * Repository digest -> the models served ready and their bytes, as read from a node that gave it:
   * shared by every node of a check, so that nodes of one repository (most fleets) share one list and one read.
   */
  indexLists?: Map<string, IndexRead>;
  /**
   * Repository digest -> its read under way (null once it failed): a node whose digest another node
   * is being read under waits for that read instead of making its own (a gateway's start reads eight
   * nodes at once, most often of one repository).
   */
  indexReads?: Map<string, Promise<IndexRead | null>>;
}

/** What a node's index read gives: the models it serves ready, and each one's weight bytes where read. */
export interface IndexRead {
  models: readonly string[];
  bytes?: ReadonlyMap<string, number>;
}

export class NodeStatus implements FleetMember {
  readonly address: string;
  readonly #client: grpc.Client;
  readonly #o: NodeStatusOptions;
  #up = false;
  draining = false;
  /** Its READY models, as a list made once per index read (placement walks it every check). */
  #models: readonly string[] = [];
  /** Their weight bytes, read with the list (FleetMember's modelBytes). */
  #modelBytes: ReadonlyMap<string, number> | undefined;
  #report: NodeReport | null = null;
  /** When #report was read (Date.now()). */
  #reportAtMs = 0;
  #statusFailing = false;
  #statusFailures = 0;
  /** The repository digest the node reported when its RepositoryIndex was last read ('': read it at the next check). */
  #indexDigest = '';
  /** The digest its last status read gave (undefined: it failed, or the node gives none). */
  #digest: string | undefined;
  /** The version of the node's report #report is (0: none, or a node that does not version it: read in full). */
  #version = 0;
  /** Grows whenever #report changes: what placement compares to know nothing did. */
  #reportSerial = 0;
  /** The node's status stream while open (readStatus). */
  #stream: grpc.ClientReadableStream<Buffer> | null = null;
  /** The node answered the stream UNIMPLEMENTED (older than it): one read a check. */
  #streamUnsupported = false;
  /** When the window of the last answer ended (the node's clock; 0: a node that does not say). */
  #windowEndMs = 0;
  /** Answers the stream gave, and how many had come at the last check. */
  #answers = 0;
  #answersSeen = 0;
  /** Checks waiting for the stream's next answer. */
  readonly #waiting = new Set<() => void>();

  constructor(address: string, options: NodeStatusOptions) {
    this.address = address;
    this.#o = options;
    this.#client = nodeChannel(address, options.windowBytes);
  }

  get up(): boolean {
    return this.#up;
  }

  /** As the main thread's probe says; a node back up has its index read again (what it serves may have changed). */
  set up(up: boolean) {
    if (up && !this.#up) this.#indexDigest = '';
    this.#up = up;
  }

  get models(): readonly string[] {
    return this.#models;
  }

  get modelBytes(): ReadonlyMap<string, number> | undefined {
    return this.#modelBytes;
  }

  /**
   * What the node last reported, while it is up and the report is younger than `reportMaxAgeMs`;
   * null before, while down, or once too old for placement to go on with.
   */
  get report(): NodeReport | null {
    return this.#up && this.#report && Date.now() - this.#reportAtMs <= this.#o.reportMaxAgeMs ? this.#report : null;
  }

  /**
   * What the node last reported, however old, while it is up (null before its first report or while
   * down): who it is and its memory, for a node whose status reads fail but which serves.
   */
  get lastReport(): NodeReport | null {
    return this.#up ? this.#report : null;
  }

  /** The name placement knows the node by: the node_name it last reported, else its address. */
  get name(): string {
    return this.#report?.nodeName || this.address;
  }

  /** How old its last report is (ms); null before the first. */
  get reportAgeMs(): number | null {
    return this.#report ? Date.now() - this.#reportAtMs : null;
  }

  /** Whether its last status read failed or timed out, and how many have so far. */
  get statusFailing(): boolean {
    return this.#statusFailing;
  }

  get statusFailures(): number {
    return this.#statusFailures;
  }

  /** Grows whenever the report changes (a read that changed nothing leaves it): FleetMember's. */
  get reportSerial(): number {
    return this.#reportSerial;
  }

  /**
   * The node's status at a check (the active models only): what changed since the version of the
   * report it holds, or the whole report at first, after a node restarts, and from a node that does
   * not version it. Kept as a stream (WatchModelControlStatus), which the node answers once per
   * window, before the check: here it is opened; or, when this window's answer has not come (the
   * gateway's clock ahead of the node's), waited for as a read is (up to the timeout); or found
   * silent past a window and the timeout (a failed read: closed, opened again at the next check).
   * A node without the stream is read by one call a check. A failure keeps the last report, which
   * then ages.
   */
  async readStatus(timeoutMs: number): Promise<void> {
    if (this.#streamUnsupported) return this.#readOnce(timeoutMs);
    if (this.#stream) {
      if (!this.#holdsThisWindow()) await this.#nextAnswer(timeoutMs);
      this.#answersSeen = this.#answers;
      // #reportAtMs: when the stream last answered (nothing else applies answers while it is open).
      if (this.#stream && Date.now() - this.#reportAtMs <= this.#o.windowMs + timeoutMs) return;
      this.#closeStream();
      return this.#failed();
    }
    const opened = await this.#openStream(timeoutMs);
    this.#answersSeen = this.#answers;
    if (opened === 'answered') return;
    this.#closeStream();
    // No stream (an older node), or none free on the node now (endpoints.max_status_streams): read
    // once, so that placement keeps this check's figures; the stream is tried again at the next.
    if (this.#streamUnsupported || opened === 'busy') return this.#readOnce(timeoutMs);
    this.#failed();
  }

  /**
   * Whether the answer held is the one this check places by: the window that ended where this
   * gateway's own window began (every gateway then places by the same window of the node's, their
   * clocks up to half a window apart, as with reads); from a node without window_end_unix_ms, an
   * answer that came since the last check.
   */
  #holdsThisWindow(): boolean {
    if (this.#windowEndMs > 0) return this.#windowEndMs >= Math.floor(Date.now() / this.#o.windowMs) * this.#o.windowMs;
    return this.#answers > this.#answersSeen;
  }

  /** One ModelControlStatus call: a node that does not stream its status. */
  async #readOnce(timeoutMs: number): Promise<void> {
    try {
      this.#apply(await this.#call(STATUS_PATH, this.#o.encodeStatusRequest(this.#sinceVersion()), timeoutMs));
    } catch {
      this.#failed();
    }
  }

  /** The version to ask changes since: the one held, 0 for the whole report. */
  #sinceVersion(): number {
    return this.#version > 0 && this.#report ? this.#version : 0;
  }

  /**
   * Open the status stream; resolves once its first answer is applied, or when it failed, ended or
   * did not answer within `timeoutMs` (UNIMPLEMENTED: the node does not stream its status;
   * RESOURCE_EXHAUSTED, `busy`: it has as many streams open as it keeps).
   */
  #openStream(timeoutMs: number): Promise<'answered' | 'failed' | 'busy'> {
    const stream = serverStreamRaw(this.#client, WATCH_PATH, this.#o.encodeStatusRequest(this.#sinceVersion()));
    this.#stream = stream;
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve('failed'), timeoutMs);
      const settle = (opened: 'answered' | 'failed' | 'busy') => {
        clearTimeout(timer);
        resolve(opened);
      };
      stream.on('data', (bytes: Buffer) => {
        if (this.#stream !== stream) return;
        try {
          this.#apply(bytes);
          this.#answers++;
          this.#wake();
          settle('answered');
        } catch {
          // An answer that cannot be applied: the stream is read again from the whole report.
          this.#closeStream();
          this.#failed();
          settle('failed');
        }
      });
      stream.on('error', (err: grpc.ServiceError) => {
        if (err.code === grpc.status.UNIMPLEMENTED) this.#streamUnsupported = true;
        if (this.#stream === stream) this.#closeStream();
        settle(err.code === grpc.status.RESOURCE_EXHAUSTED ? 'busy' : 'failed');
      });
      stream.on('end', () => {
        if (this.#stream === stream) this.#closeStream();
        settle('failed');
      });
    });
  }

  #closeStream(): void {
    const stream = this.#stream;
    this.#stream = null;
    stream?.cancel();
    this.#wake();
  }

  /** Resolves at the stream's next answer, its end, or after `timeoutMs`. */
  #nextAnswer(timeoutMs: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const wake = () => {
        clearTimeout(timer);
        this.#waiting.delete(wake);
        resolve();
      };
      const timer = setTimeout(wake, timeoutMs);
      this.#waiting.add(wake);
    });
  }

  #wake(): void {
    for (const wake of [...this.#waiting]) wake();
  }

  /** One answer applied to the report held; throws on changes to a report it does not hold. */
  #apply(bytes: Buffer): void {
    const answer = readStatusReport(bytes);
    if (answer.changesOnly) {
      const base = this.#version > 0 ? this.#report : null;
      // Changes to a report of another process cannot be: the node's versions say so. Read it whole next time.
      if (!base || base.startedMs !== answer.report.startedMs) {
        this.#version = 0;
        throw new Error('changes to a report not held');
      }
      const same = answer.report.models.size === 0 && answer.gone.length === 0 && answer.notReady.length === 0 && sameNode(base, answer.report);
      this.#report = applyChanges(base, answer);
      if (!same) this.#reportSerial++;
    } else {
      this.#report = answer.report;
      this.#reportSerial++;
    }
    this.#version = answer.version;
    this.#windowEndMs = answer.windowEndMs;
    this.#reportAtMs = Date.now();
    this.#statusFailing = false;
    this.#digest = answer.digest || undefined;
  }

  #failed(): void {
    this.#statusFailing = true;
    this.#statusFailures++;
    this.#digest = undefined;
  }

  /**
   * Read its RepositoryIndex (and its models' bytes) when it is up and its digest changed since the
   * last read, or it gives none; true when what it serves changed. A failed read keeps the models it
   * had (the next check reads again); so does one whose bytes could not be read, so that a list
   * never goes without its bytes (gateways that read one and not the other would bound the homes apart).
   */
  async readIndexIfChanged(timeoutMs: number): Promise<boolean> {
    const digest = this.#digest;
    if (!this.#up || (digest && digest === this.#indexDigest)) return false;
    // Another node of the same repository was read, or is being read: its list, without a read of
    // this node's own (at 64 nodes x 10,000 models: one list of 10,000 names kept instead of 64, and
    // one ~0.5 MB index read at a gateway's start instead of one for each of the reads at once).
    if (digest) {
      // Awaited only when one is under way: an await here otherwise would let every node read at
      // once reach its own read before the first one's was registered.
      let shared = this.#o.indexLists?.get(digest);
      const underWay = shared ? undefined : this.#o.indexReads?.get(digest);
      if (underWay) shared = (await underWay) ?? undefined;
      if (shared) return this.#take(digest, shared);
    }
    const read = this.#read(digest, timeoutMs);
    const reads = this.#o.indexReads;
    if (digest && reads) {
      const kept = read.then((r) => r?.kept ?? null);
      reads.set(digest, kept);
      void kept.finally(() => {
        if (reads.get(digest) === kept) reads.delete(digest);
      });
    }
    return (await read)?.changed ?? false;
  }

  /** Take the list read under `digest` from another node; true when it is not the one this node had. */
  #take(digest: string, shared: IndexRead): boolean {
    this.#indexDigest = digest;
    const changed = shared.models !== this.#models;
    this.#models = shared.models;
    this.#modelBytes = shared.bytes;
    return changed;
  }

  /** Read the node's index and bytes and keep them (and share them under `digest`); null: a read failed. */
  async #read(digest: string | undefined, timeoutMs: number): Promise<{ kept: IndexRead; changed: boolean } | null> {
    try {
      const [index, status] = await Promise.all([
        this.#call(INDEX_PATH, this.#o.encodeIndexRequest(), timeoutMs),
        this.#o.encodeBytesRequest ? this.#call(STATUS_PATH, this.#o.encodeBytesRequest(), timeoutMs) : null,
      ]);
      const models = readReadyModels(index);
      const bytes = status ? readWeightBytes(status) : this.#modelBytes;
      this.#indexDigest = digest ?? '';
      const same = models.length === this.#models.length && models.every((m, i) => m === this.#models[i]);
      if (!same) this.#models = models;
      this.#modelBytes = bytes;
      const kept = { models: this.#models, bytes: this.#modelBytes };
      if (digest) this.#o.indexLists?.set(digest, kept);
      return { kept, changed: !same };
    } catch {
      return null;
    }
  }

  /** The repository digest its models were read under ('': none yet, or a node that gives none). */
  get indexDigest(): string {
    return this.#indexDigest;
  }

  /** Ask the node to make `model`'s weights resident now (PrefetchModel); rejects with its error. */
  async prefetch(model: string, timeoutMs: number): Promise<void> {
    await this.#call(PREFETCH_PATH, this.#o.encodePrefetch(model), timeoutMs);
  }

  close(): void {
    this.#closeStream();
    this.#client.close();
  }

  #call(path: string, request: Buffer, timeoutMs: number): Promise<Buffer> {
    return unaryRaw(this.#client, path, request, new grpc.Metadata(), Date.now() + timeoutMs);
  }
}

/** Whether two reports say the same of the node itself as placement reads it (its models and its queue aside). */
function sameNode(a: NodeReport, b: NodeReport): boolean {
  return a.nodeName === b.nodeName && a.startedMs === b.startedMs && a.budgetBytes === b.budgetBytes
    && a.sessionBudgetBytes === b.sessionBudgetBytes && a.devices === b.devices;
}
