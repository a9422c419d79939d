/**
 * The gRPC edge, written once for both process kinds: a node (node/server.ts)
 * and a gateway-only process (remote/gateway-server.ts) each plug their RPC
 * tables into it. The edge owns what every RPC crosses:
 *
 * - the server's life: made with the node file's message limits, bound to
 *   its address, stopped gracefully (calls in flight get the grace period);
 * - the handler wrapper: a handler is a plain (async) function of the
 *   request; its result becomes the reply and anything it throws becomes a
 *   status (errorToStatus; a status forwarded from a remote node passes
 *   through unchanged), its Stowage code in the trailers (error-code.ts),
 *   logged at error level only when INTERNAL. A throwing handler never
 *   crashes the server;
 * - admission and shedding (shared/admission.ts): an inference request whose tensors
 *   would take the bytes in flight past `max_inflight_bytes` (or the count
 *   past `max_concurrent_requests`, uncapped by default) is refused
 *   RESOURCE_EXHAUSTED before it reaches the request path;
 * - undecodable requests: bytes that are not a message of the RPC's type are
 *   answered INVALID_ARGUMENT (STOWAGE_UNDECODABLE) naming the type and what
 *   is wrong, by the same handler wrapper, never grpc-js's bare INTERNAL;
 * - the stream driver: each request of a stream is answered on it as it
 *   completes, a failure as that response's `error_message`; the stream ends
 *   once the client has ended it and every answer is written. An undecodable
 *   message breaks the stream: nothing after it is read, the requests before
 *   it are answered, and the stream ends at once with its status;
 * - cancellation: an inference gets an AbortSignal that fires if the client
 *   cancels; the listener is removed when the call settles (grpc-js emits
 *   'cancelled' as every stream closes, answered or not);
 * - each HTTP/2 stream before grpc-js sees it (`capGrpcDeadlines`, `widenHttp2Windows`, below):
 *   a deadline past a timer's reach cut to one it holds, and the receive windows widened to
 *   endpoints.http2_window_bytes, not 64 KiB;
 * - UNIMPLEMENTED for every method of the service without a handler;
 * - with tenant quotas, a ModelInfer call whose tenant is over its limit refused from its metadata,
 *   before its message is read (`earlyRefusal`): a flood over its quota costs the node less.
 *
 * The streams: Node's public `http2.server.stream.created` diagnostics channel hands every stream a
 * server accepts, with its headers and its session, to its subscribers first; two things grpc-js
 * (1.14) gives no option for are done there. Client deadlines past what a timer can hold: grpc-js
 * reads a call's `grpc-timeout` header as `(value × unit) | 0` milliseconds and arms a timer with
 * it: a deadline more than 2^31−1 ms (about 24.8 days) away wraps to a negative number and the call
 * fails DEADLINE_EXCEEDED at once (a client writing "never" as 30 days). A timeout longer than a
 * timer holds is cut to the longest one does, which no call will notice. The HTTP/2 receive
 * windows: grpc-js gives its server no option for them (`grpc-node.flow_control_window` is read by
 * its client only), so every connection keeps HTTP/2's 64 KiB windows: a client may send 64 KiB of
 * a request, then waits a round trip for the server's WINDOW_UPDATE, which throttles a 600 KiB
 * tensor about 3× on loopback. The first time a session of our port shows up, it is widened: the
 * connection window with `setLocalWindowSize`, and every stream's window (open ones included, as
 * RFC 9113 §6.9.2 requires) with a SETTINGS frame of `initialWindowSize`. The first request of a
 * connection starts at 64 KiB and grows as the client reads the SETTINGS; every later one starts
 * wide. The channel is process-wide, so sessions are told apart by their local port.
 */
import diagnostics from 'node:diagnostics_channel';
import type { Http2Session, ServerHttp2Stream } from 'node:http2';
import net from 'node:net';
import * as grpc from '@grpc/grpc-js';
import type { Logger } from 'pino';
import type { NodeConfig } from '../shared/config-schema.js';
import type { Admitted } from '../shared/data-plane.js';
import { errors, errorToStatus, isUndecodable, Status, StowageError } from '../shared/errors.js';
import { ERROR_CODE_KEY, errorCodeOf } from './error-code.js';
import type { Admission } from '../shared/admission.js';
import { drainedQuietly, drainThenClose } from '../shared/lifecycle.js';
import { MAX_TIMER_MS, MAX_TIMER_SECONDS } from '../shared/timers.js';

