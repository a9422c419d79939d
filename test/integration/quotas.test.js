// Quotas on the real server (global.quotas, shared/admission.ts), with the main thread as the only
// edge and with two edge threads: a tenant's requests held in flight past its limit are refused
// RESOURCE_EXHAUSTED at once, naming the limit, over gRPC and REST alike, from whichever edge, while
// another tenant's go on; a tenant past its device-seconds rate is refused until time catches up,
// another is not, counting a request's predicted run from when it is let through; the metrics say so
// per tenant, each tenant's answered requests by their time too.
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import test from 'ava';
import * as grpc from '@grpc/grpc-js';
import { status } from '@grpc/grpc-js';
import { InferenceClient } from '../../dist/client/client.js';
import { FIXTURES, makeRepository, metric, scrapeMetrics, startServer, tempDir, tensor } from '../helpers/server.js';

const ownConnection = (/** @type {string} */ address) => new InferenceClient(address, { 'grpc.use_local_subchannel_pool': 1 });
const as = (/** @type {string} */ tenant) => ({ metadata: { 'stowage-tenant': tenant } });
const x = tensor('x', 'FP32', [1, 1024], new Float32Array(1024).fill(2));

for (const edgeThreads of [0, 2]) {
  test(`edge_threads ${edgeThreads}: a tenant past its requests in flight or its device rate is refused at once, naming the limit; other tenants are not`, async (t) => {
    const temp = tempDir();
    t.teardown(temp.cleanup);
    // gated: echo with a preprocess hook that holds each request until its gate file exists.
    const echo = path.join(FIXTURES, 'models', 'echo');
    const repo = makeRepository(temp.dir, { echo, gated: echo }, { 'gated/model.js': readFileSync(path.join(FIXTURES, 'hooks', 'gated.js')) });
    const quotas = { tenants: { alice: { max_inflight: 2 }, carol: { device_seconds_per_second: 0.000001, burst_seconds: 0.001 } } };
    const server = await startServer({ model_repo: repo, global: { quotas, endpoints: { edge_threads: edgeThreads } } }, { root: temp.dir });
    t.teardown(() => server.stop());
    const clients = Array.from({ length: 4 }, () => ownConnection(server.address));
    t.teardown(() => clients.forEach((c) => c.close()));
    for (const c of clients) await c.infer('echo', [x]); // the connections first, spread over the edges

    // Alice's requests held at their gate: two in flight, the rest refused at once, from whichever edge.
    const gate = path.join(temp.dir, 'gate');
    const gated = { parameters: { gate: { parameter_choice: /** @type {const} */ ('string_param'), string_param: gate } } };
    const held = Promise.allSettled(clients.flatMap((c) => [c.infer('gated', [x], { ...gated, ...as('alice') }), c.infer('gated', [x], { ...gated, ...as('alice') })]));
    const inflight = async () => metric(await scrapeMetrics(server.adminPort), 'stowage_quota_inflight_requests', 'kind="tenant",subject="alice"');
    for (let i = 0; i < 500 && (await inflight()) < 2; i++) await new Promise((resolve) => setTimeout(resolve, 10));
    // Bob (not listed: tenant `other`, unlimited) and a request naming no tenant go on meanwhile.
    const others = await Promise.all([clients[0].infer('echo', [x], as('bob')), clients[1].infer('echo', [x])]);
    t.is(others.length, 2);
    // Over REST too, the tenant named by the header.
    const header = Buffer.from(JSON.stringify({ inputs: [{ name: 'x', datatype: 'FP32', shape: [1, 1024], parameters: { binary_data_size: 4096 } }] }));
    const rest = await fetch(`${server.rest}/v2/models/echo/infer`, { method: 'POST', body: Buffer.concat([header, Buffer.from(new Float32Array(1024).buffer)]), headers: { 'inference-header-content-length': String(header.length), 'stowage-tenant': 'alice' } });
    t.is(rest.status, 429, 'REST answers RESOURCE_EXHAUSTED as Triton does: 429');
    t.regex(await rest.text(), /tenant \\"alice\\" is over its quota of 2 requests in flight \(global\.quotas\.tenants\.alice\.max_inflight\)/);
    // Refused from the call's metadata, before its message is read: bytes that are no ModelInferRequest
    // are refused as alice's quota, not as undecodable; bob's same bytes are read and refused as such.
    const raw = new grpc.Client(server.address, grpc.credentials.createInsecure());
    t.teardown(() => raw.close());
    const garbage = (/** @type {string} */ tenant) => new Promise((resolve) => {
      const md = new grpc.Metadata();
      md.set('stowage-tenant', tenant);
      raw.makeUnaryRequest('/inference.GRPCInferenceService/ModelInfer', (b) => b, (b) => b, Buffer.from([0x0a, 0xff, 0xff, 0x01]), md, (err) => resolve(err));
    });
    const early = /** @type {any} */ (await garbage('alice'));
    t.is(early?.code, status.RESOURCE_EXHAUSTED, early?.details);
    t.regex(early.details, /tenant "alice" is over its quota of 2 requests in flight/);
    t.is(/** @type {any} */ (await garbage('bob'))?.code, status.INVALID_ARGUMENT, 'a tenant under its quota has its message read');
    // REST likewise, from its headers: a body that is no JSON is never parsed.
    const post = (/** @type {string} */ tenant) => fetch(`${server.rest}/v2/models/echo/infer`, { method: 'POST', body: '{not json', headers: { 'stowage-tenant': tenant } });
    t.is((await post('alice')).status, 429, 'alice\'s body is not read');
    t.is((await post('bob')).status, 400, 'bob\'s is, and refused as what it is');
    writeFileSync(gate, '');
    const results = await held;
    const refused = results.filter((r) => r.status === 'rejected');
    t.is(results.length - refused.length, 2, 'two of alice\'s answered');
    t.is(refused.length, 6);
    for (const r of refused) {
      t.is(/** @type {PromiseRejectedResult} */ (r).reason.code, status.RESOURCE_EXHAUSTED);
      t.regex(/** @type {PromiseRejectedResult} */ (r).reason.details, /tenant "alice" is over its quota of 2 requests in flight/);
    }

    // Carol may use a microsecond of device a second: her first request runs, then she is ahead of her rate.
    await clients[2].infer('echo', [x], as('carol'));
    const err = await clients[3].infer('echo', [x], as('carol')).catch((/** @type {any} */ e) => e);
    t.is(err.code, status.RESOURCE_EXHAUSTED);
    t.regex(err.details, /tenant "carol" is over its quota of 0\.000001 device-seconds per second \(burst 0\.001 s\), and it is \d+\.\d\d s ahead of that rate/);
    await t.notThrowsAsync(clients[3].infer('echo', [x], as('alice')), 'alice is not held back by carol\'s rate');

    const m = await scrapeMetrics(server.adminPort);
    t.is(metric(m, 'stowage_quota_refusals_total', 'kind="tenant",subject="alice",limit="max_inflight"'), 9, 'each refusal counted once, whichever edge refused it, from its metadata or not');
    t.is(metric(m, 'stowage_quota_refusals_total', 'kind="tenant",subject="carol",limit="device_seconds_per_second"'), 1);
    t.is(metric(m, 'stowage_quota_inflight_requests', 'kind="tenant",subject="alice"'), 0, 'every place given back');
    t.true(metric(m, 'stowage_quota_device_seconds_total', 'kind="tenant",subject="carol"') > 0, 'carol\'s device time charged');
    t.is(Object.keys(m).filter((k) => k.includes('subject="bob"')).length, 0, 'a tenant the file does not name has no label of its own');
    // Each tenant's answered requests by their time, once each on whichever edge, refusals and failures not: alice's
    // two held at the gate and one after, carol's one, the four first and the one naming no tenant (default), bob's (other).
    const answered = (/** @type {string} */ tenant) => metric(m, 'stowage_tenant_request_duration_seconds_count', `tenant="${tenant}"`);
    t.deepEqual(['alice', 'carol', 'default', 'other'].map(answered), [3, 1, 5, 1]);
    t.is(metric(m, 'stowage_tenant_request_duration_seconds_bucket', 'tenant="alice",le="+Inf"'), 3);
    t.true(metric(m, 'stowage_tenant_request_duration_seconds_sum', 'tenant="alice"') > 0);
    t.is(Object.keys(m).filter((k) => k.startsWith('stowage_tenant_request_duration_seconds') && k.includes('tenant="bob"')).length, 0, 'bob counts as other');
  });
}

