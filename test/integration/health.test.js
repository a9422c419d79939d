// The standard gRPC health service (grpc.health.v1) on the server's gRPC port, called by the
// grpc-node team's service definition and by grpc-health-probe (what Kubernetes' docs probe gRPC
// servers with; tools/install-health-probe.sh installs it): a model's name is that model; any
// other name, "" and "inference.GRPCInferenceService" among them, is the server, as Triton answers.
// Through a shutdown the port stays open while requests drain: probes hear NOT_SERVING, Watch
// streams end at once, new inferences are refused, the one in flight completes, the process exits 0.
import { spawnSync } from 'node:child_process';
import http2 from 'node:http2';
import { once } from 'node:events';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import test from 'ava';
import * as grpc from '@grpc/grpc-js';
import { service as healthDefinition } from 'grpc-health-check';
import { InferenceClient } from '../../dist/client/client.js';
import { FIXTURES, makeRepository, ROOT, startServer, tempDir, tensor } from '../helpers/server.js';
import { grpcError } from '../helpers/errors.js';

const PROBE = path.join(ROOT, '.toolchain', 'gopath', 'bin', 'grpc-health-probe');

/**
 * A grpc.health.v1 client on `address`.
 * @param {string} address
 */
function healthClient(address) {
  const Client = grpc.makeGenericClientConstructor(/** @type {grpc.ServiceDefinition} */ (/** @type {unknown} */ (healthDefinition)), 'Health');
  const client = new Client(address, grpc.credentials.createInsecure());
  /** @type {(service: string) => Promise<string>} */
  const check = (service) => new Promise((resolve, reject) => {
    client.check({ service }, (/** @type {grpc.ServiceError | null} */ err, /** @type {{ status: string }} */ res) => (err ? reject(err) : resolve(res.status)));
  });
  /** A Watch stream: every status it sends, and its end (its status code). */
  const watch = (/** @type {string} */ service) => {
    const call = client.watch({ service });
    /** @type {string[]} */
    const seen = [];
    call.on('data', (/** @type {{ status: string }} */ m) => seen.push(m.status));
    const ended = new Promise((resolve) => {
      call.on('end', () => resolve('end'));
      call.on('error', (/** @type {grpc.ServiceError} */ e) => resolve(`error ${e.code}`));
    });
    return { seen, ended };
  };
  return { check, watch, close: () => client.close() };
}

/**
 * grpc-health-probe's exit status for `service` (0 SERVING, 4 NOT_SERVING, 2 connection refused).
 * @param {string} address
 * @param {string} service
 */
const probe = (address, service) => spawnSync(PROBE, [`-addr=${address}`, `-service=${service}`, '-connect-timeout=2s', '-rpc-timeout=2s'], { encoding: 'utf8' });

test('Check: a model\'s name is that model as it loads and unloads; any other name is the server, as Triton answers', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const repo = makeRepository(temp.dir, { digits: path.join(ROOT, 'bundles', 'digits'), digits_u8: path.join(ROOT, 'bundles', 'digits_u8') });
  const server = await startServer({ model_repo: repo, global: { model_control_mode: 'explicit' } }, { root: temp.dir });
  t.teardown(() => server.stop());
  const health = healthClient(server.address);
  t.teardown(() => health.close());
  for (const name of ['', 'inference.GRPCInferenceService', 'grpc.health.v1.Health', 'no_such_model']) t.is(await health.check(name), 'SERVING', `"${name}": the server`);
  t.is(await health.check('digits'), 'NOT_SERVING', 'explicit mode: in the repository, not loaded');
  await server.client.call('RepositoryModelLoad', { model_name: 'digits' });
  t.is(await health.check('digits'), 'SERVING');
  await server.client.call('RepositoryModelUnload', { model_name: 'digits' });
  t.is(await health.check('digits'), 'NOT_SERVING', 'unloaded');
  // grpc-health-probe, as a Kubernetes exec probe runs it.
  t.true(existsSync(PROBE), `grpc-health-probe is missing at ${PROBE}: tools/install-health-probe.sh installs it (test/run.sh runs it)`);
  for (const name of ['', 'inference.GRPCInferenceService']) {
    const run = probe(server.address, name);
    t.is(run.status, 0, `${name}: ${run.stdout}${run.stderr}`);
    t.regex(run.stdout + run.stderr, /SERVING/);
  }
  t.is(probe(server.address, 'digits').status, 4, 'NOT_SERVING: grpc-health-probe exits 4');
});

