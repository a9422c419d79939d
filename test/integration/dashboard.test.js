// The Grafana dashboard shipped in deploy/grafana/ (docs/operations.md): every metric its queries
// name is one a running CPU node or a running pooled gateway documents on its /metrics (a `# HELP`
// line), so a renamed metric breaks this test rather than a panel in production; the metrics that
// have samples only on a GPU are listed apart and marked so in their legends; and the file has what
// Grafana's import needs (a datasource input, unique panel ids, a query per target).
import { readFileSync } from 'node:fs';
import path from 'node:path';
import test from 'ava';
import { ROOT, startServer } from '../helpers/server.js';

const DASHBOARD = path.join(ROOT, 'deploy', 'grafana', 'stowage-dashboard.json');
/** Metrics with samples only with backend cuda (NVML's): a CPU node documents them or not; their legends say "GPU only". */
const GPU_ONLY = ['nv_gpu_memory_used_bytes', 'nv_gpu_memory_total_bytes', 'nv_gpu_utilization'];

/** The metric names a /metrics page documents (`# HELP name ...`). */
async function documented(/** @type {number | undefined} */ adminPort) {
  const text = await (await fetch(`http://127.0.0.1:${adminPort}/metrics`)).text();
  return new Set([...text.matchAll(/^# HELP (\S+) /gm)].map((m) => m[1]));
}

test('every metric the dashboard queries is documented by a running node or pooled gateway; GPU-only ones are listed apart', async (t) => {
  const node = await startServer({ model_repo: path.join(ROOT, 'bundles') });
  t.teardown(() => node.stop());
  const gateway = await startServer({ gateway: { endpoints: [node.address], health_seconds: 0.5, scheduling: { mode: 'pooled' } } });
  t.teardown(() => gateway.stop());
  const known = new Set([...(await documented(node.adminPort)), ...(await documented(gateway.adminPort))]);

  const dashboard = JSON.parse(readFileSync(DASHBOARD, 'utf8'));
  /** @type {{ title: string, expr: string, legend: string }[]} */
  const queries = [];
  for (const panel of dashboard.panels) {
    for (const target of panel.targets ?? []) queries.push({ title: panel.title, expr: target.expr, legend: target.legendFormat ?? '' });
  }
  for (const v of dashboard.templating.list) queries.push({ title: `variable ${v.name}`, expr: v.query.query, legend: '' });
  t.true(queries.length >= 20, `${queries.length} queries`);

  /** @type {string[]} */
  const unknown = [];
  const used = new Set();
  for (const { title, expr, legend } of queries) {
    for (const [name] of expr.matchAll(/\b(?:nv|stowage)_[a-z0-9_]+/g)) {
      // A histogram's series are its name with _bucket, _sum or _count.
      const base = known.has(name) ? name : name.replace(/_(bucket|sum|count)$/, '');
      used.add(base);
      if (GPU_ONLY.includes(base)) {
        if (!legend.includes('GPU only')) unknown.push(`${title}: ${name} has samples only on a GPU, and its legend does not say so`);
        continue;
      }
      if (!known.has(base)) unknown.push(`${title}: ${name}`);
    }
  }
  t.deepEqual(unknown, [], 'metrics no running node or gateway documents');
  // The list: requests, p50/p99, cold loads and hit ratio, residency and placement, device memory, queue depth, refusals.
  for (const name of ['nv_inference_request_success', 'stowage_request_duration_seconds', 'stowage_weight_cache_misses_total', 'stowage_gateway_model_weight_hit_ratio',
    'stowage_weight_cache_model_resident_bytes', 'stowage_gateway_model_placement', 'stowage_weight_cache_resident_bytes', 'stowage_device_session_bytes',
    'stowage_device_queue_depth', 'stowage_grpc_shed_total', 'stowage_quota_refusals_total', 'nv_inference_request_failure', 'stowage_tenant_request_duration_seconds']) {
    t.true(used.has(name), `the dashboard shows ${name}`);
  }
});

test('the dashboard is importable: a Prometheus datasource input, unique panel ids, a query and refId per target', (t) => {
  const dashboard = JSON.parse(readFileSync(DASHBOARD, 'utf8'));
  t.deepEqual(dashboard.__inputs.map((/** @type {{ name: string, pluginId: string }} */ i) => [i.name, i.pluginId]), [['DS_PROMETHEUS', 'prometheus']]);
  const ids = dashboard.panels.map((/** @type {{ id: number }} */ p) => p.id);
  t.is(new Set(ids).size, ids.length, 'panel ids are unique');
  for (const panel of dashboard.panels) {
    t.truthy(panel.gridPos, panel.title);
    if (panel.type === 'row') continue;
    t.is(panel.datasource.uid, '${DS_PROMETHEUS}', panel.title);
    t.true(panel.targets.length > 0, panel.title);
    for (const target of panel.targets) {
      t.regex(target.refId, /^[A-Z]$/, panel.title);
      t.true(target.expr.length > 0, panel.title);
      let depth = 0;
      for (const c of target.expr) {
        depth += c === '(' ? 1 : c === ')' ? -1 : 0;
        t.true(depth >= 0, `${panel.title}: parentheses close before they open`);
      }
      t.is(depth, 0, `${panel.title}: balanced parentheses`);
    }
  }
});
