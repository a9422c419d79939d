/**
 * A small KServe V2 gRPC client for Node: what our tests and tools use, and a
 * starting point for TypeScript callers. It never imports onnxruntime: talking
 * to a server needs only grpc-js and the protos.
 *
 *   const client = new InferenceClient('127.0.0.1:8001');
 *   const { outputs } = await client.infer('digits', [
 *     { name: 'image', datatype: 'FP32', shape: [1, 8, 8], data: new Float32Array(64) },
 *   ]);
 */
import * as grpc from '@grpc/grpc-js';
import { MAX_MESSAGE_BYTES } from '../shared/constants.js';
import { byDatatype, type Datatype } from '../shared/dtypes.js';
import { joinBytesElements, splitBytesElements } from '../shared/bytes-elements.js';
import { loadInferenceClient } from '../protocol/proto.js';
import type { InferParameter, ModelInferResponse } from '../protocol/types.js';
import type { InferenceReplies, InferenceRpc } from './replies.js';

export type * from './replies.js';

/** A typed array of any element type (FP16 and BF16 travel as Uint16Array). */
export type TypedArray = Int8Array | Uint8Array | Int16Array | Uint16Array | Int32Array | Uint32Array | BigInt64Array | BigUint64Array | Float32Array | Float64Array;

/** Element data: a typed array of the datatype's width, or for BYTES an array of byte strings. */
export type TensorData = TypedArray | Uint8Array[];

export interface Tensor {
  name: string;
  datatype: Datatype;
  shape: number[];
  data: TensorData;
}

/** Where a tensor sits in a registered system shared-memory region. */
export interface SharedMemorySlice {
  region: string;
  byteSize: number;
  offset?: number;
}

/** An input whose bytes are already in shared memory (see ./shared-memory.ts). */
export interface SharedMemoryInput {
  name: string;
  datatype: Datatype;
  shape: number[];
  sharedMemory: SharedMemorySlice;
}

/** An output to write into shared memory instead of returning it. */
export interface SharedMemoryOutput {
  name: string;
  sharedMemory: SharedMemorySlice;
}

function sliceParameters(s: SharedMemorySlice): Record<string, InferParameter> {
  return {
    shared_memory_region: { string_param: s.region },
    shared_memory_byte_size: { int64_param: String(s.byteSize) },
    shared_memory_offset: { int64_param: String(s.offset ?? 0) },
  };
}

export interface InferOptions {
  /** Outputs to return (all when omitted); a SharedMemoryOutput is written to its region instead. */
  outputs?: (string | SharedMemoryOutput)[];
  id?: string;
  parameters?: Record<string, InferParameter>;
  /** gRPC deadline, ms from now. */
  timeoutMs?: number;
  /** gRPC metadata to send (a W3C `traceparent`, say). */
  metadata?: Record<string, string>;
}

type Callback = (err: grpc.ServiceError | null, res: unknown) => void;
type RawClient = grpc.Client & Record<string, (req: unknown, meta: grpc.Metadata, opts: grpc.CallOptions, cb: Callback) => void>;

function toRaw(t: Tensor): Buffer {
  if (Array.isArray(t.data)) return Buffer.from(joinBytesElements(t.data).buffer);
  const v = t.data;
  return Buffer.from(v.buffer, v.byteOffset, v.byteLength);
}

/** Raw output bytes into typed data; copies, so the result is aligned whatever the message layout. */
export function fromRaw(datatype: string, raw: Uint8Array): TensorData {
  // copy: each BYTES element into a buffer of its own (the caller may keep it past the message)
  if (datatype === 'BYTES') return (splitBytesElements(raw) ?? []).map((e) => new Uint8Array(e));
  const Typed = byDatatype(datatype)?.typedArray as Float32ArrayConstructor | undefined;
  if (!Typed) throw new Error(`unknown datatype ${datatype}`);
  const copy = new Uint8Array(raw); // copy: the output out of the message, aligned for its typed view
  return new Typed(copy.buffer, 0, copy.byteLength / Typed.BYTES_PER_ELEMENT);
}

export class InferenceClient {
  readonly #client: RawClient;

