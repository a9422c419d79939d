/**
 * The HTTP/REST edge (KServe V2 REST with Triton's extensions) on `endpoints.http_port`: Node's
 * own http server (no framework: the routes are a dozen patterns, and a framework's per-request
 * cost would exceed what this layer does). It owns what every REST call crosses:
 *
 * - body limits, checked before anything is held: JSON (a route's body, an inference's JSON
 *   header) up to `endpoints.max_json_body_bytes` (64 MiB, Triton's --http-max-input-size), an
 *   inference's binary tensor bytes up to `max_receive_message_bytes`. A body refused by its
 *   Content-Length is refused before it is read, a chunked or compressed one as soon as it passes
 *   the limit, with 413 and `Connection: close`; the rest of what the client sends is read and
 *   dropped for a moment first, so it reads the answer rather than a reset;
 * - `Content-Encoding: gzip | deflate` (tritonclient's request_compression_algorithm), inflated as
 *   it arrives, every limit applied to the inflated bytes (a zip bomb is a 413, not memory);
 * - admission: an inference's body is counted against the gRPC edge's Admission as it arrives
 *   (by its Content-Length at once when it has one), so bytes in flight are counted across both
 *   protocols before they are held, and a request past them is refused 429 without being read;
 *   with tenant quotas, an inference whose tenant is over its quota is refused 429 from its
 *   headers, its body drained unread (`tenantGate`);
 * - time: headers in `headers_timeout` (10 s, checked every second), a whole request in
 *   `endpoints.http_request_timeout_seconds`; a slow body is answered 408 and closed;
 * - errors: a StowageError's gRPC status mapped to the HTTP status Triton's HTTP endpoint uses
 *   (INVALID_ARGUMENT 400, NOT_FOUND 404, UNAVAILABLE 503, ...), the body `{"error": "..."}`;
 *   anything unexpected is 500, logged; nothing a client sends crashes the process; a malformed
 *   request after good ones on one connection is refused once they are answered;
 * - cancellation: a client that disconnects aborts its inference (the request path's signal).
 */
import http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { createGunzip, createInflate, type Gunzip, type Inflate } from 'node:zlib';
import type { Logger } from 'pino';
import { errors, errorToStatus, Status, StowageError } from '../shared/errors.js';
import { ERROR_CODE_KEY } from './error-code.js';
import type { Admission } from '../shared/admission.js';
import { readJsonBody } from './rest-tensors.js';
import { RawJson, type JsonObject } from './json-reader.js';
import { drainThenClose } from '../shared/lifecycle.js';

/** A route's answer: JSON, or bytes with headers (an inference response: pieces written in order, never joined). */
export type RestReply = { json: unknown; status?: number } | { body: Buffer | Buffer[]; headers: Record<string, string>; status?: number };

export interface RestRequest {
  method: string;
  /** The path's captures (model name, version, region name), decoded. */
  params: string[];
  /** The body as sent, inflated when it came compressed. */
  body: Buffer;
  headers: http.IncomingHttpHeaders;
  /** Fires if the client goes away before the answer. */
  signal: AbortSignal;
  /** An inference: what admission saw (its bytes, the bytes in flight with it). */
  admitted?: { bytes: number; inflightBytes: number };
}

export interface RestRoute {
  method: 'GET' | 'POST';
  /** Matched against the path (no query string); captures become `params`. */
  pattern: RegExp;
  /** An inference: its body may carry binary tensors, and is admitted by its bytes, shed like gRPC's. */
  inference?: boolean;
  handle: (req: RestRequest) => Promise<RestReply> | RestReply;
}

/** Triton's HTTP status for each gRPC status (its HTTP endpoint maps its errors the same way). */
const HTTP_STATUS: Partial<Record<number, number>> = {
  [Status.INVALID_ARGUMENT]: 400,
  [Status.FAILED_PRECONDITION]: 400,
  [Status.NOT_FOUND]: 404,
  [Status.ALREADY_EXISTS]: 409,
  [Status.RESOURCE_EXHAUSTED]: 429,
  [Status.CANCELLED]: 499,
  [Status.UNIMPLEMENTED]: 501,
  [Status.UNAVAILABLE]: 503,
  [Status.DEADLINE_EXCEEDED]: 504,
};

