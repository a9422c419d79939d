/**
 * A client for Stowage's own control service (proto/control.proto): model status with placement
 * and learned costs, run-time policy and residency, compaction. Replies as @grpc/proto-loader
 * decodes them with protocol/proto.ts's options (64-bit integers as decimal strings).
 *
 *   const control = new ControlClient('127.0.0.1:8001');
 *   const { models } = await control.call('ModelControlStatus', { name: '' });
 */
import * as grpc from '@grpc/grpc-js';
import { loadControlClient } from '../protocol/proto.js';

/** One model as ModelControlStatus reports it. */
export interface ModelControlStatus {
  name: string;
  /** LOADING, READY, UNLOADING, UNAVAILABLE. */
  state: string;
  reason: string;
  /** The loaded version serving it (`name#generation`). */
  instance: string;
  /** Where its weights live at rest: device, system or unpinned. */
  residency: string;
  /** Bytes of its weights on devices now, summed over the devices. */
  resident_bytes: string;
  /** The device holding its weights now; -1 if none or several. */
  device: number;
  queue_depth: number;
  learned_cost: { batch_size: number; ms: number }[];
  weight: number;
  max_batch_size: number;
  /** The devices its requests go to (lpt_packing: its placement). */
  placed_devices: number[];
  /** Backend cuda: GPU memory its sessions took at load, summed over the devices (a decimal string). */
  session_device_bytes: string;
  /** runtime.cuda.graphs: whether its runs use CUDA graphs, or why not; empty otherwise. */
  cuda_graphs: string;
}

/** Each control RPC's request and reply, by name. */
export interface ControlCalls {
  ModelControlStatus: { request: { name: string }; reply: { models: ModelControlStatus[] } };
  SetModelPolicy: { request: { name: string; weight?: number; max_batch_size?: number }; reply: Record<string, never> };
  SetModelResidency: { request: { name: string; residency: string }; reply: Record<string, never> };
  CompactMemory: { request: { device: number }; reply: { moved_bytes: string } };
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

  close(): void {
    this.#client.close();
  }
}
