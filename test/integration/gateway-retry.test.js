// A gateway retries a full node's refusal once on another holder, and never a quota refusal: the
// Stowage code rides in the trailers (protocol/error-code.ts), which a real node sends with every
// error on gRPC (a header on REST) and the gateway forwards to its client unchanged.
//
// The nodes behind the gateway are gRPC servers scripted here (real grpc-js, real sockets): each
// answers ModelInfer as the test says (ok, queue full, quota exceeded) and counts what it got, so
// which node took which request is known exactly, not inferred from timing.
import * as grpc from '@grpc/grpc-js';
import test from 'ava';
import { loadInferenceClient } from '../../dist/protocol/proto.js';
import { scrapeMetrics, startServer, tempDir, makeRepository, metric } from '../helpers/server.js';
import { grpcError } from '../helpers/errors.js';

const CODE_KEY = 'stowage-error-code';

/**
 * A scripted node serving model "m": `answer` says what its next ModelInfer gets.
 * @param {string} name
 */
async function scriptedNode(name) {
  const node = { name, answer: /** @type {'ok' | 'full' | 'quota'} */ ('ok'), got: 0, address: '' };
  const server = new grpc.Server();
  server.addService(loadInferenceClient().service, {
    RepositoryIndex: (/** @type {any} */ _call, /** @type {any} */ cb) => cb(null, { models: [{ name: 'm', version: '1', state: 'READY', reason: '' }] }),
    ModelInfer: (/** @type {any} */ _call, /** @type {any} */ cb) => {
      node.got++;
      if (node.answer === 'ok') return cb(null, { model_name: 'm', id: name, outputs: [] });
      const metadata = new grpc.Metadata();
      metadata.set(CODE_KEY, node.answer === 'full' ? 'STOWAGE_QUEUE_FULL' : 'STOWAGE_QUOTA_EXCEEDED');
      cb({ code: grpc.status.RESOURCE_EXHAUSTED, details: `${name}: ${node.answer}`, metadata });
    },
  });
  const port = await new Promise((resolve, reject) => server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))));
  node.address = `127.0.0.1:${port}`;
  return { node, stop: () => new Promise((resolve) => server.tryShutdown(() => resolve(undefined))) };
}

const INPUT = { model_name: 'm', inputs: [{ name: 'x', datatype: 'FP32', shape: ['1'], contents: { fp32_contents: [1] } }] };

test('a full node\'s refusal is retried once on another holder; a quota refusal never; the code reaches the client', async (t) => {
  const a = await scriptedNode('a');
  const b = await scriptedNode('b');
  t.teardown(a.stop);
  t.teardown(b.stop);
  const gateway = await startServer({ gateway: { endpoints: [a.node.address, b.node.address], health_seconds: 0.2, scheduling: { mode: 'round_robin' } } });
  t.teardown(() => gateway.stop());
  const infer = () => /** @type {Promise<{ id: string }>} */ (gateway.client.call('ModelInfer', INPUT));

  // a full, b has room: every request is answered by b; those that went to a first were retried once.
  a.node.answer = 'full';
  for (let i = 0; i < 8; i++) t.is((await infer()).id, 'b');
  t.is(b.node.got, 8);
  t.true(a.node.got >= 1, 'round robin sent some to a first'); // how many depends on its turn after each retry
  const retried = a.node.got;
  let samples = await scrapeMetrics(gateway.adminPort);
  t.is(metric(samples, 'stowage_gateway_retries_total', 'reason="holder_full"'), retried);

  // A quota refusal is the tenant's, not the node's: never retried, and its code reaches the client.
  a.node.answer = 'quota';
  a.node.got = b.node.got = 0;
  const outcomes = await Promise.allSettled(Array.from({ length: 8 }, infer));
  const refused = outcomes.filter((o) => o.status === 'rejected');
  t.is(refused.length, a.node.got, 'every request a took was refused there, none sent on');
  t.is(b.node.got, 8 - a.node.got);
  for (const o of refused) {
    const err = /** @type {grpc.ServiceError} */ (/** @type {PromiseRejectedResult} */ (o).reason);
    t.is(err.code, grpc.status.RESOURCE_EXHAUSTED);
    t.deepEqual(err.metadata.get(CODE_KEY), ['STOWAGE_QUOTA_EXCEEDED']);
  }

  // Both full: tried on two nodes, then the refusal with its code; never passed around further.
  a.node.answer = b.node.answer = 'full';
  a.node.got = b.node.got = 0;
  const full = await grpcError(t, infer());
  t.is(full.code, grpc.status.RESOURCE_EXHAUSTED);
  t.deepEqual(full.metadata.get(CODE_KEY), ['STOWAGE_QUEUE_FULL']);
  t.is(a.node.got + b.node.got, 2, 'one try and one retry');
  samples = await scrapeMetrics(gateway.adminPort);
  t.is(metric(samples, 'stowage_gateway_retries_total', 'reason="holder_full"'), retried + 1);
});

test('a node\'s errors carry their Stowage code: in the gRPC trailers and as a REST header', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const repo = makeRepository(temp.dir, {});
  const server = await startServer({ model_repo: repo }, { root: temp.dir });
  t.teardown(() => server.stop());
  const missing = await grpcError(t, server.client.call('ModelInfer', { ...INPUT, model_name: 'ghost' }));
  t.is(missing.code, grpc.status.NOT_FOUND);
  t.deepEqual(missing.metadata.get(CODE_KEY), ['STOWAGE_MODEL_NOT_FOUND']);
  const res = await fetch(`${server.rest}/v2/models/ghost/infer`, { method: 'POST', body: JSON.stringify({ inputs: [] }) });
  t.is(res.status, 404);
  t.is(res.headers.get(CODE_KEY), 'STOWAGE_MODEL_NOT_FOUND');
});