/** What a refused body's client may still send is read and dropped for this long before the connection closes. */
const LINGER_MS = 2000;

export interface HttpEdgeOptions {
  host: string;
  port: number;
  /** Listen beside other edges on the same port (SO_REUSEPORT: an edge thread, actors/edge/). */
  reusePort?: boolean;
  /** An inference body's bytes in all (endpoints.max_receive_message_bytes). */
  maxBodyBytes: number;
  /** JSON: a route's body, an inference's JSON header (endpoints.max_json_body_bytes). */
  maxJsonBytes: number;
  /** A whole request, headers and body (endpoints.http_request_timeout_seconds). */
  requestTimeoutMs: number;
  admission: Admission;
  logger: Logger;
  /**
   * With tenant quotas: the header naming a request's tenant (endpoints.tenant_key) and whether that
   * tenant is over its quota now (shared/admission.ts `tenantRefusal`): an inference refused so is
   * answered before its body is read or parsed (its bytes are drained, never kept).
   */
  tenantGate?: { key: string; refusal: (tenant: string | undefined) => StowageError | null };
}

export class HttpEdge {
  readonly #server: http.Server;
  readonly #routes: RestRoute[] = [];
  readonly #o: HttpEdgeOptions;
  /** Shutting down: inferences are refused (stop()). */
  #draining = false;
  /** Requests being served, all connections. */
  #inflight = 0;
  /** Requests each connection has in flight, and a client error that waits for them to be answered. */
  readonly #connections = new WeakMap<Socket, Connection>();

