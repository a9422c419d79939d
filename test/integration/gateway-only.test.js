// Gateway-only mode: two Stowage nodes and a gateway process in front of them, all on loopback.
// The gateway discovers what each node serves, forwards unary and streaming inference and the
// metadata RPCs unchanged, merges RepositoryIndex and /metrics, and when a node is killed and
// restarted during a bounded load, requests for models on the surviving node never fail and the
// killed node's models come back.
import { once } from 'node:events';
import * as grpc from '@grpc/grpc-js';
import test from 'ava';
import { inferAndCheck, random, writeBundle, mlpLayers } from '../helpers/mlp-catalog.js';
import { scrapeMetrics, startServer, tempDir } from '../helpers/server.js';
import { grpcError } from '../helpers/errors.js';

const SIZES = [32, 64, 4];
/** @typedef {import('../../dist/client/client.js').ModelStreamInferResponse} StreamAnswer */

/**
 * A node serving MLPs `models` ([name, seed] each), and how to start it again.
 * @param {import('ava').ExecutionContext} t
 * @param {string} name
 * @param {[string, number][]} models
 * @param {Record<string, string>} [env]
 */
async function node(t, name, models, env = {}) {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const written = models.map(([model, seed]) => writeBundle(`${temp.dir}/repo`, model, mlpLayers(seed, SIZES)));
  const start = (/** @type {Record<string, string>} */ extraEnv = {}) => startServer({ model_repo: `${temp.dir}/repo` }, { root: temp.dir, env: { ...env, ...extraEnv } });
  const server = await start();
  return { name, server, models: written, start };
}

