/**
 * WatchModelControlStatus (proto/control.proto) on one gRPC edge: the versioned status report a
 * pooled gateway reads, sent as a stream. A gateway that read ModelControlStatus at every check made
 * one call per node per check, answered with nothing new by a calm fleet; at 64 nodes that call was
 * most of what a check cost it (docs/performance.md). On the stream the node answers at once, then
 * once per window, shortly after the wall-clock boundary where its load windows roll
 * (node/load-windows.ts), so every gateway holds the new window's rows before the checks it runs
 * halfway through the window. An answer that says nothing changed is still sent: it is how the
 * gateway knows the node's status path answers (a stream silent past a window is a failed read).
 *
 * Each answer is the ModelControlStatus operation's, asked since the version the last one gave, on
 * whichever thread holds the stream (an edge thread asks the main thread, as for a unary read).
 */
import type * as grpc from '@grpc/grpc-js';
import { undecodableError, type GrpcEdge } from './edge.js';
import { errors } from '../shared/errors.js';
import type { Operations } from '../shared/operations.js';

const RPC = 'WatchModelControlStatus';

interface WatchRequest {
  name: string;
  window_seconds: number;
  active_only?: boolean;
  versioned?: boolean;
  since_version?: string | number;
}

/** The shortest window a stream answers at (a tighter loop is no status report, only load). */
const MIN_WINDOW_SECONDS = 0.05;

/**
 * How long after a window's boundary its answer is sent: past the boundary, so the answer is the
 * new window's; well before its middle, where the gateways read.
 */
export function answerOffsetMs(lengthMs: number): number {
  return Math.min(100, lengthMs / 10);
}

/** The ms from `nowMs` to the next answer: the next boundary of `lengthMs`, plus the offset. */
export function msToNextAnswer(nowMs: number, lengthMs: number): number {
  const offset = answerOffsetMs(lengthMs);
  const intoWindow = nowMs % lengthMs;
  return intoWindow < offset ? offset - intoWindow : lengthMs - intoWindow + offset;
}

function refusal(req: WatchRequest): string | null {
  if (!req.versioned || !req.active_only || req.name !== '') {
    return 'WatchModelControlStatus streams the versioned report of every model: set versioned and active_only, and leave name empty';
  }
  if (!(req.window_seconds >= MIN_WINDOW_SECONDS)) return `window_seconds must be at least ${MIN_WINDOW_SECONDS} on a stream, got ${req.window_seconds}`;
  return null;
}

export function statusWatch(edge: GrpcEdge, ops: Operations): grpc.handleServerStreamingCall<WatchRequest, unknown> {
  // Streams open on this thread: each holds a timer and is answered once per window, so a client
  // that opens them without end would grow both; past the cap a new one is refused.
  let open = 0;
  return (call) => {
    const req = call.request;
    const undecodable = undecodableError(req);
    const refused = undecodable ? null : refusal(req);
    if (undecodable || refused) {
      call.emit('error', edge.failure(RPC, undecodable ?? errors.invalidRequest(refused!)));
      return;
    }
    if (open >= edge.maxStatusStreams) {
      call.emit('error', edge.failure(RPC, errors.tooManyStatusStreams(edge.maxStatusStreams)));
      return;
    }
    open++;
    const lengthMs = req.window_seconds * 1000;
    let since = Number(req.since_version ?? 0) || 0;
    let timer: NodeJS.Timeout | undefined;
    let ended = false;
    const end = () => {
      if (ended) return;
      ended = true;
      open--;
      clearTimeout(timer);
      untrack();
    };
    // At shutdown the stream ends (the client sees its end, not an error).
    const untrack = edge.endsAtStop(() => {
      end();
      call.end();
    });
    call.on('cancelled', end);
    const answer = async () => {
      try {
        const reply = await ops.ModelControlStatus({ ...req, since_version: since } as WatchRequest);
        if (ended) return;
        since = Number(reply.report_version);
        call.write(reply);
        timer = setTimeout(() => void answer(), msToNextAnswer(Date.now(), lengthMs));
      } catch (err) {
        if (ended) return;
        end();
        call.emit('error', edge.failure(RPC, err));
      }
    };
    void answer();
  };
}