type Endpoints = NodeConfig['global']['endpoints'];

/**
 * The bytes a decoded inference request holds, for admission: a forwarded request's whole message
 * (a gateway's), else its raw_input_contents, plus 8 bytes per element of typed contents (an upper
 * bound: what JS arrays of numbers cost at least).
 */
function requestBytes(request: unknown): number {
  if (request instanceof Uint8Array) return request.byteLength;
  const r = request as { raw_input_contents?: Uint8Array[]; inputs?: { contents?: Record<string, unknown[] | undefined> | null }[] };
  let bytes = 0;
  for (const raw of r.raw_input_contents ?? []) bytes += raw.byteLength;
  for (const input of r.inputs ?? []) {
    for (const values of Object.values(input.contents ?? {})) if (Array.isArray(values)) bytes += values.length * 8;
  }
  return bytes;
}

/** The method whose calls are refused from their metadata when their tenant is over its quota. */
const MODEL_INFER_PATH = '/inference.GRPCInferenceService/ModelInfer';

/** A handler of a unary RPC: the request (and the call, for its deadline and metadata) to the reply. */
export type UnaryHandler<Req, Res> = (request: Req, call: grpc.ServerUnaryCall<Req, Res>) => Promise<Res> | Res;

/** A handler of one inference: like a unary handler, with the signal that fires if the client cancels. */
export type InferenceHandler<Req, Res> = (request: Req, call: grpc.ServerUnaryCall<Req, Res>, signal: AbortSignal, admitted: Admitted) => Promise<Res>;

/** One request of a stream, answered: its reply, or (on failure) the reply carrying the error. */
export interface StreamHandler<Req, Res> {
  answer: (request: Req, call: grpc.ServerDuplexStream<Req, Res>, signal: AbortSignal) => Promise<Res>;
  /** The reply that reports `details` for `request` (the stream lives on). */
  failed: (request: Req, details: string) => Res;
}

/** A status that came from a remote node's answer (a grpc-js client error): forwarded as it is. */
function isForwardedStatus(err: unknown): err is grpc.ServiceError {
  return typeof err === 'object' && err !== null && !(err instanceof StowageError)
    && typeof (err as { code?: unknown }).code === 'number' && typeof (err as { details?: unknown }).details === 'string';
}

/**
 * What a request deserializer gives, in place of throwing, for bytes it cannot decode: the
 * handler wrapper then answers with the error. (grpc-js would answer INTERNAL "Error deserializing
 * request" itself, on a stream at once and whatever the requests before it.)
 */
class Undecodable {
  constructor(readonly error: StowageError) {}
}

/** The error of a request whose bytes did not decode (undecodableAsValue), or null: a handler checks it first. */
export function undecodableError(request: unknown): StowageError | null {
  return request instanceof Undecodable ? request.error : null;
}

/** `definition` with every request deserializer returning an Undecodable instead of throwing. */
function undecodableAsValue(definition: grpc.ServiceDefinition): grpc.ServiceDefinition {
  return Object.fromEntries(Object.entries(definition).map(([name, method]) => {
    const deserialize = method.requestDeserialize;
    // '/inference.GRPCInferenceService/ModelInfer': the package is the service's name up to its last dot.
    const service = method.path.slice(1, method.path.lastIndexOf('/'));
    const message = (method as { requestType?: { type?: { name?: string } } }).requestType?.type?.name;
    const type = message ? `${service.slice(0, service.lastIndexOf('.'))}.${message}` : `${name} request`;
    return [name, {
      ...method,
      requestDeserialize: (bytes: Buffer) => {
        try {
          return deserialize(bytes);
        } catch (err) {
          return new Undecodable(errors.undecodable(name, type, (err as Error).message));
        }
      },
    }];
  }));
}

