/**
 * One remote Stowage node as a gateway-only process sees it: a gRPC channel,
 * whether it answers, which models it serves ready (from its RepositoryIndex),
 * and how many forwarded RPCs it has in flight. Calls carry raw message bytes
 * both ways: the gateway forwards requests unchanged. A pooled gateway probes
 * its health alone here (ServerReady); what placement reads of the node (its
 * status, its index, prefetches) its placement thread reads on a channel of its
 * own (node-status.ts), and tells this side what the node serves.
 *
 * At most `maxStreams` forwarded RPCs (unary calls and open streams) are in
 * flight to one node; more wait their turn, so a burst at the gateway cannot
 * overrun a node's own admission cap.
 */
import * as grpc from '@grpc/grpc-js';
import { nodeChannel, unaryRaw } from './node-channel.js';

export interface RemoteNodeOptions {
  maxStreams: number;
  /** HTTP/2 receive window for the node's answers (endpoints.http2_window_bytes, as the gateway's own server uses). */
  windowBytes: number;
  /** Decodes the node's RepositoryIndex answer. */
  decodeIndex: (bytes: Buffer) => { models: { name: string; state: string }[] };
  encodeIndexRequest: () => Buffer;
  /**
   * A gateway pooling the fleet's memory (gateway.scheduling.mode pooled): its health probe is
   * ServerReady (a few bytes), not the whole RepositoryIndex, and what the node serves comes from
   * the placement thread (`setModels`).
   */
  ready?: {
    encodeReadyRequest: () => Buffer;
    decodeReady: (bytes: Buffer) => { ready: boolean };
  };
}

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
   * answers. Pooled, ServerReady, ready (a node starting or stopping is not); otherwise its
   * RepositoryIndex, which also says what it serves. Returns whether up changed.
   */
  async probe(timeoutMs: number): Promise<boolean> {
    const was = this.#up;
    const ready = this.#o.ready;
    try {
      if (ready) {
        const bytes = await this.#unaryRaw('/inference.GRPCInferenceService/ServerReady', ready.encodeReadyRequest(), new grpc.Metadata(), Date.now() + timeoutMs);
        this.#up = ready.decodeReady(bytes).ready;
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
