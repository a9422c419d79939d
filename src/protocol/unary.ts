/**
 * The gRPC edge's one way to answer: a handler is a plain (async) function of the request; its
 * result becomes the reply and anything it throws becomes a status (errorToStatus), logged at
 * error level only when it is INTERNAL. A throwing handler never crashes the server.
 */
import * as grpc from '@grpc/grpc-js';
import type { Logger } from 'pino';
import { errorToStatus } from '../errors.js';

export type UnaryHandler<Req, Res> = (request: Req, call: grpc.ServerUnaryCall<Req, Res>) => Promise<Res> | Res;

/** Map an error to its status and log it: what every handler answers with. */
export function logFailure(logger: Logger, rpc: string, err: unknown): { code: grpc.status; details: string } {
  const { code, details } = errorToStatus(err);
  logger[code === grpc.status.INTERNAL ? 'error' : 'debug']({ rpc, code: grpc.status[code], err }, details);
  return { code, details };
}

export function unary<Req, Res>(rpc: string, logger: Logger, fn: UnaryHandler<Req, Res>): grpc.handleUnaryCall<Req, Res> {
  return (call, callback) => {
    Promise.resolve()
      .then(() => fn(call.request, call))
      .then((res) => callback(null, res), (err: unknown) => callback(logFailure(logger, rpc, err)));
  };
}
