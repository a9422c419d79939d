// Trace context through the real server, exported with OpenTelemetry's SDK over OTLP/HTTP (JSON)
// to a receiver this test runs: a REST request and a gRPC request, each with a W3C traceparent and
// each a cold call, produce connected traces: the request's span under the caller's, its queue
// wait under it, and the execution it rode in linked to it, with the cold weight load inside.
import { once } from 'node:events';
import http from 'node:http';
import { writeFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import test from 'ava';
import { mlpLayers, writeBundle } from '../helpers/mlp-catalog.js';
import { metric, scrapeMetrics, startServer, tempDir, tensor } from '../helpers/server.js';
import { InferenceClient } from '../../dist/client/client.js';

/**
 * The environment that turns tracing on, exporting OTLP/HTTP JSON to `url` every 100 ms.
 * @param {string} url
 */
const otlpEnv = (url) => ({ OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_ENDPOINT: url, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_BSP_SCHEDULE_DELAY: '100', OTEL_METRICS_EXPORTER: 'none', OTEL_LOGS_EXPORTER: 'none' });

/**
 * An OTLP/HTTP receiver on a free port, collecting the spans of every JSON export. `until(found)`
 * resolves to what `found` returns once it returns something, or fails after 10 s naming the spans.
 * @returns {Promise<{ url: string, spans: any[], resources: any[], until: <T>(found: (spans: any[]) => T | undefined) => Promise<T>, close: () => Promise<void> }>}
 */
async function otlpReceiver() {
  /** @type {any[]} */
  const spans = [];
  /** @type {any[]} */
  const resources = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => { body += c; });
    req.on('end', () => {
      if (req.url === '/v1/traces') {
        const doc = JSON.parse(body);
        for (const rs of doc.resourceSpans ?? []) {
          resources.push(rs.resource);
          for (const ss of rs.scopeSpans ?? []) spans.push(...(ss.spans ?? []));
        }
      }
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{}');
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(undefined)));
  const { port } = /** @type {import('node:net').AddressInfo} */ (server.address());
  /** @type {<T>(found: (spans: any[]) => T | undefined) => Promise<T>} */
  const until = async (found) => {
    for (let waited = 0; waited < 10_000; waited += 100) {
      const result = found(spans);
      if (result !== undefined) return result;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    throw new Error(`the spans awaited never arrived; received: ${JSON.stringify(spans.map((s) => [s.traceId, s.name]))}`);
  };
  return { url: `http://127.0.0.1:${port}`, spans, resources, until, close: () => new Promise((resolve) => server.close(() => resolve(undefined))) };
}

test('a traceparent on a REST and on a gRPC request gives a connected trace: request, queue, execution linked, cold weight load', async (t) => {
  const receiver = await otlpReceiver();
  t.teardown(receiver.close);
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const repo = path.join(temp.dir, 'repo');
  const a = writeBundle(repo, 'a', mlpLayers(1, [64, 512, 8]));
  const b = writeBundle(repo, 'b', mlpLayers(2, [64, 512, 8]));
  // Room for one model's weights: each call below is cold.
  const server = await startServer({ model_repo: repo, global: { runtime: { cpu_device_memory_bytes: 200_000, mem_fraction: 1, weight_cache_wiggle_fraction: 0 } } }, {
    root: temp.dir,
    env: otlpEnv(receiver.url),
  });
  t.teardown(() => server.stop());
  t.truthy(server.logs.find((l) => l.msg === 'tracing on (OpenTelemetry)'));
  const x = new Float32Array(2 * 64).fill(0.1);
  const restTrace = '0af7651916cd43dd8448eb211c80319c';
  const grpcTrace = '4bf92f3577b34da6a3ce929d0e0e4736';
  const callerSpan = 'b7ad6b7169203331';
  const rest = await fetch(`${server.rest}/v2/models/a/infer`, {
    method: 'POST',
    headers: { traceparent: `00-${restTrace}-${callerSpan}-01` },
    body: JSON.stringify({ inputs: [{ name: 'x', datatype: 'FP32', shape: [2, 64], data: [...x] }] }),
  });
  t.is(rest.status, 200);
  await server.client.infer('b', [tensor('x', 'FP32', [2, 64], x)], { metadata: { traceparent: `00-${grpcTrace}-${callerSpan}-01` } });
  t.is(a.name, 'a');
  t.is(b.name, 'b');

  /** The spans of a trace, once its request, queue and execution spans have arrived. */
  const traced = (/** @type {string} */ traceId, /** @type {string} */ model) => receiver.until((spans) => {
    const mine = spans.filter((s) => s.traceId === traceId);
    const request = mine.find((s) => s.name === `infer ${model}`);
    const execution = spans.find((s) => s.name === `execute ${model}` && (s.links ?? []).some((/** @type {any} */ l) => l.traceId === traceId && l.spanId === request?.spanId));
    return request && execution && mine.some((s) => s.name === 'queue') ? { mine, request, execution } : undefined;
  });
  for (const [traceId, model] of [[restTrace, 'a'], [grpcTrace, 'b']]) {
    const { mine, request, execution } = await traced(traceId, model);
    t.is(request.parentSpanId, callerSpan, `${model}: the request's span is the caller's child`);
    const admitted = (request.events ?? []).find((/** @type {any} */ e) => e.name === 'admitted');
    t.truthy(admitted, `${model}: admission recorded on the request's span`);
    const bytes = admitted.attributes.find((/** @type {any} */ a) => a.key === 'stowage.request_bytes');
    t.true(Number(bytes.value.intValue) > 0, `${model}: with the request's bytes`);
    const queue = mine.find((s) => s.name === 'queue');
    t.is(queue.parentSpanId, request.spanId, `${model}: queue wait under the request`);
    const load = receiver.spans.find((s) => s.name === 'weight load' && s.traceId === execution.traceId && s.parentSpanId === execution.spanId);
    t.truthy(load, `${model}: the cold call's weight load inside its execution`);
    t.true(BigInt(execution.startTimeUnixNano) >= BigInt(queue.endTimeUnixNano) - 1_000_000n, `${model}: the execution starts as the queue wait ends`);
  }
});

test('tracing is off by default: no exporter, no spans, nothing said', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const repo = path.join(temp.dir, 'repo');
  writeBundle(repo, 'a', mlpLayers(1, [8, 16, 2]));
  const server = await startServer({ model_repo: repo }, { root: temp.dir });
  t.teardown(() => server.stop());
  t.falsy(server.logs.find((l) => l.msg === 'tracing on (OpenTelemetry)'));
  const { outputs } = await server.client.infer('a', [tensor('x', 'FP32', [1, 8], new Float32Array(8))], { metadata: { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' } });
  t.deepEqual(outputs[0].shape, [1, 2]);
});

test('a meta model\'s trace has its run hook and a span per sub-call, each with its own device spans', async (t) => {
  const receiver = await otlpReceiver();
  t.teardown(receiver.close);
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const { ROOT } = await import('../helpers/server.js');
  const server = await startServer({ model_repo: path.join(ROOT, 'bundles') }, {
    root: temp.dir,
    env: otlpEnv(receiver.url),
  });
  t.teardown(() => server.stop());
  const traceId = '11111111111111111111111111111111';
  await server.client.infer('digit_finder', [tensor('canvas', 'FP32', [32, 32], new Float32Array(1024).fill(3))], { metadata: { traceparent: `00-${traceId}-2222222222222222-01` } });
  const names = await receiver.until((spans) => {
    const mine = spans.filter((s) => s.traceId === traceId).map((s) => /** @type {string} */ (s.name));
    return mine.includes('sub-call digits') && mine.includes('sub-call digit_cells') ? mine : undefined;
  });
  for (const name of ['infer digit_finder', 'hook run', 'sub-call digit_cells', 'sub-call digits', 'queue']) t.true(names.includes(name), `${name} in ${names.join(', ')}`);
  const spans = receiver.spans.filter((s) => s.traceId === traceId);
  const run = spans.find((s) => s.name === 'hook run');
  const sub = spans.find((s) => s.name === 'sub-call digits');
  t.is(run.parentSpanId, spans.find((s) => s.name === 'infer digit_finder').spanId);
  t.true(spans.some((s) => s.name === 'queue' && s.parentSpanId === sub.spanId), 'the sub-call\'s own queue wait under it');
});

test('the node file turns tracing on too (global.tracing), the environment unset', async (t) => {
  const receiver = await otlpReceiver();
  t.teardown(receiver.close);
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const repo = path.join(temp.dir, 'repo');
  writeBundle(repo, 'a', mlpLayers(1, [8, 16, 2]));
  const env = /** @type {Record<string, string>} */ ({ OTEL_BSP_SCHEDULE_DELAY: '100' });
  const server = await startServer({ model_repo: repo, global: { tracing: { exporter: 'otlp', endpoint: receiver.url, protocol: 'http/json' } } }, { root: temp.dir, env });
  t.teardown(() => server.stop());
  t.truthy(server.logs.find((l) => l.msg === 'tracing on (OpenTelemetry)'));
  const traceId = '33333333333333333333333333333333';
  await server.client.infer('a', [tensor('x', 'FP32', [1, 8], new Float32Array(8))], { metadata: { traceparent: `00-${traceId}-4444444444444444-01` } });
  const request = await receiver.until((spans) => spans.find((s) => s.traceId === traceId && s.name === 'infer a'));
  t.is(request.name, 'infer a');
});

/** An attribute's value in OTLP JSON, as a plain value. @param {any} holder @param {string} key */
const attribute = (holder, key) => {
  const v = (holder.attributes ?? []).find((/** @type {any} */ a) => a.key === key)?.value;
  return v === undefined ? undefined : v.stringValue ?? (v.intValue !== undefined ? Number(v.intValue) : v.doubleValue ?? v.boolValue);
};

test('the request span carries Triton\'s names and timestamps; a traceparent not sampled is traced no further; OTEL_RESOURCE_ATTRIBUTES names the service', async (t) => {
  const receiver = await otlpReceiver();
  t.teardown(receiver.close);
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const repo = path.join(temp.dir, 'repo');
  writeBundle(repo, 'a', mlpLayers(1, [8, 16, 2]));
  const server = await startServer({ model_repo: repo }, {
    root: temp.dir,
    env: { ...otlpEnv(receiver.url), OTEL_RESOURCE_ATTRIBUTES: 'service.name=grader-prod,deployment.environment=test' },
  });
  t.teardown(() => server.stop());
  const sampled = '55555555555555555555555555555555';
  const unsampled = '66666666666666666666666666666666';
  const x = tensor('x', 'FP32', [1, 8], new Float32Array(8).fill(1));
  await server.client.infer('a', [x], { id: 'req-7', metadata: { traceparent: `00-${unsampled}-7777777777777777-00` } });
  await server.client.infer('a', [x], { id: 'req-8', metadata: { traceparent: `00-${sampled}-7777777777777777-01` } });
  const request = await receiver.until((spans) => spans.find((s) => s.traceId === sampled && s.name === 'infer a' && (s.events ?? []).length > 1));
  t.is(attribute(request, 'triton.model_name'), 'a');
  t.is(attribute(request, 'triton.model_version'), '1');
  t.is(attribute(request, 'triton.request_id'), 'req-8');
  t.is(attribute(request, 'stowage.batch_size'), 1);
  for (const key of ['stowage.queue_ns', 'stowage.compute_input_ns', 'stowage.compute_infer_ns', 'stowage.compute_output_ns']) t.true(attribute(request, key) >= 0, key);
  const events = (request.events ?? []).map((/** @type {any} */ e) => e.name);
  t.deepEqual(events.filter((/** @type {string} */ n) => n !== 'admitted'), ['QUEUE_START', 'COMPUTE_START', 'COMPUTE_INPUT_END', 'COMPUTE_OUTPUT_START', 'COMPUTE_END']);
  // Give the exporter a turn more: nothing of the unsampled request arrives, and no execution links to it.
  await new Promise((resolve) => setTimeout(resolve, 400));
  t.false(receiver.spans.some((s) => s.traceId === unsampled), 'no span in the unsampled trace');
  t.false(receiver.spans.some((s) => (s.links ?? []).some((/** @type {any} */ l) => l.traceId === unsampled)), 'no execution linked to it');
  t.true(receiver.spans.some((s) => s.name === 'execute a' && (s.links ?? []).some((/** @type {any} */ l) => l.traceId === sampled)));
  const resource = receiver.resources[0];
  t.is(attribute(resource, 'service.name'), 'grader-prod', 'the standard resolution names the service');
  t.is(attribute(resource, 'deployment.environment'), 'test');
});

for (const collector of ['down', 'hung']) {
  test(`the collector ${collector}: failed exports are logged and counted, and SIGTERM exits 0 well within the grace`, async (t) => {
    const temp = tempDir();
    t.teardown(temp.cleanup);
    // Down: nothing listens on the port. Hung: it accepts and never answers.
    const sockets = new Set();
    const hung = net.createServer((socket) => {
      sockets.add(socket);
      socket.on('error', () => undefined);
    });
    await new Promise((resolve) => hung.listen(0, '127.0.0.1', () => resolve(undefined)));
    const port = /** @type {import('node:net').AddressInfo} */ (hung.address()).port;
    if (collector === 'down') await new Promise((resolve) => hung.close(() => resolve(undefined)));
    t.teardown(() => {
      for (const s of sockets) /** @type {net.Socket} */ (s).destroy();
      hung.close();
    });
    const repo = path.join(temp.dir, 'repo');
    writeBundle(repo, 'a', mlpLayers(1, [8, 16, 2]));
    const server = await startServer({ model_repo: repo, global: { endpoints: { shutdown_grace_seconds: 8 } } }, {
      root: temp.dir,
      env: { ...otlpEnv(`http://127.0.0.1:${port}`), OTEL_EXPORTER_OTLP_TIMEOUT: '500' },
    });
    t.teardown(() => server.stop());
    const x = tensor('x', 'FP32', [1, 8], new Float32Array(8));
    for (let i = 0; i < 5; i++) await server.client.infer('a', [x], { metadata: { traceparent: `00-${'8'.repeat(31)}${i}-9999999999999999-01` } });
    const warned = await server.waitForLog((l) => String(l.msg).startsWith('trace export failed'));
    t.true(warned.failures >= 1, JSON.stringify(warned));
    t.true((await scrapeMetrics(server.adminPort)).stowage_trace_export_failures_total >= 1);
    // Served all the while.
    const { outputs } = await server.client.infer('a', [x]);
    t.deepEqual(outputs[0].shape, [1, 2]);
    const started = Date.now();
    server.child.kill('SIGTERM');
    const [code] = await once(server.child, 'close');
    const took = Date.now() - started;
    t.is(code, 0);
    t.true(took < 6000, `stopped in ${took} ms (grace 8 s, trace flush at most 2 s)`);
    t.log(`collector ${collector}: ${warned.failures} failed export(s) reported; stopped in ${took} ms`);
  });
}

test('with two edge threads each request\'s spans are made on its edge: one connected trace per request, a hooked one\'s hook span in it, exported to the one collector', async (t) => {
  const receiver = await otlpReceiver();
  t.teardown(receiver.close);
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const repo = path.join(temp.dir, 'repo');
  writeBundle(repo, 'a', mlpLayers(1, [64, 8]));
  writeBundle(repo, 'h', mlpLayers(2, [64, 8]));
  writeFileSync(path.join(repo, 'h', 'model.js'), 'export function preprocess({ x }) { return { x }; }\n');
  const server = await startServer({ model_repo: repo, global: { endpoints: { edge_threads: 2 } } }, { root: temp.dir, env: otlpEnv(receiver.url) });
  t.teardown(() => server.stop());
  // A connection each: the kernel spreads them over the two edges by a hash, and 8 all landed on one
  // edge once in a fresh-clone CI run (about 1 run in 128); with 24, about 1 in 8 million.
  const clients = Array.from({ length: 24 }, () => new InferenceClient(server.address, { 'grpc.use_local_subchannel_pool': 1 }));
  t.teardown(() => clients.forEach((c) => c.close()));
  const x = tensor('x', 'FP32', [1, 64], new Float32Array(64).fill(0.5));
  const traceIds = clients.map((_, i) => (i + 1).toString(16).padStart(32, 'a'));
  await Promise.all(clients.map((c, i) => c.infer(i % 2 ? 'h' : 'a', [x], { metadata: { traceparent: `00-${traceIds[i]}-b7ad6b7169203331-01` } })));
  for (const [i, traceId] of traceIds.entries()) {
    const model = i % 2 ? 'h' : 'a';
    const mine = await receiver.until((spans) => {
      const found = spans.filter((s) => s.traceId === traceId);
      return found.some((s) => s.name === `infer ${model}`) && found.some((s) => s.name === 'queue') && (model === 'a' || found.some((s) => s.name === 'hook preprocess + device')) ? found : undefined;
    });
    const request = mine.find((s) => s.name === `infer ${model}`);
    t.is(request.parentSpanId, 'b7ad6b7169203331', `${model}: the caller's child`);
    t.true(mine.filter((s) => s.name !== `infer ${model}`).every((s) => s.parentSpanId === request.spanId), `${model}: every span of the trace under its request's`);
    // The execution's span comes from the device thread, in an export of its own that may land after the edge's.
    const linked = await receiver.until((spans) => spans.some((s) => s.name === `execute ${model}` && (s.links ?? []).some((/** @type {any} */ l) => l.traceId === traceId)) || undefined);
    t.true(linked, `${model}: its execution linked to it`);
  }
  const m = await scrapeMetrics(server.adminPort);
  t.true([0, 1].every((edge) => metric(m, 'stowage_edge_served_requests_total', `edge="${edge}"`) > 0), 'both edges ran traced requests themselves');
});
