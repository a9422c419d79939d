/**
 * The quotas' metrics (shared/admission.ts), read from the numbers every thread counts in when
 * /metrics asks: per subject (each tenant and model the node file's `global.quotas` names; every
 * tenant it does not name is `other`, so the labels stay a bounded set) the requests in flight, the
 * device time charged, and the requests refused by which limit; and per tenant (the named ones,
 * `default` and `other`, with a quota or not) the answered requests by their whole time, a histogram.
 */
import { Counter, Gauge, type Registry } from 'prom-client';
import type { Quotas } from '../shared/admission.js';
import { countedHistogram } from './metrics.js';

const LABELS = ['kind', 'subject'] as const;

/** A counter's way to a running total: prom-client counters go up by increments, so what was told is kept by labels. */
function teller(): (counter: Counter<string>, labels: Record<string, string>, total: number) => void {
  const told = new Map<string, number>();
  return (counter, labels, total) => {
    const key = Object.values(labels).join('|');
    const before = told.get(key) ?? 0;
    if (total > before) counter.inc(labels, total - before);
    told.set(key, total);
  };
}

export function quotaMetrics(quotas: Quotas, registry: Registry): void {
  const charged = teller();
  const refused = teller();
  new Gauge({
    name: 'stowage_quota_inflight_requests', help: 'Inference requests in flight per quota subject (global.quotas: a tenant or a model)', labelNames: LABELS, registers: [registry],
    collect() {
      for (const r of quotas.read()) this.set({ kind: r.kind, subject: r.name }, r.inflight);
    },
  });
  new Counter({
    name: 'stowage_quota_device_seconds_total', help: 'Device time charged per quota subject: each execution\'s compute time, each request\'s share by rows', labelNames: LABELS, registers: [registry],
    collect() {
      for (const r of quotas.read()) charged(this, { kind: r.kind, subject: r.name }, r.deviceSeconds);
    },
  });
  new Counter({
    name: 'stowage_quota_refusals_total', help: 'Inference requests refused RESOURCE_EXHAUSTED per quota subject, by the limit they met (max_inflight, device_seconds_per_second)', labelNames: [...LABELS, 'limit'], registers: [registry],
    collect() {
      for (const r of quotas.read()) {
        refused(this, { kind: r.kind, subject: r.name, limit: 'max_inflight' }, r.refused.inflight);
        refused(this, { kind: r.kind, subject: r.name, limit: 'device_seconds_per_second' }, r.refused.rate);
      }
    },
  });
  tenantDurations(quotas, registry);
}

/**
 * stowage_tenant_request_duration_seconds{tenant}: each tenant's answered requests by their whole time on the server
 * (p99 per tenant by histogram_quantile: whether a quota on one tenant keeps the others' latency), counted in shared
 * memory by every thread (Quotas.answered).
 */
function tenantDurations(quotas: Quotas, registry: Registry): void {
  countedHistogram('stowage_tenant_request_duration_seconds',
    'Successful inference requests by their whole time on the server, per tenant (named by endpoints.tenant_key: the tenants global.quotas lists, default for none named, other for the rest; a histogram)',
    'tenant', () => quotas.durations(), [registry]);
}