  constructor(options: HttpEdgeOptions) {
    this.#o = options;
    this.#server = http.createServer({
      // Node requires headers to be due no later than the whole request.
      headersTimeout: Math.min(10_000, options.requestTimeoutMs),
      requestTimeout: options.requestTimeoutMs,
      // How often Node checks those two: its default (30 s) let a 10 s header timeout cut at 17-30 s.
      connectionsCheckingInterval: 1000,
      maxHeaderSize: 16 * 1024,
    }, (req, res) => {
      this.#serve(req, res).catch((err: unknown) => this.#fail(req, res, err));
    });
    this.#server.on('clientError', (err: NodeJS.ErrnoException, socket: Socket) => this.#clientError(err, socket));
  }

  add(routes: RestRoute[]): void {
    this.#routes.push(...routes);
  }

  /** Bind; resolves to the port (the one chosen when port is 0). */
  start(): Promise<number> {
    return new Promise((resolve, reject) => {
      this.#server.once('error', reject);
      this.#server.listen({ port: this.#o.port, host: this.#o.host, reusePort: this.#o.reusePort === true }, () => {
        this.#server.off('error', reject);
        resolve((this.#server.address() as AddressInfo).port);
      });
    });
  }

  /**
   * Drop everything at once, for an edge thread about to die of an error: the port closes and
   * every connection is destroyed, so that nothing is read from them while the thread ends.
   */
  abandon(): void {
    this.#server.close();
    this.#server.closeAllConnections();
  }

  /**
   * Drain, then stop: new inferences are refused 503 at once while the port stays open (health
   * and metadata still answer: /v2/health/ready says not ready), the requests in flight (on either
   * edge) finish, then the port closes and idle connections with it. What is still running when `graceMs` is
   * up is cut.
   */
  async stop(graceMs: number): Promise<void> {
    this.#draining = true;
    // Open while any request of the process is in flight (the admission counts both edges'
    // inferences), so probes keep connecting until the last one is answered.
    await drainThenClose(Date.now() + graceMs, () => this.#inflight > 0 || this.#o.admission.inflight > 0, (done) => {
      this.#server.close(() => done());
      this.#server.closeIdleConnections();
    }, () => this.#server.closeAllConnections());
  }

  async #serve(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const connection = this.#connection(req.socket);
    connection.inflight.add(req);
    this.#inflight++;
    // The client going at any point, while its body is read and parsed too, cancels the request:
    // one that went before it reached a device is never run (nor counted a success).
    const abort = new AbortController();
    res.once('close', () => {
      this.#inflight--;
      this.#answered(req);
      if (!res.writableFinished) abort.abort();
    });
    const path = (req.url ?? '/').split('?')[0];
    const method = req.method ?? 'GET';
    let match: RegExpExecArray | null = null;
    const route = this.#routes.find((r) => r.method === method && (match = r.pattern.exec(path)) !== null);
    if (!route || !match) {
      const other = this.#routes.some((r) => r.pattern.test(path));
      throw other ? new RestError(405, `${method} is not allowed on ${path}`) : new RestError(404, `no such endpoint: ${method} ${path}`);
    }
    const params = (match as RegExpExecArray).slice(1).map((p) => decodePathPart(p));
    if (this.#draining && route.inference) throw errors.shuttingDown();
    const gate = route.inference ? this.#o.tenantGate : undefined;
    if (gate) {
      const tenant = req.headers[gate.key];
      const refused = gate.refusal(typeof tenant === 'string' ? tenant : undefined);
      if (refused) {
        req.resume();
        throw refused;
      }
    }
    const body = method === 'POST' ? await this.#readBody(req, route) : (req.resume(), { bytes: Buffer.alloc(0), admitted: -1 });
    try {
      const admission = body.admitted >= 0 ? { admitted: { bytes: body.admitted, inflightBytes: this.#o.admission.inflightBytes } } : {};
      const reply = await route.handle({ method, params, body: body.bytes, headers: req.headers, signal: abort.signal, ...admission });
      if ('json' in reply) {
        const text = JSON.stringify(reply.json);
        res.writeHead(reply.status ?? 200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
        res.end(text);
      } else {
        const pieces = Array.isArray(reply.body) ? reply.body : [reply.body];
        res.writeHead(reply.status ?? 200, { ...reply.headers, 'content-length': pieces.reduce((n, b) => n + b.length, 0) });
        // Corked: the pieces leave together (writev) as they are, when end() uncorks.
        res.cork();
        for (const piece of pieces) res.write(piece);
        res.end();
      }
    } finally {
      if (body.admitted >= 0) this.#o.admission.leave(body.admitted);
    }
  }

  /**
   * A POST's body, within its limits and (an inference) admitted as it arrives: the bytes, and
   * the bytes admission holds for it (-1: not an inference), which the caller gives back.
   */
  async #readBody(req: http.IncomingMessage, route: RestRoute): Promise<{ bytes: Buffer; admitted: number }> {
    const o = this.#o;
    const encoding = String(req.headers['content-encoding'] ?? 'identity').trim().toLowerCase();
    if (!['identity', 'gzip', 'x-gzip', 'deflate'].includes(encoding)) {
      throw new RestError(415, `Content-Encoding ${JSON.stringify(encoding)} is not supported: send gzip, deflate or identity`);
    }
    const header = req.headers['inference-header-content-length'];
    const jsonHeader = route.inference && header !== undefined ? Number(header) : undefined;
    if (jsonHeader !== undefined && !(Number.isSafeInteger(jsonHeader) && jsonHeader >= 0)) {
      throw new RestError(400, `Inference-Header-Content-Length must be a whole number of bytes, not ${JSON.stringify(header)}`);
    }
    if (jsonHeader !== undefined && jsonHeader > o.maxJsonBytes) {
      throw new RestError(413, `the inference request's JSON header is ${jsonHeader} bytes, past endpoints.max_json_body_bytes = ${o.maxJsonBytes}`);
    }
    // An inference with binary data may carry max_receive_message_bytes; JSON alone, its own limit.
    const limit = route.inference && jsonHeader !== undefined ? o.maxBodyBytes : Math.min(o.maxBodyBytes, o.maxJsonBytes);
    const what = limit === o.maxJsonBytes ? `endpoints.max_json_body_bytes = ${limit}` : `endpoints.max_receive_message_bytes = ${limit}`;
    const declared = Number(req.headers['content-length'] ?? NaN);
    if (encoding === 'identity' && Number.isFinite(declared) && declared > limit) {
      throw new RestError(413, `the request body is ${declared} bytes, past ${what}`);
    }
    // Admission: an inference's bytes are counted before they are held, by Content-Length at once
    // when it is there (and the body is not compressed), else as they arrive.
    let admitted = -1;
    if (route.inference) {
      admitted = encoding === 'identity' && Number.isFinite(declared) ? declared : 0;
      o.admission.enter(admitted);
    }
    try {
      const bytes = await collect(req, encoding, limit, what, (n) => {
        if (admitted < 0) return;
        if (encoding === 'identity' && Number.isFinite(declared)) return; // reserved already
        o.admission.grow(n);
        admitted += n;
      });
      return { bytes, admitted };
    } catch (err) {
      if (admitted >= 0) o.admission.leave(admitted);
      throw err;
    }
  }

  #connection(socket: Socket): Connection {
    let c = this.#connections.get(socket);
    if (!c) this.#connections.set(socket, (c = { inflight: new Set() }));
    return c;
  }

  /** A request's answer is written (or its connection gone): a refusal waiting for it goes out now. */
  #answered(req: http.IncomingMessage): void {
    const c = this.#connection(req.socket);
    c.inflight.delete(req);
    if (c.inflight.size === 0 && c.refusal !== undefined) writeRefusal(req.socket, c.refusal);
  }

  /**
   * Bytes on a connection that are not HTTP (or headers too large or too slow). Requests read
   * before them on the same connection are answered first; then the refusal, and the connection
   * closes.
   */
  #clientError(err: NodeJS.ErrnoException, socket: Socket): void {
    if (!socket.writable) {
      socket.destroy();
      return;
    }
    const [status, reason] = err.code === 'HPE_HEADER_OVERFLOW' ? [431, 'Request Header Fields Too Large']
      : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? [408, 'Request Timeout']
        : [400, 'Bad Request'];
    const message = status === 408 ? 'the request did not arrive in time (its headers within 10 s, all of it within endpoints.http_request_timeout_seconds)'
      : status === 431 ? 'the request\'s headers are larger than 16 KiB'
        : `the request is not valid HTTP/1.1 (${err.code ?? err.message})`;
    const text = JSON.stringify({ error: message });
    const refusal = `HTTP/1.1 ${status} ${reason}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(text)}\r\nConnection: close\r\n\r\n${text}`;
    // Bad bytes inside a request still arriving (a broken chunked body), or a request that timed
    // out, are that request's: refused now, and it ends. Bad bytes after whole requests wait for
    // those to be answered.
    const c = this.#connection(socket);
    const arriving = [...c.inflight].filter((req) => !req.complete);
    if (c.inflight.size > 0 && arriving.length === 0 && status !== 408) {
      c.refusal = refusal;
      return;
    }
    writeRefusal(socket, refusal);
    for (const req of arriving) interrupt(req, new RestError(status, message));
  }

  #fail(req: http.IncomingMessage, res: http.ServerResponse, err: unknown): void {
    let status: number;
    let message: string;
    if (err instanceof RestError) {
      status = err.status;
      message = err.message;
    } else {
      const s = errorToStatus(err);
      status = HTTP_STATUS[s.code] ?? 500;
      message = s.details;
      if (status === 500 && !(err instanceof StowageError)) this.#o.logger.error({ err }, 'REST request failed');
    }
    if (res.headersSent) {
      res.destroy();
      return;
    }
    if (req.socket.writableEnded || req.socket.destroyed) return; // refused on the wire already (#clientError)
    // A body not read to its end: the rest is read and dropped (for a moment at most, then the
    // connection closes), so a client still sending reads the answer rather than a reset.
    const unread = !req.complete;
    const text = JSON.stringify({ error: message });
    // The Stowage code as a header, as gRPC carries it in the trailers (error-code.ts).
    const code = err instanceof StowageError ? { [ERROR_CODE_KEY]: err.code } : {};
    res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...code });
    res.end(text);
    if (unread) linger(req);
  }
}