test('Watch sends each change; shutdown: probes still connect and hear NOT_SERVING, Watch streams end at once, new inferences are refused, the request in flight completes', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const echoManifest = readFileSync(path.join(FIXTURES, 'models', 'echo', 'manifest.yaml'), 'utf8');
  // A model whose preprocess hook holds each request until its gate file exists.
  const repo = makeRepository(temp.dir, { echo: path.join(FIXTURES, 'models', 'echo') }, {
    'gated/manifest.yaml': echoManifest, 'gated/model.js': readFileSync(path.join(FIXTURES, 'hooks', 'gated.js')),
  });
  writeFileSync(path.join(repo, 'gated', 'model.onnx'), readFileSync(path.join(FIXTURES, 'models', 'echo', 'model.onnx')));
  const server = await startServer({ model_repo: repo, global: { model_control_mode: 'explicit', endpoints: { shutdown_grace_seconds: 20 } } }, { root: temp.dir });
  t.teardown(() => server.stop());
  const health = healthClient(server.address);
  t.teardown(() => health.close());
  const watcher = health.watch('echo');
  const serverWatch = health.watch('');
  await new Promise((resolve) => setTimeout(resolve, 200));
  await server.client.call('RepositoryModelLoad', { model_name: 'echo' });
  await server.client.call('RepositoryModelLoad', { model_name: 'gated' });
  for (let i = 0; i < 50 && watcher.seen.length < 2; i++) await new Promise((resolve) => setTimeout(resolve, 20));
  t.deepEqual(watcher.seen, ['NOT_SERVING', 'SERVING'], 'the status when asked, then the change');

  // A request held in flight by its gate; then SIGTERM.
  const gate = path.join(temp.dir, 'gate');
  const x = tensor('x', 'FP32', [1, 1024], new Float32Array(1024).fill(2));
  const held = server.client.infer('gated', [x], { parameters: { gate: { parameter_choice: 'string_param', string_param: gate } } });
  for (let i = 0; i < 100; i++) {
    const m = await fetch(`http://127.0.0.1:${server.adminPort}/metrics`).then((r) => r.text());
    if (/stowage_grpc_inflight_requests (\d+)/.exec(m)?.[1] === '1') break;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  const watchEndsBy = Date.now() + 2000;
  server.child.kill('SIGTERM');
  t.is(await Promise.race([serverWatch.ended, new Promise((resolve) => setTimeout(() => resolve('still open'), Math.max(0, watchEndsBy - Date.now())))]), 'end', 'a Watch stream ends when shutdown starts');
  t.is(serverWatch.seen.at(-1), 'NOT_SERVING');
  await watcher.ended;
  // Draining: a new connection's probe is answered, NOT_SERVING; a new inference is refused.
  const fresh = healthClient(server.address);
  t.is(await fresh.check(''), 'NOT_SERVING');
  t.is(await fresh.check('inference.GRPCInferenceService'), 'NOT_SERVING');
  fresh.close();
  t.is(probe(server.address, '').status, 4, 'grpc-health-probe connects and hears NOT_SERVING');
  const late = new InferenceClient(server.address);
  const refused = await grpcError(t, late.infer('echo', [x]));
  late.close();
  t.is(refused.code, grpc.status.UNAVAILABLE);
  t.regex(refused.details, /shutting down/);
  const rest = await fetch(`${server.rest}/v2/health/ready`);
  t.is(rest.status, 400, 'REST readiness: not ready while draining');
  // The held request completes once let go, and the process exits 0.
  writeFileSync(gate, '');
  const { outputs } = await held;
  t.deepEqual([...new Float32Array(/** @type {Float32Array} */ (outputs[0].data))].slice(0, 3), [2, 2, 2]);
  const [code] = await once(server.child, 'close');
  t.is(code, 0);
});

test('shutdown is not held by a Watch whose client never finished asking: the process exits at once, not after the grace period', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const repo = makeRepository(temp.dir, { echo: path.join(FIXTURES, 'models', 'echo') });
  const server = await startServer({ model_repo: repo, global: { endpoints: { shutdown_grace_seconds: 8 } } }, { root: temp.dir });
  t.teardown(() => server.stop());
  // A Watch request whose message came but whose end did not (a stream left half-open): grpc-js
  // never runs its handler, so it is not among the Watch streams shutdown ends.
  const client = http2.connect(`http://${server.address}`);
  t.teardown(() => client.destroy());
  const stream = client.request({ ':method': 'POST', ':path': '/grpc.health.v1.Health/Watch', 'content-type': 'application/grpc', te: 'trailers' });
  stream.on('error', () => {});
  stream.write(Buffer.from([0, 0, 0, 0, 0])); // an empty HealthCheckRequest, and no END_STREAM
  await new Promise((resolve) => setTimeout(resolve, 300));
  const started = Date.now();
  server.child.kill('SIGTERM');
  const [code] = await once(server.child, 'close');
  const tookMs = Date.now() - started;
  t.is(code, 0);
  t.true(tookMs < 6000, `exited ${tookMs} ms after SIGTERM (grace 8 s, which it used to wait out)`);
});
