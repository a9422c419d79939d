/**
 * The gRPC server's HTTP/2 receive windows. grpc-js (1.14) gives its server no option for them
 * (`grpc-node.flow_control_window` is read by its client only), so every connection keeps HTTP/2's
 * 64 KiB windows: a client may send 64 KiB of a request, then waits a round trip for the server's
 * WINDOW_UPDATE, which throttles a 600 KiB tensor about 3× on loopback.
 *
 * Node's public `http2.server.stream.created` diagnostics channel reports every stream a server
 * accepts, with its session. The first time a session of our port shows up, it is widened: the
 * connection window with `setLocalWindowSize`, and every stream's window (open ones included, as
 * RFC 9113 §6.9.2 requires) with a SETTINGS frame of `initialWindowSize`. The first request of a
 * connection starts at 64 KiB and grows as the client reads the SETTINGS; every later one starts wide.
 * The channel is process-wide, so sessions are told apart by their local port.
 */
import diagnostics from 'node:diagnostics_channel';
import type { Http2Session, ServerHttp2Stream } from 'node:http2';

const CHANNEL = 'http2.server.stream.created';

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