test('a request let through is charged its predicted run at once: held requests count against the rate before any of them ran', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const echo = path.join(FIXTURES, 'models', 'echo');
  const repo = makeRepository(temp.dir, { gated: echo }, { 'gated/model.js': readFileSync(path.join(FIXTURES, 'hooks', 'gated.js')) });
  // Dave may run a microsecond of device a second, and be a microsecond ahead: one run's charge puts him past it.
  const quotas = { tenants: { dave: { device_seconds_per_second: 0.000001, burst_seconds: 1 } } };
  const server = await startServer({ model_repo: repo, global: { quotas, endpoints: { edge_threads: 0 } } }, { root: temp.dir });
  t.teardown(() => server.stop());
  const client = ownConnection(server.address);
  t.teardown(() => client.close());
  const open = path.join(temp.dir, 'open');
  writeFileSync(open, '');
  const through = (/** @type {string} */ gate) => ({ parameters: { gate: { parameter_choice: /** @type {const} */ ('string_param'), string_param: gate } } });
  // Another tenant's runs first: the thread learns what a run of the model takes.
  for (let i = 0; i < 3; i++) await client.infer('gated', [x], { ...through(open), ...as('bob') });
  // Dave's four held at a closed gate: none has run, so none is charged after its run yet.
  const gate = path.join(temp.dir, 'gate');
  let refusedEarly = 0;
  const calls = Array.from({ length: 4 }, () => client.infer('gated', [x], { ...through(gate), ...as('dave') }));
  for (const c of calls) c.catch(() => refusedEarly++);
  const held = Promise.allSettled(calls);
  for (let i = 0; i < 200 && refusedEarly < 3; i++) await new Promise((resolve) => setTimeout(resolve, 10));
  t.is(refusedEarly, 3, 'three refused at once, while the first waits at its gate');
  writeFileSync(gate, '');
  const results = await held;
  const refused = results.filter((r) => r.status === 'rejected');
  t.is(results.length - refused.length, 1, 'the first let through, charged its run ahead');
  for (const r of refused) {
    t.is(/** @type {PromiseRejectedResult} */ (r).reason.code, status.RESOURCE_EXHAUSTED);
    t.regex(/** @type {PromiseRejectedResult} */ (r).reason.details, /tenant "dave" is over its quota of 0\.000001 device-seconds per second/);
  }
});

