// The /metrics text rendered family by family (admin/exposition.ts): the very text prom-client's
// registry.metrics() gives, and the thread given back to its other work while a large registry renders.
import test from 'ava';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { exposition } from '../../../dist/admin/exposition.js';

/**
 * A registry of `families` counters with `series` labelled series each, a histogram and a collected gauge.
 * @param {number} families
 * @param {number} series
 * @param {any} [contentType]
 */
function registryOf(families, series, contentType) {
  const registry = new Registry();
  if (contentType) registry.setContentType(contentType);
  for (let f = 0; f < families; f++) {
    const c = new Counter({ name: `c${f}_total`, help: `counter ${f} with "quotes" and \\ a backslash`, labelNames: ['model', 'reason'], registers: [registry] });
    for (let s = 0; s < series; s++) c.inc({ model: `m${s}`, reason: s % 2 ? 'a"b' : 'x\ny' }, s);
  }
  const h = new Histogram({ name: 'h_seconds', help: 'a histogram', labelNames: ['model'], buckets: [0.1, 1], registers: [registry] });
  h.observe({ model: 'm0' }, 0.5);
  new Gauge({ name: 'g', help: 'collected', registers: [registry], collect() { this.set(42); } });
  return registry;
}

test('the same text as registry.metrics()', async (t) => {
  const registry = registryOf(3, 5);
  t.is(await exposition(registry), await registry.metrics());
  const open = registryOf(2, 3, Registry.OPENMETRICS_CONTENT_TYPE);
  t.is(await exposition(open), await open.metrics(), 'OpenMetrics: left to prom-client');
});

test('a large registry renders in slices: the thread runs its other work before the text is done', async (t) => {
  const registry = registryOf(40, 2000); // 80,000 series: well over one slice
  let done = false;
  let ranBefore = false;
  setImmediate(() => { ranBefore = !done; });
  const text = await exposition(registry);
  done = true;
  t.true(ranBefore, 'an immediate set before the render ran before it was done');
  // registry.metrics() renders in one turn: the same immediate, set before it, runs only after.
  let between = false;
  setImmediate(() => { between = true; });
  const whole = await registry.metrics();
  t.false(between, 'prom-client: no turn given back');
  t.is(text, whole);
});
