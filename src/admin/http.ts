/**
 * The admin HTTP server: /healthz (the process is alive and answering),
 * /readyz (200 once every model has loaded or failed with a reason; 503 with
 * the models still loading, and while the server stops), and /metrics
 * (Prometheus text).
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Registry } from 'prom-client';
import { ModelState, type ModelRegistry } from '../model-registry.js';

export interface AdminContext {
  registry: ModelRegistry;
  metrics: Registry;
  isReady: () => boolean;
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
        ctx.metrics.metrics().then((text) => {
          res.writeHead(200, { 'content-type': ctx.metrics.contentType });
          res.end(text);
        }, (err: Error) => reply(500, { error: err.message }));
        return;
      case '/readyz': {
        const models = ctx.registry.all().map((r) => ({ name: r.name, state: r.state, reason: r.reason }));
        const loading = models.filter((m) => m.state === ModelState.LOADING).map((m) => m.name);
        return reply(ctx.isReady() ? 200 : 503, { ready: ctx.isReady(), loading, models });
      }
      default:
        return reply(404, { error: `no such endpoint ${url.pathname}; try /healthz, /readyz or /metrics` });
    }
  });
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
