/**
 * A client for Stowage's own control service (proto/control.proto): model status with placement
 * and learned costs, run-time policy and residency, compaction. Replies as @grpc/proto-loader
 * decodes them with protocol/proto.ts's options (64-bit integers as decimal strings).
 *
 *   const control = new ControlClient('127.0.0.1:8001');
 *   const { models } = await control.call('ModelControlStatus', { name: '' });
 *   const stream = control.watchStatus({ name: '', window_seconds: 2, active_only: true, versioned: true });
 *   stream.on('data', (reply) => ...);
 */
import * as grpc from '@grpc/grpc-js';
import { loadControlClient } from '../protocol/proto.js';
import type { ModelControlStatus, ModelControlStatusReply } from '../shared/control-messages.js';

export type { ModelControlStatus, ModelControlStatusReply };

/** Each control RPC's request and reply, by name. */
export interface ControlCalls {
  ModelControlStatus: {
    request: { name: string; window_seconds?: number; fresh?: boolean; active_only?: boolean; versioned?: boolean; since_version?: string };
    reply: ModelControlStatusReply;
  };
  SetModelPolicy: { request: { name: string; weight?: number; max_batch_size?: number }; reply: Record<string, never> };
  SetModelResidency: { request: { name: string; residency: string }; reply: Record<string, never> };
  CompactMemory: { request: { device: number }; reply: { moved_bytes: string } };
  PrefetchModel: { request: { name: string }; reply: { resident_bytes: string } };
}
export type ControlRpc = keyof ControlCalls;

type Callback = (err: grpc.ServiceError | null, res: unknown) => void;
type RawClient = grpc.Client & Record<string, (req: unknown, cb: Callback) => void>;

export class ControlClient {
  readonly #client: RawClient;

  constructor(address: string, options: grpc.ClientOptions = {}) {
    const Client = loadControlClient();
    this.#client = new Client(address, grpc.credentials.createInsecure(), options) as unknown as RawClient;
  }

  /** Call a control RPC by name; it resolves with that RPC's reply, or rejects with the gRPC error. */
  call<K extends ControlRpc>(rpc: K, request: ControlCalls[K]['request']): Promise<ControlCalls[K]['reply']> {
    return new Promise((resolve, reject) => {
      this.#client[rpc](request, (err, res) => (err ? reject(err) : resolve(res as ControlCalls[K]['reply'])));
    });
  }

  /**
   * WatchModelControlStatus: the versioned report as a stream (its first answer at once, then one per
   * window); `data` events carry the replies. Cancel it to stop.
   */
  watchStatus(request: ControlCalls['ModelControlStatus']['request']): grpc.ClientReadableStream<ModelControlStatusReply> {
    const watch = (this.#client as unknown as Record<string, (req: unknown) => grpc.ClientReadableStream<ModelControlStatusReply>>).WatchModelControlStatus;
    return watch.call(this.#client, request);
  }

  close(): void {
    this.#client.close();
  }
}