/**
 * A failure that ends a stream instead of answering one of its requests: a broken message, here or at the node it was
 * forwarded to.
 */
function breaksStream(err: unknown): boolean {
  if (err instanceof StowageError) return err.code === 'STOWAGE_UNDECODABLE';
  return isForwardedStatus(err) && err.code === Status.INVALID_ARGUMENT && isUndecodable(err.details);
}

/**
 * Whether the client of a call has gone already. grpc-js emits 'cancelled' only on a call whose
 * handler has started: a client that cancels while its message is still being read and decoded is
 * gone before then, and its call says nothing (`cancelled` stays false). The call's stream knows:
 * grpc-js's own check of it (checkCancelled, grpc-js 1.14's server call) is asked where it exists.
 */
export function callGone(call: { readonly cancelled: boolean }): boolean {
  if (call.cancelled) return true;
  const inner = (call as unknown as { call?: { checkCancelled?: () => boolean } }).call;
  return typeof inner?.checkCancelled === 'function' ? inner.checkCancelled() : false;
}

/**
 * How long, once every inference is answered at shutdown, open calls that are not inferences may take to end before
 * they are cut.
 */
const CLOSE_LINGER_MS = 500;

/**
 * At shutdown, once every inference is answered, how long the port stays open before it closes, and
 * again after each call refused meanwhile (at most DRAIN_QUIET_MAX_MS in all: lifecycle.ts
 * drainedQuietly; a call reset by the close instead was seen once in CI, 2026-11-28).
 */
const DRAIN_QUIET_MS = 100;
const DRAIN_QUIET_MAX_MS = 1000;

/** The call's absolute deadline in ms since the epoch; Infinity when the client set none. */
export function callDeadlineMs(call: { getDeadline(): grpc.Deadline }): number {
  const deadline = call.getDeadline();
  return deadline instanceof Date ? deadline.getTime() : deadline;
}

export class GrpcEdge {
  readonly admission: Admission;
  readonly #server: grpc.Server;
  readonly #endpoints: Endpoints;
  readonly #logger: Logger;
  #bound = false;
  #port = 0;
  #stopWidening: (() => void) | undefined;
  /** An edge thread's own listening socket, whose connections grpc-js takes through its injector. */
  #listener: net.Server | undefined;
  /** The connections it accepted (to drop at once: `abandon`). */
  readonly #sockets = new Set<net.Socket>();
  /** Shutting down: inference calls are refused, streams end once answered (stop()). */
  #draining = false;
  /** When a call was last refused for draining (Date.now()). */
  #refusedAtMs = 0;
  /** Each open stream's way to end once its requests are answered (at shutdown). */
  readonly #streams = new Set<() => void>();

  /** The metadata key that names a request's tenant (endpoints.tenant_key). */
  get tenantKey(): string {
    return this.#endpoints.tenant_key;
  }

  /** Status streams this thread keeps open at once (endpoints.max_status_streams). */
  get maxStatusStreams(): number {
    return this.#endpoints.max_status_streams;
  }