  constructor(address: string, options: grpc.ClientOptions = {}) {
    const Client = loadInferenceClient();
    this.#client = new Client(address, grpc.credentials.createInsecure(), {
      'grpc.max_receive_message_length': MAX_MESSAGE_BYTES,
      'grpc.max_send_message_length': MAX_MESSAGE_BYTES,
      // HTTP/2's 64 KiB receive window throttles large answers; the server grants its clients 4 MiB too.
      'grpc-node.flow_control_window': 4 * 2 ** 20,
      ...options,
    }) as unknown as RawClient;
  }

  /**
   * Call a unary RPC of the service by name with a plain request object; it resolves with that RPC's reply
   * (replies.ts).
   */
  call<K extends InferenceRpc>(rpc: K, request?: unknown, timeoutMs?: number, metadata?: Record<string, string>): Promise<InferenceReplies[K]>;
  /** Any other RPC name: its reply untyped (and a name the service lacks is refused). */
  call(rpc: string, request?: unknown, timeoutMs?: number, metadata?: Record<string, string>): Promise<unknown>;
  call(rpc: string, request: unknown = {}, timeoutMs?: number, metadata: Record<string, string> = {}): Promise<unknown> {
    const fn = this.#client[rpc];
    if (typeof fn !== 'function') return Promise.reject(new Error(`no RPC ${rpc} in GRPCInferenceService`));
    const opts: grpc.CallOptions = timeoutMs === undefined ? {} : { deadline: Date.now() + timeoutMs };
    const meta = new grpc.Metadata();
    for (const [k, v] of Object.entries(metadata)) meta.set(k, v);
    return new Promise((resolve, reject) => {
      fn.call(this.#client, request, meta, opts, (err, res) => (err ? reject(err) : resolve(res)));
    });
  }

  async serverLive(): Promise<boolean> {
    return (await this.call('ServerLive')).live;
  }

  async serverReady(): Promise<boolean> {
    return (await this.call('ServerReady')).ready;
  }

  async modelReady(name: string): Promise<boolean> {
    return (await this.call('ModelReady', { name })).ready;
  }

  /**
   * Run a model; tensors go as raw contents (or stay in shared memory), outputs come back as
   * typed data (empty for an output written to shared memory: read it from the region).
   */
  async infer(model: string, inputs: (Tensor | SharedMemoryInput)[], options: InferOptions = {}): Promise<{ id: string; outputs: Tensor[] }> {
    const request = {
      model_name: model,
      id: options.id ?? '',
      parameters: options.parameters ?? {},
      inputs: inputs.map((t) => ({
        name: t.name, datatype: t.datatype, shape: t.shape,
        parameters: 'sharedMemory' in t ? sliceParameters(t.sharedMemory) : {},
      })),
      outputs: (options.outputs ?? []).map((o) => (typeof o === 'string' ? { name: o } : { name: o.name, parameters: sliceParameters(o.sharedMemory) })),
      raw_input_contents: inputs.filter((t): t is Tensor => !('sharedMemory' in t)).map(toRaw),
    };
    const res = await this.call('ModelInfer', request, options.timeoutMs, options.metadata);
    return {
      id: res.id,
      outputs: res.outputs.map((o, i) => ({
        name: o.name,
        datatype: o.datatype as Datatype,
        shape: o.shape.map(Number),
        data: fromRaw(o.datatype, res.raw_output_contents[i]),
      })),
    };
  }

  /** Register `byteSize` bytes at `offset` of the shared-memory object `key` as region `name`. */
  async registerSystemSharedMemory(name: string, key: string, byteSize: number, offset = 0): Promise<void> {
    await this.call('SystemSharedMemoryRegister', { name, key, offset: String(offset), byte_size: String(byteSize) });
  }

  /** Unregister one region, or every region when `name` is empty. */
  async unregisterSystemSharedMemory(name = ''): Promise<void> {
    await this.call('SystemSharedMemoryUnregister', { name });
  }

  /** Registered regions by name (one, or all when `name` is empty). */
  async systemSharedMemoryStatus(name = ''): Promise<Record<string, { name: string; key: string; offset: number; byteSize: number }>> {
    const res = await this.call('SystemSharedMemoryStatus', { name });
    return Object.fromEntries(Object.entries(res.regions).map(([k, r]) =>
      [k, { name: r.name, key: r.key, offset: Number(r.offset), byteSize: Number(r.byte_size) }]));
  }

  /**
   * Register GPU memory of this process (backend cuda servers): `rawHandle` is its CUDA IPC handle
   * (cudaIpcGetMemHandle, 64 bytes), `deviceId` the GPU it is on; inputs and outputs then name the
   * region as with system shared memory.
   */
  async registerCudaSharedMemory(name: string, rawHandle: Uint8Array, deviceId: number, byteSize: number): Promise<void> {
    await this.call('CudaSharedMemoryRegister', { name, raw_handle: rawHandle, device_id: String(deviceId), byte_size: String(byteSize) });
  }

  /** Unregister one CUDA region, or every one when `name` is empty. */
  async unregisterCudaSharedMemory(name = ''): Promise<void> {
    await this.call('CudaSharedMemoryUnregister', { name });
  }

  /** Registered CUDA regions by name (one, or all when `name` is empty). */
  async cudaSharedMemoryStatus(name = ''): Promise<Record<string, { name: string; deviceId: number; byteSize: number }>> {
    const res = await this.call('CudaSharedMemoryStatus', { name });
    return Object.fromEntries(Object.entries(res.regions as Record<string, { name: string; device_id: string; byte_size: string }>).map(([k, r]) =>
      [k, { name: r.name, deviceId: Number(r.device_id), byteSize: Number(r.byte_size) }]));
  }

  /**
   * Many independent requests to one model, at most `concurrency` in flight
   * at once (the server coalesces them into batches); results in input order.
   */
  async inferMany(model: string, requests: Tensor[][], options: InferOptions & { concurrency?: number } = {}): Promise<Tensor[][]> {
    const { concurrency = 16, ...perRequest } = options;
    const results: Tensor[][] = new Array(requests.length);
    let next = 0;
    const worker = async () => {
      while (next < requests.length) {
        const i = next++;
        results[i] = (await this.infer(model, requests[i], perRequest)).outputs;
      }
    };
    await Promise.all(Array.from({ length: Math.min(concurrency, requests.length) }, worker));
    return results;
  }

  /**
   * A ModelStreamInfer stream: write ModelInferRequest objects, read
   * ModelStreamInferResponse objects ({ error_message, infer_response }),
   * matched to requests by their `id`.
   */
  stream(): grpc.ClientDuplexStream<unknown, { error_message: string; infer_response: ModelInferResponse | null }> {
    const fn = this.#client.ModelStreamInfer as unknown as () => grpc.ClientDuplexStream<unknown, { error_message: string; infer_response: ModelInferResponse | null }>;
    return fn.call(this.#client);
  }

  close(): void {
    this.#client.close();
  }
}
