/**
 * The HTTP/REST edge (KServe V2 REST with Triton's extensions) on `endpoints.http_port`: Node's
 * own http server (no framework: the routes are a dozen patterns, and a framework's per-request
 * cost would exceed what this layer does). It owns what every REST call crosses:
 *
 * - limits as on gRPC: a body past `max_receive_message_bytes` is refused 413 before it is read
 *   whole, headers past 16 KiB 431 (Node's own), headers in 10 s, a whole request in 300 s;
 * - admission: inference requests share the gRPC edge's Admission, so bytes in flight are counted
 *   across both protocols and a request past them is refused 429;
 * - errors: a StowageError's gRPC status mapped to the HTTP status Triton's HTTP endpoint uses
 *   (INVALID_ARGUMENT 400, NOT_FOUND 404, UNAVAILABLE 503, ...), the body `{"error": "..."}`;
 *   anything unexpected is 500, logged; nothing a client sends crashes the process;
 * - cancellation: a client that disconnects aborts its inference (the pipeline's signal).
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import { errors, errorToStatus, Status, StowageError } from '../shared/errors.js';
import type { Admission } from './admission.js';

/** A route's answer: JSON, or raw bytes with headers (a binary inference response). */
export type RestReply = { json: unknown; status?: number } | { body: Buffer; headers: Record<string, string>; status?: number };

export interface RestRequest {
  method: string;
  /** The path's captures (model name, version, region name), decoded. */
  params: string[];
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
  /** An inference: admitted by the bytes of its body, shed like gRPC's. */
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

export interface HttpEdgeOptions {
  host: string;
  port: number;
  maxBodyBytes: number;
  admission: Admission;
  logger: Logger;
}

export class HttpEdge {
  readonly #server: http.Server;
  readonly #routes: RestRoute[] = [];
  readonly #o: HttpEdgeOptions;

  constructor(options: HttpEdgeOptions) {
    this.#o = options;
    this.#server = http.createServer({ headersTimeout: 10_000, requestTimeout: 300_000, maxHeaderSize: 16 * 1024 }, (req, res) => {
      this.#serve(req, res).catch((err: unknown) => this.#fail(res, err));
    });
  }

  add(routes: RestRoute[]): void {
    this.#routes.push(...routes);
  }

  /** Bind; resolves to the port (the one chosen when port is 0). */
  start(): Promise<number> {
    return new Promise((resolve, reject) => {
      this.#server.once('error', reject);
      this.#server.listen(this.#o.port, this.#o.host, () => {
        this.#server.off('error', reject);
        resolve((this.#server.address() as AddressInfo).port);
      });
    });
  }

  /** Stop taking connections; open ones end once their answers are written. */
  stop(): Promise<void> {
    return new Promise((resolve) => {
      this.#server.close(() => resolve());
      this.#server.closeIdleConnections();
    });
  }

  async #serve(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const path = (req.url ?? '/').split('?')[0];
    const method = req.method ?? 'GET';
    let match: RegExpExecArray | null = null;
    const route = this.#routes.find((r) => r.method === method && (match = r.pattern.exec(path)) !== null);
    if (!route || !match) {
      const other = this.#routes.some((r) => r.pattern.test(path));
      req.resume();
      throw other ? new RestError(405, `${method} is not allowed on ${path}`) : new RestError(404, `no such endpoint: ${method} ${path}`);
    }
    const params = (match as RegExpExecArray).slice(1).map((p) => (p === undefined ? '' : decodeURIComponent(p)));
    const body = await readBody(req, this.#o.maxBodyBytes);
    const abort = new AbortController();
    const onClose = () => {
      if (!res.writableFinished) abort.abort();
    };
    res.once('close', onClose);
    const admitted = route.inference ? body.length : -1;
    if (admitted >= 0) this.#o.admission.enter(admitted);
    try {
      const admission = admitted >= 0 ? { admitted: { bytes: admitted, inflightBytes: this.#o.admission.inflightBytes } } : {};
      const reply = await route.handle({ method, params, body, headers: req.headers, signal: abort.signal, ...admission });
      if ('json' in reply) {
        const text = JSON.stringify(reply.json);
        res.writeHead(reply.status ?? 200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
        res.end(text);
      } else {
        res.writeHead(reply.status ?? 200, { ...reply.headers, 'content-length': reply.body.length });
        res.end(reply.body);
      }
    } finally {
      if (admitted >= 0) this.#o.admission.leave(admitted);
    }
  }

  #fail(res: http.ServerResponse, err: unknown): void {
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
    const text = JSON.stringify({ error: message });
    res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...(status === 413 ? { connection: 'close' } : {}) });
    res.end(text);
  }
}

/** An HTTP-level refusal (no such endpoint, body too large): the status as it is. */
export class RestError extends Error {
  constructor(readonly status: number, message: string) {
    super(message);
  }
}

/** The body, refused 413 as soon as it passes `limit` bytes (by its Content-Length, or as it arrives). */
function readBody(req: http.IncomingMessage, limit: number): Promise<Buffer> {
  const declared = Number(req.headers['content-length'] ?? NaN);
  if (Number.isFinite(declared) && declared > limit) {
    req.resume();
    return Promise.reject(new RestError(413, `the request body is ${declared} bytes, past endpoints.max_receive_message_bytes = ${limit}`));
  }
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        reject(new RestError(413, `the request body passed endpoints.max_receive_message_bytes = ${limit}`));
        req.destroy();
        return;
      }
      chunks.push(chunk);
    });
    // copy: the body's chunks joined into one buffer of its own (the table's REST rows)
    req.on('end', () => resolve(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, size)));
    req.on('error', reject);
  });
}

/** The JSON body of a non-inference POST (load, register, log settings): {} when empty. */
export function jsonBody(body: Buffer): Record<string, unknown> {
  if (body.length === 0) return {};
  let value: unknown;
  try {
    value = JSON.parse(body.toString('utf8'));
  } catch (err) {
    throw errors.invalidRequest(`the request's JSON is not valid: ${(err as Error).message}`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw errors.invalidRequest('the request body must be a JSON object');
  return value as Record<string, unknown>;
}