interface Connection {
  /** Its requests not yet answered. */
  inflight: Set<http.IncomingMessage>;
  /** A refusal of bytes that came after them, written once they are answered. */
  refusal?: string;
}

/** An HTTP-level refusal (no such endpoint, body too large): the status as it is. */
export class RestError extends Error {
  constructor(readonly status: number, message: string) {
    super(message);
  }
}

/** A path's capture, %-decoded; a malformed escape is the client's error, not ours. */
function decodePathPart(p: string | undefined): string {
  if (p === undefined) return '';
  try {
    return decodeURIComponent(p);
  } catch {
    throw new RestError(400, `the path holds ${JSON.stringify(p.slice(0, 80))}, which is not valid %-encoding`);
  }
}

function writeRefusal(socket: Socket, refusal: string): void {
  if (socket.destroyed) return;
  socket.end(refusal);
  setTimeout(() => socket.destroy(), LINGER_MS).unref();
}

/** Read and drop what the client still sends; if it is still sending after a moment, close the connection. */
function linger(req: http.IncomingMessage): void {
  req.removeAllListeners('data');
  req.resume();
  const timer = setTimeout(() => {
    if (!req.complete) req.socket.destroy();
  }, LINGER_MS).unref();
  req.once('end', () => clearTimeout(timer));
}