test('two nodes behind a gateway: routing, streaming, merged index and metrics; a killed node recovers and the other never fails', async (t) => {
  const a = await node(t, 'a', [['a0', 1], ['shared', 3]]);
  let b = await node(t, 'b', [['b0', 2], ['shared', 3]]);
  t.teardown(() => a.server.stop());
  let bServer = b.server;
  t.teardown(() => bServer.stop());
  const gateway = await startServer({
    gateway: {
      endpoints: [a.server.address, b.server.address],
      metrics_endpoints: [`127.0.0.1:${a.server.adminPort}`, `127.0.0.1:${b.server.adminPort}`],
      health_seconds: 0.2,
    },
  });
  t.teardown(() => gateway.stop());
  const [a0, shared] = a.models;
  const [b0] = b.models;
  const client = gateway.client;

  // Discovery and forwarding.
  const index = await client.call('RepositoryIndex', {});
  t.deepEqual(index.models.map((m) => [m.name, m.state]), [['a0', 'READY'], ['b0', 'READY'], ['shared', 'READY']]);
  for (const model of [a0, b0, shared]) t.is(await inferAndCheck(client, model, 2, random(1)), null);
  const metadata = await client.call('ModelMetadata', { name: 'b0' });
  t.is(metadata.name, 'b0');
  const missing = await grpcError(t, client.infer('ghost', [{ name: 'x', datatype: 'FP32', shape: [1, 32], data: new Float32Array(32) }]));
  t.is(missing.code, 5);
  t.regex(missing.details, /unknown model "ghost"; the repository serves: a0, b0, shared/);
  t.true((await client.call('ServerReady', {})).ready);

  // Bytes that are not a protobuf message: INVALID_ARGUMENT, for a call or (ending it) a stream; the gateway keeps serving.
  const raw = new grpc.Client(gateway.address, grpc.credentials.createInsecure());
  t.teardown(() => raw.close());
  const garbage = Buffer.from([0x0a, 0x05, 0x61]); // a 5-byte string field with 1 byte left
  const same = (/** @type {Buffer} */ b) => b;
  const bad = await grpcError(t, new Promise((resolve, reject) => raw.makeUnaryRequest('/inference.GRPCInferenceService/ModelInfer', same, same, garbage, (err, res) => (err ? reject(err) : resolve(res)))));
  t.is(bad.code, grpc.status.INVALID_ARGUMENT);
  t.regex(bad.details, /ModelInfer: the request is not a valid inference\.ModelInferRequest message \(model_name at byte 1 claims 5 bytes/);
  const rawStream = raw.makeBidiStreamRequest('/inference.GRPCInferenceService/ModelStreamInfer', same, same);
  const rawAnswers = [];
  rawStream.on('data', (b) => rawAnswers.push(b));
  rawStream.write(garbage); // and no end: the server ends the stream
  const [broken] = await once(rawStream, 'error');
  t.is(broken.code, grpc.status.INVALID_ARGUMENT);
  t.regex(broken.details, /ModelStreamInfer: the request is not a valid inference\.ModelInferRequest message/);
  t.is(rawAnswers.length, 0);
  t.is(await inferAndCheck(client, a0, 1, random(5)), null, 'and it still serves');

  // Streaming: requests for models on both nodes on one stream, each answered with its id.
  const stream = client.stream();
  /** @type {StreamAnswer[]} */
  const answers = [];
  stream.on('data', (/** @type {StreamAnswer} */ r) => answers.push(r));
  const x = () => Buffer.from(new Float32Array(32).fill(0.5).buffer);
  for (const [i, model] of ['a0', 'b0', 'ghost', 'shared'].entries()) {
    stream.write({ model_name: model, id: `r${i}`, inputs: [{ name: 'x', datatype: 'FP32', shape: ['1', '32'] }], raw_input_contents: [x()] });
  }
  stream.end();
  await once(stream, 'end');
  const byId = Object.fromEntries(answers.map((r) => [r.infer_response?.id, r]));
  t.deepEqual(Object.keys(byId).sort(), ['r0', 'r1', 'r2', 'r3']);
  t.is(byId.r1.infer_response?.model_name, 'b0');
  t.regex(byId.r2.error_message, /unknown model "ghost"/);

  // Statistics: one entry per model, summed over the nodes serving it.
  for (let i = 0; i < 4; i++) await inferAndCheck(client, shared, 1, random(i));
  const onNodes = await Promise.all([a, b].map(async (n) => Number((await n.server.client.call('ModelStatistics', { name: 'shared' })).model_stats[0].inference_count)));
  const viaGateway = (await client.call('ModelStatistics', { name: 'shared' })).model_stats;
  t.is(viaGateway.length, 1);
  t.is(Number(viaGateway[0].inference_count), onNodes[0] + onNodes[1]);
  t.true(onNodes[0] > 0 && onNodes[1] > 0, `both nodes served "shared": ${onNodes}`);
  t.deepEqual((await client.call('ModelStatistics', { name: '' })).model_stats.map((s) => s.name).sort(), ['a0', 'b0', 'shared']);

  // Metrics from both nodes, labelled.
  const m = await scrapeMetrics(gateway.adminPort);
  t.true(m[`nv_inference_count{model="a0",version="1",node="127.0.0.1:${a.server.adminPort}"}`] >= 2);
  t.true(m[`nv_inference_count{model="b0",version="1",node="127.0.0.1:${b.server.adminPort}"}`] >= 2);
  t.is(m[`stowage_gateway_node_up{node="${b.server.address}"}`], 1);

  // Bounded load from 6 clients while node b is killed and restarted on the same port.
  /** @type {Record<string, number>} */
  const failures = { a0: 0, shared: 0, b0: 0 };
  /** @type {Record<string, number>} */
  const ok = { a0: 0, shared: 0, b0: 0 };
  // The test moves on when the load has done what it waits for, not after a fixed time.
  /** @type {{ done: () => boolean, resolve: () => void }[]} */
  const waiters = [];
  /** @type {(model: string, count: number) => Promise<void>} */
  const served = (model, count) => new Promise((resolve) => waiters.push({ done: () => ok[model] >= count, resolve }));
  const progressed = () => {
    for (const w of [...waiters]) {
      if (!w.done()) continue;
      waiters.splice(waiters.indexOf(w), 1);
      w.resolve();
    }
  };
  let running = true;
  const load = Promise.all(Array.from({ length: 6 }, async (_, c) => {
    const next = random(10 + c);
    const models = [a0, shared, b0];
    let calls = 0;
    while (running && calls++ < 50_000) { // bounded by time (running) and by count
      const model = models[calls % 3];
      try {
        const wrong = await inferAndCheck(client, model, 1, next);
        if (wrong) t.fail(wrong);
        ok[model.name]++;
        progressed();
      } catch (err) {
        failures[model.name]++;
        if (model !== b0) t.log(`${model.name}: ${/** @type {import('@grpc/grpc-js').ServiceError} */ (err).details ?? err}`);
        await new Promise((r) => setTimeout(r, 5)); // the node is down: do not spin
      }
    }
  }));
  // And one stream whose requests all carry the same empty id (tritonclient's default): each one
  // must get its own answer, even those in flight on node b when it dies.
  const idless = client.stream();
  /** @type {StreamAnswer[]} */
  const idlessAnswers = [];
  idless.on('data', (/** @type {StreamAnswer} */ r) => idlessAnswers.push(r));
  let idlessWritten = 0;
  const idlessLoad = (async () => {
    const y = Buffer.from(new Float32Array(32).fill(0.25).buffer);
    while (running && idlessWritten < 50_000) {
      idless.write({ model_name: 'shared', id: '', inputs: [{ name: 'x', datatype: 'FP32', shape: ['1', '32'] }], raw_input_contents: [y] });
      idlessWritten++;
      while (running && idlessWritten - idlessAnswers.length >= 4) await new Promise((r) => setImmediate(r));
    }
    idless.end();
    await once(idless, 'end');
  })();
  await Promise.all([served('a0', 20), served('shared', 20), served('b0', 20)]); // both nodes serving
  const port = b.server.address.split(':').pop();
  const mark = gateway.logs.length; // only what the gateway logs from now on
  /** @type {(match: (entry: import('../helpers/server.js').LogEntry) => boolean) => (entry: import('../helpers/server.js').LogEntry) => boolean} */
  const after = (match) => (l) => gateway.logs.indexOf(l) >= mark && match(l);
  b.server.child.kill('SIGKILL');
  await once(b.server.child, 'exit');
  await gateway.waitForLog(after((l) => l.msg === 'node down: it does not answer' || l.msg === 'node marked down: it failed a call and its health check'));
  await served('shared', ok.shared + 20); // served by node a alone while b is down
  bServer = await b.start({ INFERENCE_SERVER_ENDPOINTS_GRPC_PORT: port });
  await gateway.waitForLog(after((l) => l.msg === 'node up' && l.node === `127.0.0.1:${port}`));
  const okBefore = ok.b0;
  await served('b0', okBefore + 20); // the restarted node serves its model again
  running = false;
  await load;
  await idlessLoad;
  t.log(`ok ${JSON.stringify(ok)}, failed ${JSON.stringify(failures)}; ${idlessWritten} stream requests without ids`);
  t.is(idlessAnswers.length, idlessWritten, 'every stream request without an id got its own answer');
  t.deepEqual(idlessAnswers.filter((r) => r.error_message !== ''), [], 'and "shared" failed over to the surviving node');
  t.is(failures.a0, 0, 'models on the surviving node never fail');
  t.is(failures.shared, 0, 'a model on both nodes fails over to the surviving one');
  t.true(ok.b0 > okBefore, 'the killed node\'s model is served again after the restart');
  t.is(await inferAndCheck(client, b0, 1, random(99)), null);
});
