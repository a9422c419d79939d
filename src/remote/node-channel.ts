/**
 * A gateway's gRPC channel to one node, and a unary call over it with raw bytes both ways: what the
 * main thread forwards requests and probes health on (remote-node.ts), and what the placement thread
 * reads status on (node-status.ts), each a channel of its own.
 */
import * as grpc from '@grpc/grpc-js';

const raw = (b: Buffer) => b;

/** `windowBytes`: the HTTP/2 receive window for the node's answers (endpoints.http2_window_bytes); `options` added. */
export function nodeChannel(address: string, windowBytes: number, options: grpc.ChannelOptions = {}): grpc.Client {
  // Reconnect quickly: a node that comes back should be found within the health interval.
  return new grpc.Client(address, grpc.credentials.createInsecure(), {
    'grpc.initial_reconnect_backoff_ms': 200,
    'grpc.max_reconnect_backoff_ms': 1000,
    'grpc.max_receive_message_length': -1,
    'grpc.max_send_message_length': -1,
    'grpc-node.flow_control_window': windowBytes,
    ...options,
  });
}

/** A server stream: `request`'s bytes out, each answer's bytes as a `data` event. */
export function serverStreamRaw(client: grpc.Client, path: string, request: Buffer): grpc.ClientReadableStream<Buffer> {
  return client.makeServerStreamRequest(path, raw, raw, request, new grpc.Metadata(), {});
}

/** One unary call: `request`'s bytes out, the answer's bytes back (rejects with the call's error). */
export function unaryRaw(client: grpc.Client, path: string, request: Buffer, metadata: grpc.Metadata, deadline: grpc.Deadline): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    client.makeUnaryRequest(path, raw, raw, request, metadata, { deadline }, (err, res) => (err ? reject(err) : resolve(res as Buffer)));
  });
}