  /**
   * `admission`: the process's one count of inferences in flight, shared by every edge.
   * `earlyRefusal`: with tenant quotas, whether a call's tenant (its `tenant_key` metadata, absent:
   * undefined) is over its quota now (shared/admission.ts `tenantRefusal`); absent: no tenant quotas,
   * and no interceptor on any call.
   */
  constructor(endpoints: Endpoints, logger: Logger, admission: Admission, earlyRefusal?: (tenant: string | undefined) => StowageError | null) {
    this.#endpoints = endpoints;
    this.#logger = logger;
    this.admission = admission;
    capGrpcDeadlines(); // a client's deadline weeks away must not fail the call at once
    this.#server = new grpc.Server({
      'grpc.max_receive_message_length': endpoints.max_receive_message_bytes,
      'grpc.max_send_message_length': endpoints.max_send_message_bytes,
      // Channelz tracks every call for its introspection service, which Stowage does not serve.
      'grpc.enable_channelz': 0,
      ...(earlyRefusal ? { interceptors: [this.#tenantGate(earlyRefusal)] } : {}),
    });
  }

  /**
   * A ModelInfer call refused from its metadata when its tenant is over its quota, as grpc-js's own
   * auth interceptors refuse: its message is never read nor decoded (which, with the call's HTTP/2
   * stream, was most of a refusal's ~140 µs: docs/performance.md, *Tenant isolation by quotas*).
   * Its model is not known yet, so it counts in the quota's refusals, not in a model's failures.
   */
  #tenantGate(refusal: (tenant: string | undefined) => StowageError | null): grpc.ServerInterceptor {
    const key = this.#endpoints.tenant_key;
    return (method, call) => {
      if (method.path !== MODEL_INFER_PATH) return new grpc.ServerInterceptingCall(call);
      return new grpc.ServerInterceptingCall(call, {
        start: (next) => next({
          onReceiveMetadata: (metadata, pass) => {
            const tenant = metadata.get(key)[0];
            const refused = refusal(typeof tenant === 'string' ? tenant : undefined);
            if (refused) call.sendStatus(this.failure('ModelInfer', refused));
            else pass(metadata);
          },
        }),
      });
    };
  }

  /**
   * Map an error to its status and log it: what every handler answers with. The Stowage code rides
   * in the trailers (ERROR_CODE_KEY), so that a caller (a gateway deciding whether another node may
   * take the request) tells one RESOURCE_EXHAUSTED from another without reading the message.
   */
  failure(rpc: string, err: unknown): { code: grpc.status; details: string; metadata?: grpc.Metadata } {
    const forwarded = isForwardedStatus(err);
    const { code, details } = forwarded ? { code: err.code, details: err.details } : errorToStatus(err);
    this.#logger[code === grpc.status.INTERNAL ? 'error' : 'debug']({ rpc, code: grpc.status[code], err }, details);
    const stowageCode = forwarded ? errorCodeOf(err) : err instanceof StowageError ? err.code : undefined;
    if (!stowageCode) return { code, details };
    const metadata = new grpc.Metadata();
    metadata.set(ERROR_CODE_KEY, stowageCode);
    return { code, details, metadata };
  }

  unary<Req, Res>(rpc: string, fn: UnaryHandler<Req, Res>): grpc.handleUnaryCall<Req, Res> {
    return (call, callback) => {
      Promise.resolve()
        .then(() => {
          const undecodable = undecodableError(call.request);
          if (undecodable) throw undecodable;
          return fn(call.request, call);
        })
        .then((res) => callback(null, res), (err: unknown) => callback(this.failure(rpc, err)));
    };
  }