test('through a pooled gateway: the tenant key reaches the node, a quota refusal comes back with its code and is never retried on another node', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const echo = path.join(FIXTURES, 'models', 'echo');
  const quotas = { tenants: { carol: { device_seconds_per_second: 0.000001, burst_seconds: 0.001 } } };
  // Two nodes, each with its own quotas (per node): a quota refusal retried on the other would let carol through.
  const nodes = await Promise.all([0, 1].map(async (i) => {
    const root = path.join(temp.dir, `node-${i}`);
    return startServer({ model_repo: makeRepository(root, { echo }), node_name: `node-${i}`, global: { quotas } }, { root });
  }));
  t.teardown(() => Promise.all(nodes.map((n) => n.stop())));
  const gateway = await startServer({ gateway: { endpoints: nodes.map((n) => n.address), health_seconds: 0.5, scheduling: { mode: 'pooled' } } });
  t.teardown(() => gateway.stop());

  await gateway.client.infer('echo', [x], as('carol')); // runs, and puts carol ahead of her rate on that node
  const refused = await gateway.client.infer('echo', [x], as('carol')).catch((/** @type {any} */ e) => e);
  t.is(refused.code, status.RESOURCE_EXHAUSTED);
  t.regex(refused.details, /tenant "carol" is over its quota of 0\.000001 device-seconds per second/, 'the node saw the tenant the gateway forwarded');
  t.deepEqual(refused.metadata.get('stowage-error-code'), ['STOWAGE_QUOTA_EXCEEDED']);
  await t.notThrowsAsync(gateway.client.infer('echo', [x], as('alice')), 'another tenant goes on');
  const perNode = await Promise.all(nodes.map(async (n) => metric(await scrapeMetrics(n.adminPort), 'nv_inference_request_success', 'model="echo",version="1"')));
  t.is(perNode.reduce((a, b) => a + b, 0), 2, 'carol\'s first and alice\'s: the refusal ran nowhere, nor was it sent to the other node');
  const gw = await scrapeMetrics(gateway.adminPort);
  t.is(metric(gw, 'stowage_gateway_retries_total', 'reason="holder_full"'), 0);
});
