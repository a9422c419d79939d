/**
 * The admin HTTP server: /healthz (the process is alive and answering),
 * /readyz (200 when ready, 503 when not, with what the server says about it:
 * for a node, the models still loading; for a gateway, its nodes), and
 * /metrics (Prometheus text).
 *
 * Nothing a client sends may throw out of the request listener: an exception
 * there is uncaught and would end the process, gRPC included. A request target
 * that is not a path answers 400, and a failure while answering answers 500.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Registry } from 'prom-client';
import { quote } from '../shared/errors.js';
import { exposition } from './exposition.js';

export interface AdminContext {
  /** Whether the server is ready, and a body that says why (or why not). */
  readiness: () => { ready: boolean } & Record<string, unknown>;
  metrics: () => Promise<{ contentType: string; text: string }>;
}

/**
 * `registry`'s exposition, after `settle` (a node: every execution its devices answered before the scrape reported
 * first), rendered inside `around` (a node: one reading of its models' counters for the whole scrape).
 */
export function registryMetrics(
  registry: Registry,
  settle: () => Promise<void> = async () => undefined,
  around: (render: () => Promise<string>) => Promise<string> = (render) => render(),
): AdminContext['metrics'] {
  return async () => {
    await settle();
    return { contentType: registry.contentType, text: await around(() => exposition(registry)) };
  };
}

/**
 * The path of a request target (`/readyz?x=1`), or null when it is not one (`//[`, `*`, a full URL with a bad host).
 */
function pathOf(target: string | undefined): string | null {
  if (!target?.startsWith('/')) return null;
  try {
    return new URL(target, 'http://admin').pathname;
  } catch {
    return null;
  }
}

export function createAdminServer(ctx: AdminContext): http.Server {
  const server = http.createServer((req, res) => {
    const reply = (status: number, body: unknown) => {
      if (res.headersSent) return void res.destroy();
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(`${JSON.stringify(body)}\n`);
    };
    try {
      const path = pathOf(req.url);
      if (path === null) return reply(400, { error: `cannot parse the request target ${quote(req.url ?? '')}; expected a path such as /readyz` });
      if (req.method !== 'GET' && req.method !== 'HEAD') return reply(405, { error: 'use GET' });
      switch (path) {
        case '/healthz':
          return reply(200, { live: true });
        case '/metrics':
          ctx.metrics().then(({ contentType, text }) => {
            res.writeHead(200, { 'content-type': contentType });
            res.end(text);
          }, (err: Error) => reply(500, { error: err.message }));
          return;
        case '/readyz': {
          const body = ctx.readiness();
          return reply(body.ready ? 200 : 503, body);
        }
        default:
          return reply(404, { error: `no such endpoint ${quote(path)}; try /healthz, /readyz or /metrics` });
      }
    } catch (err) {
      return reply(500, { error: (err as Error).message });
    }
  });
  // Requests too slow to send their headers or body are cut off (a slow client holds a socket, not the process).
  server.headersTimeout = 10_000;
  server.requestTimeout = 30_000;
  return server;
}

/** Close the admin server if it is listening. */
export function closeAdmin(server: http.Server | undefined): Promise<void> {
  return new Promise((resolve) => (server?.listening ? server.close(() => resolve()) : resolve()));
}

export function listen(server: http.Server, host: string, port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve((server.address() as AddressInfo).port);
    });
  });
}