  /** A unary inference RPC: admitted (or shed), and cancelled with the client. */
  inference<Req, Res>(rpc: string, fn: InferenceHandler<Req, Res>): grpc.handleUnaryCall<Req, Res> {
    return this.unary<Req, Res>(rpc, async (request, call) => {
      if (this.#draining) throw this.#refuse();
      const bytes = requestBytes(request);
      this.admission.enter(bytes);
      const abort = new AbortController();
      const onCancelled = () => abort.abort();
      call.once('cancelled', onCancelled);
      if (callGone(call)) abort.abort(); // gone before this handler ran: 'cancelled' was never emitted
      try {
        return await fn(request, call, abort.signal, { bytes, inflightBytes: this.admission.inflightBytes });
      } finally {
        call.off('cancelled', onCancelled);
        this.admission.leave(bytes);
      }
    });
  }

  /** A bidirectional inference stream: one admission slot while open; every request answered on it. */
  stream<Req, Res>(rpc: string, handler: StreamHandler<Req, Res>): grpc.handleBidiStreamingCall<Req, Res> {
    return (call) => {
      try {
        if (this.#draining) throw this.#refuse();
        this.admission.enter();
      } catch (err) {
        call.emit('error', this.failure(rpc, err));
        return;
      }
      const stream = new InferStream(handler, call, {
        failure: (err) => this.failure(rpc, err),
        draining: () => this.#draining,
        left: () => {
          this.admission.leave();
          this.#streams.delete(drain);
        },
      });
      // At shutdown the stream ends as if its client had ended it: what it asked is answered first.
      const drain = () => stream.end();
      this.#streams.add(drain);
      stream.start();
    };
  }

  /**
   * `end` is called at shutdown (stop), unless the function returned is called first: how a
   * server stream that answers on its own (WatchModelControlStatus) ends with the edge.
   */
  endsAtStop(end: () => void): () => void {
    this.#streams.add(end);
    return () => this.#streams.delete(end);
  }

  /** Register a service: `table`'s handlers, and UNIMPLEMENTED (naming the RPC) for every other method. */
  addService(definition: grpc.ServiceDefinition, table: Record<string, grpc.UntypedHandleCall>): void {
    const handlers: grpc.UntypedServiceImplementation = {};
    for (const [name, method] of Object.entries(definition)) {
      const handler = table[name];
      if (handler) handlers[name] = handler;
      else if (method.requestStream || method.responseStream) {
        handlers[name] = (call: grpc.ServerDuplexStream<unknown, unknown>) => call.emit('error', this.failure(name, errors.unimplementedRpc(name)));
      } else {
        handlers[name] = this.unary(name, () => {
          throw errors.unimplementedRpc(name);
        });
      }
    }
    this.#server.addService(undecodableAsValue(definition), handlers);
  }

  /**
   * Bind to endpoints.host:`port` (endpoints.grpc_port by default); resolves to the port (the one
   * chosen when it is 0). `reusePort`: an edge thread, listening beside the other edges on the same
   * port (SO_REUSEPORT) with a socket of its own, each accepted connection handed to grpc-js.
   */
  start({ port = this.#endpoints.grpc_port, reusePort = false }: { port?: number; reusePort?: boolean } = {}): Promise<number> {
    // Subscribed before binding, so that no connection is missed; the port is read per connection.
    this.#stopWidening ??= widenHttp2Windows(() => this.#port, this.#endpoints.http2_window_bytes);
    if (reusePort) {
      const injector = this.#server.createConnectionInjector(grpc.ServerCredentials.createInsecure());
      const listener = net.createServer((socket) => {
        this.#sockets.add(socket);
        socket.once('close', () => this.#sockets.delete(socket));
        injector.injectConnection(socket);
      });
      return new Promise((resolve, reject) => {
        listener.once('error', reject);
        listener.listen({ port, host: this.#endpoints.host, reusePort: true }, () => {
          listener.off('error', reject);
          this.#listener = listener;
          this.#bound = true;
          this.#port = (listener.address() as net.AddressInfo).port;
          resolve(this.#port);
        });
      });
    }
    return new Promise((resolve, reject) => {
      this.#server.bindAsync(`${this.#endpoints.host}:${port}`, grpc.ServerCredentials.createInsecure(), (err, port) => {
        if (err) return reject(err);
        this.#bound = true;
        this.#port = port;
        resolve(port);
      });
    });
  }

  /**
   * Drop everything at once, for an edge thread about to die of an error: its port closes and
   * every connection it accepted is destroyed, so that nothing is read from them while the thread
   * ends. (Node 24 aborts the whole process when a worker thread is torn down while HTTP/2 data is
   * still arriving on one of its sessions: `onread->IsFunction()` in stream_base.cc.)
   */
  abandon(): void {
    this.#listener?.close();
    for (const socket of this.#sockets) socket.destroy();
    this.#server.forceShutdown();
  }

  /** A call refused while draining: UNAVAILABLE, and the close put off a moment (DRAIN_QUIET_MS). */
  #refuse(): Error {
    this.#refusedAtMs = Date.now();
    return errors.shuttingDown();
  }

  /**
   * Drain, then stop: new inference calls are refused UNAVAILABLE at once while the port stays
   * open (health probes still connect and hear NOT_SERVING; metadata answers), the calls in flight
   * finish and each open stream ends once its requests are answered; then the port closes. What is
   * still running when `graceMs` is up is cut.
   */
  async stop(graceMs: number): Promise<void> {
    this.#stopWidening?.();
    if (!this.#bound) return;
    this.#draining = true;
    for (const drain of this.#streams) drain();
    const busy = drainedQuietly(() => this.admission.inflight, () => this.#refusedAtMs, DRAIN_QUIET_MS, DRAIN_QUIET_MAX_MS);
    await drainThenClose(Date.now() + graceMs, busy, (done) => {
      this.#listener?.close();
      this.#server.tryShutdown(() => done());
      // Once every inference is answered, what is still open is no work of ours: a health Watch
      // whose client never finished asking (its handler never ran, so close() could not end it),
      // a call still arriving. It must not hold the process, port closed, for the whole grace.
      setTimeout(() => {
        this.#server.forceShutdown();
        done();
      }, CLOSE_LINGER_MS).unref();
    }, () => this.#server.forceShutdown());
  }
}

/** What a stream needs of its edge. */
interface StreamEdge {
  /** An error as the status and details the client gets. */
  failure(err: unknown): { code: grpc.status; details: string };
  /** The edge is shutting down: what the stream asks from now on is refused. */
  draining(): boolean;
  /** The stream is over (its admission place given back); told once. */
  left(): void;
}

/**
 * One ModelStreamInfer stream's life: each request answered on the stream as it comes (its
 * failure too, as its own message), the stream ended once the client has ended it (or the edge
 * drains) and every request asked is answered, or with the status of a message that broke it
 * (undecodable, or an error that breaks streams) once the requests before it are answered.
 */
class InferStream<Req, Res> {
  readonly #handler: StreamHandler<Req, Res>;
  readonly #call: grpc.ServerDuplexStream<Req, Res>;
  readonly #edge: StreamEdge;
  readonly #abort = new AbortController();
  #pending = 0;
  #ended = false;
  #left = false;
  /** The status of the message that broke the stream: it ends with it once the requests before are answered. */
  #broken: { code: grpc.status; details: string } | undefined;

  constructor(handler: StreamHandler<Req, Res>, call: grpc.ServerDuplexStream<Req, Res>, edge: StreamEdge) {
    this.#handler = handler;
    this.#call = call;
    this.#edge = edge;
  }

  start(): void {
    const call = this.#call;
    const gone = () => {
      this.#abort.abort();
      this.#leave();
    };
    call.on('cancelled', gone);
    call.on('error', gone);
    if (callGone(call)) gone(); // gone before this handler ran: nothing it sent is answered
    call.on('data', (request: Req | Undecodable) => this.#request(request));
    call.on('end', () => this.end());
  }

  /** The client ended the stream (or the edge drains): it ends once what it asked is answered. */
  end(): void {
    this.#ended = true;
    this.#finish();
  }

  #leave(): void {
    if (!this.#left) this.#edge.left();
    this.#left = true;
  }

  #finish(): void {
    if (this.#pending > 0 || this.#left) return;
    if (this.#broken) {
      this.#leave();
      this.#call.emit('error', this.#broken); // grpc-js writes what is queued, then this status
    } else if (this.#ended) {
      this.#leave();
      this.#call.end();
    }
  }

  #request(request: Req | Undecodable): void {
    if (this.#broken || this.#left) return; // nothing after a broken message is read
    const handler = this.#handler;
    if (this.#edge.draining() && !(request instanceof Undecodable)) {
      // Asked after shutdown began: answered on the stream, refused.
      this.#call.write(handler.failed(request, this.#edge.failure(errors.shuttingDown()).details));
      return;
    }
    if (request instanceof Undecodable) {
      this.#broken ??= this.#edge.failure(request.error);
      this.#finish();
      return;
    }
    this.#pending++;
    Promise.resolve()
      .then(() => handler.answer(request, this.#call, this.#abort.signal))
      .then(
        (reply) => reply,
        (err: unknown) => {
          if (!breaksStream(err)) return handler.failed(request, this.#edge.failure(err).details);
          this.#broken ??= this.#edge.failure(err);
          return undefined;
        },
      )
      .then((reply) => {
        if (!this.#left && reply !== undefined) this.#call.write(reply);
      })
      .finally(() => {
        this.#pending--;
        this.#finish();
      });
  }
}

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
