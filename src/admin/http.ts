/**
 * The admin HTTP server: /healthz (the process is alive and answering),
 * /readyz (200 when ready, 503 when not, with what the server says about it:
 * for a node, the models still loading; for a gateway, its nodes), and
 * /metrics (Prometheus text).
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Registry } from 'prom-client';

export interface AdminContext {
  /** Whether the server is ready, and a body that says why (or why not). */
  readiness: () => { ready: boolean } & Record<string, unknown>;
  metrics: () => Promise<{ contentType: string; text: string }>;
}

export function registryMetrics(registry: Registry): AdminContext['metrics'] {
  return async () => ({ contentType: registry.contentType, text: await registry.metrics() });
}

export function createAdminServer(ctx: AdminContext): http.Server {
  return http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://admin');
    const reply = (status: number, body: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(`${JSON.stringify(body)}\n`);
    };
    if (req.method !== 'GET' && req.method !== 'HEAD') return reply(405, { error: 'use GET' });
    switch (url.pathname) {
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
        return reply(404, { error: `no such endpoint ${url.pathname}; try /healthz, /readyz or /metrics` });
    }
  });
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
