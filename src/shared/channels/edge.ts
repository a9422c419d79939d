/**
 * The channel between the main thread and an edge thread (actors/edge/): each edge terminates
 * gRPC and REST on the node's ports (the kernel spreads connections over the edges), decodes,
 * admits and encodes, and hands the main thread what only it may answer: every operation of
 * protocol/operations.ts by name, and every inference as the data plane's request
 * (data-plane.ts), whose answer comes back to the edge that asked. Types only; both sides
 * `import type` it. Each side sends what one event-loop turn produced as one array of these
 * (shared/outbox.ts).
 *
 * Ownership: an inference's inline bytes travel with it, their ArrayBuffers transferred (an edge
 * copies bytes its request does not own into a buffer of their own first, so nothing it keeps is
 * detached); its answer's output buffers come back transferred the same way.
 */
import type { ErrorData } from '../errors.js';
import type { DataPlaneRequest, InferenceAnswer, InferOptions } from '../data-plane.js';

/** What an edge thread starts with (its workerData). */
export interface EdgeStart {
  /** 0, 1, ...: the edge's number in logs and metrics. */
  edge: number;
  /** The node file's endpoints section. */
  endpoints: unknown;
  /** The ports to listen on (with SO_REUSEPORT, beside the other edges); 0: a free one, reported back. */
  ports: { grpc: number; http: number };
  /** The admission's shared counters (protocol/admission.ts). */
  admission: SharedArrayBuffer;
  logLevel: string;
}

export type ToEdge =
  /** The reply to `call` `id`. */
  | { type: 'reply'; id: number; reply: unknown }
  /** The answer to `infer` `id`, its output buffers transferred. */
  | { type: 'answer'; id: number; answer: InferenceAnswer }
  /** `call` or `infer` `id` failed. */
  | { type: 'failed'; id: number; error: ErrorData }
  /** A health status may have changed: Watch streams look again. */
  | { type: 'health' }
  /** The log level changed (LogSettings). */
  | { type: 'logLevel'; level: string }
  /** Shutdown: refuse new inferences, let those in flight finish within `graceMs`, close the ports, answer `drained`. */
  | { type: 'drain'; graceMs: number };

export type FromEdge =
  /** Listening on these ports: the process's ports, when the first edge chose them. */
  | { type: 'listening'; ports: { grpc: number; http: number } }
  /** An operation of protocol/operations.ts by name, answered `reply` or `failed`. */
  | { type: 'call'; id: number; op: string; request: unknown }
  /** An inference for the pipeline, its inline buffers transferred; answered `answer` or `failed`. */
  | { type: 'infer'; id: number; request: DataPlaneRequest; options: Omit<InferOptions, 'signal'> }
  /** The client of inference `id` went away: cancel it. */
  | { type: 'cancel'; id: number }
  /** The ports are closed and nothing is in flight here any more. */
  | { type: 'drained' };
