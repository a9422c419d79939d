/**
 * One inference, as it crosses threads: the request the main thread hands a device actor (and a
 * hook thread feeds), and the result that comes back. Defined here once; the device channel
 * (device.ts) carries them, the hook channel (hooks.ts) carries their tensors. The request path makes
 * them from the data plane's request (data-plane.ts), which the edges decode their protocols into.
 * Nothing here knows protobuf.
 *
 * Ownership: tensor bytes travel in `WireTensor.data`. The sender lists `data.buffer` in the
 * transfer list, so after postMessage the bytes belong to the receiver and the sender's view is
 * detached. Every buffer sent this way belongs to the one request (never Node's shared Buffer
 * pool, which cannot be transferred, nor a buffer another request's tensors are views of).
 */
import type { Datatype } from '../dtypes.js';
import type { InstanceKey } from '../model-spec.js';

/** A tensor's place in a registered shared-memory region, as it travels to the device actor. */
export interface RegionSlice {
  regionId: number;
  /** The region's registered name, for messages (a request for a region unregistered since its check names it). */
  name: string;
  key: string;
  /** The open descriptor the device maps from (the same process: threads share descriptors); -1 for a CUDA region. */
  fd: number;
  /**
   * A CUDA shared-memory region (Triton's cudasharedmemory): the GPU its memory is on, and the
   * client's CUDA IPC handle, which a device actor opens on its own GPU the first time it meets it.
   */
  cuda?: { gpu: number; handle: Uint8Array };
  regionOffset: number;
  regionByteSize: number;
  /** Within the region. */
  offset: number;
  byteSize: number;
}

/** A tensor in KServe's raw wire layout: row-major little-endian elements; BYTES elements length-prefixed. */
export interface WireTensor {
  name: string;
  datatype: Datatype;
  shape: number[];
  /** The bytes; empty when they are in shared memory (`shm`). */
  data: Uint8Array;
  /** Inputs: where the bytes are. Outputs: where they were written (nothing is returned inline). */
  shm?: RegionSlice;
}

/**
 * The frame of a request's outputs: the one buffer the device writes them into, for the edge to
 * send as it is, with `headroom` bytes free before the first output and `gap` bytes free before
 * each output (the first's after the headroom), which the edge fills with what its protocol puts
 * there (shared/data-plane.ts: the edge's OutputLayout). The device knows nothing of what that is.
 * ("Placement" is where a model lives: routing/.)
 */
export interface OutputFrame {
  headroom: number;
  gap: number;
}

/** One request for one execution of a loaded model: decoded, checked against its manifest. */
export interface InferenceRequest {
  /** The loaded version to run (from the registry's lease): a reload loads a new one beside the old. */
  instance: InstanceKey;
  /**
   * One tensor per executable input, in the manifest's order (the codec, or the hook check,
   * guarantees it); empty while a preprocess hook is still making them.
   */
  inputs: WireTensor[];
  /** Rows on the batch axis (1 for a model without one): what the scheduler packs into batches. */
  rows: number;
  /** Output names to return, in response order (never empty: the codec fills in every output). */
  outputs: string[];
  /** Per output: the shared-memory slice to write it into instead of returning it, or null. */
  outputRegions: (RegionSlice | null)[];
  /**
   * Write the outputs into one buffer laid out as the edge asked (its OutputLayout: for gRPC,
   * the response is framed around them in place), instead of each into a buffer of its own; null:
   * tensors of their own (hooks read them, or the edge encodes them itself).
   */
  frame: OutputFrame | null;
  /** The client's absolute deadline on the `nowMs` clock; Infinity if none. */
  deadlineMs: number;
  /** Triton's `priority`: its level, 1 the highest; absent or 0: the model's default (scheduler.ts). */
  priority?: number;
}

/** Where the time of one execution went, in nanoseconds (Triton's statistics vocabulary). */
export interface ExecutionTiming {
  computeInputNs: number;
  computeInferNs: number;
  computeOutputNs: number;
  /** Rows of the requests that rode in this execution. */
  batchRows: number;
  /** Rows actually executed: batchRows padded up to a compiled batch size. */
  executedBatchSize: number;
  /** How many requests rode in this execution. */
  requests: number;
  /** A cold execution: ms its model's weights took to come onto the device first (within computeInputNs). */
  weightLoadMs?: number;
  /** Its session had been closed under the session budget: ms its open took first (within computeInputNs). */
  sessionOpenMs?: number;
}

/**
 * What one request's inference produced. Its tensors' buffers belong to it alone (the device
 * copies a request's rows out of a coalesced batch's output before handing them over as tensors),
 * so whoever receives them may transfer them on without a copy.
 */
export interface InferenceResult {
  /** The outputs, in the order asked; views of `framed` when the request asked for a frame. */
  outputs: WireTensor[];
  /** The one buffer the outputs were written into (the request's `frame`), transferred whole. */
  framed?: Uint8Array;
  /** Time from the hand-over to the device until its execution started. */
  queueNs: number;
  /** The execution it rode in, shared with the other requests of its batch. */
  timing: ExecutionTiming;
}
