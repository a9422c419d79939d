/**
 * What the gRPC server does to each HTTP/2 stream before grpc-js sees it. Node's public
 * `http2.server.stream.created` diagnostics channel hands every stream a server accepts, with its
 * headers and its session, to its subscribers first; two things grpc-js (1.14) gives no option for
 * are done there.
 *
 * Client deadlines past what a timer can hold: grpc-js reads a call's `grpc-timeout` header as
 * `(value × unit) | 0` milliseconds and arms a timer with it: a deadline more than 2^31−1 ms (about
 * 24.8 days) away wraps to a negative number and the call fails DEADLINE_EXCEEDED at once (a client
 * writing "never" as 30 days). A timeout longer than a timer holds is cut to the longest one does,
 * which no call will notice.
 *
 * The HTTP/2 receive windows: grpc-js gives its server no option for them
 * (`grpc-node.flow_control_window` is read by its client only), so every connection keeps HTTP/2's
 * 64 KiB windows: a client may send 64 KiB of a request, then waits a round trip for the server's
 * WINDOW_UPDATE, which throttles a 600 KiB tensor about 3× on loopback. The first time a session of
 * our port shows up, it is widened: the connection window with `setLocalWindowSize`, and every
 * stream's window (open ones included, as RFC 9113 §6.9.2 requires) with a SETTINGS frame of
 * `initialWindowSize`. The first request of a connection starts at 64 KiB and grows as the client
 * reads the SETTINGS; every later one starts wide. The channel is process-wide, so sessions are told
 * apart by their local port.
 */
import diagnostics from 'node:diagnostics_channel';
import type { Http2Session, ServerHttp2Stream } from 'node:http2';
import { MAX_TIMER_MS, MAX_TIMER_SECONDS } from '../shared/timers.js';

const CHANNEL = 'http2.server.stream.created';

/** gRPC's TimeoutValue: up to 8 digits and a unit (PROTOCOL-HTTP2.md). */
const TIMEOUT = /^\s*(\d{1,8})\s*([HMSmun])\s*$/;
const UNIT_MS: Record<string, number> = { H: 3_600_000, M: 60_000, S: 1000, m: 1, u: 1e-3, n: 1e-6 };

/** A `grpc-timeout` value as one timer holds it: the value itself when it fits, else the longest that does. */
export function cappedTimeout(value: string): string {
  const match = TIMEOUT.exec(value);
  if (!match) return value; // grpc-js refuses it itself, saying so
  return Number(match[1]) * UNIT_MS[match[2]] > MAX_TIMER_MS ? `${MAX_TIMER_SECONDS}S` : value;
}

let capping = false;

/** Cap every gRPC server stream's deadline on this thread from now on (once per thread is enough). */
export function capGrpcDeadlines(): void {
  if (capping) return;
  capping = true;
  diagnostics.subscribe(CHANNEL, (message) => {
    const { headers } = message as { headers?: Record<string, string | string[] | undefined> };
    const timeout = headers?.['grpc-timeout'];
    if (typeof timeout === 'string') headers!['grpc-timeout'] = cappedTimeout(timeout);
  });
}

/** HTTP/2's largest window (RFC 9113 §6.9.1). */
export const MAX_WINDOW_BYTES = 2 ** 31 - 1;

/**
 * Widen the receive windows of every connection to the server on `port()` (read when a
 * connection's first stream arrives, so the port may be bound after this call) to `bytes`, per
 * stream and for the connection. Returns the function that stops widening new connections.
 */
export function widenHttp2Windows(port: () => number, bytes: number): () => void {
  const window = Math.min(Math.max(bytes, 65_535), MAX_WINDOW_BYTES);
  const widened = new WeakSet<Http2Session>();
  const onStream = (message: unknown) => {
    const { session } = (message as { stream: ServerHttp2Stream }).stream;
    if (!session || widened.has(session) || session.socket?.localPort !== port()) return;
    widened.add(session);
    if (session.destroyed || session.closed) return;
    session.setLocalWindowSize(window);
    session.settings({ initialWindowSize: window });
  };
  diagnostics.subscribe(CHANNEL, onStream);
  return () => diagnostics.unsubscribe(CHANNEL, onStream);
}