/** How to stop reading a body whose bytes turned out not to be HTTP (#clientError): its reader's reject. */
const interrupts = new WeakMap<http.IncomingMessage, (err: Error) => void>();

function interrupt(req: http.IncomingMessage, err: Error): void {
  interrupts.get(req)?.(err);
}

/**
 * The body, inflated if it came compressed, refused (RestError 413) as soon as its bytes pass
 * `limit`; `arrived(n)` is told of each piece before it is kept (admission; it may throw).
 */
function collect(req: http.IncomingMessage, encoding: string, limit: number, what: string, arrived: (n: number) => void): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let done = false;
    const inflate: Gunzip | Inflate | null = encoding === 'gzip' || encoding === 'x-gzip' ? createGunzip() : encoding === 'deflate' ? createInflate() : null;
    const source = inflate ?? req;
    const stop = (err: unknown) => {
      if (done) return;
      done = true;
      if (inflate) {
        req.unpipe(inflate);
        inflate.destroy();
      }
      source.removeAllListeners('data');
      reject(err);
    };
    interrupts.set(req, (err) => stop(err));
    source.on('data', (chunk: Buffer) => {
      if (done) return;
      size += chunk.length;
      if (size > limit) {
        stop(new RestError(413, `the request body${inflate ? ', inflated,' : ''} passed ${what}`));
        return;
      }
      try {
        arrived(chunk.length);
      } catch (err) {
        stop(err);
        return;
      }
      chunks.push(chunk);
    });
    source.on('end', () => {
      if (done) return;
      done = true;
      // copy: the body's chunks joined into one buffer of its own (the table's REST rows)
      resolve(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, size));
    });
    source.on('error', (err: Error) => stop(inflate && source === inflate ? new RestError(400, `the request body is not valid ${encoding} (${err.message})`) : err));
    if (inflate) {
      req.on('error', (err) => stop(err));
      req.pipe(inflate);
    }
  });
}

/** The JSON body of a non-inference POST (load, register, log settings): {} when empty. */
export async function jsonBody(body: Buffer): Promise<JsonObject> {
  if (body.length === 0) return Object.create(null) as JsonObject;
  const value = await readJsonBody(body, 'the request');
  if (typeof value !== 'object' || value === null || Array.isArray(value) || value instanceof RawJson) throw errors.invalidRequest('the request body must be a JSON object');
  return value;
}
