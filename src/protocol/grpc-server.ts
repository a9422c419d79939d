/**
 * The gRPC server's life, shared by a node and a gateway-only process: made with the node file's
 * message limits, bound to its address, and stopped gracefully (calls in flight get `graceMs` to
 * finish, then the rest are cut).
 */
import * as grpc from '@grpc/grpc-js';
import type { NodeConfig } from '../config/schema.js';

type Endpoints = NodeConfig['global']['endpoints'];

export function createGrpcServer(endpoints: Endpoints): grpc.Server {
  return new grpc.Server({
    'grpc.max_receive_message_length': endpoints.max_receive_message_bytes,
    'grpc.max_send_message_length': endpoints.max_send_message_bytes,
  });
}

/** Bind to endpoints.host:grpc_port; resolves to the port (the one chosen when grpc_port is 0). */
export function bindGrpcServer(server: grpc.Server, endpoints: Endpoints): Promise<number> {
  return new Promise((resolve, reject) => {
    server.bindAsync(`${endpoints.host}:${endpoints.grpc_port}`, grpc.ServerCredentials.createInsecure(), (err, port) => (err ? reject(err) : resolve(port)));
  });
}

/** Stop accepting calls, let those in flight finish for at most `graceMs`, then cut them. */
export function shutdownGrpcServer(server: grpc.Server | undefined, graceMs: number): Promise<void> {
  if (!server) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      server.forceShutdown();
      resolve();
    }, graceMs);
    server.tryShutdown(() => {
      clearTimeout(timer);
      resolve();
    });
  });
}
