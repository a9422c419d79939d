// The standard gRPC health service (grpc.health.v1) on the server's gRPC port, called with the
// service definition the grpc-node team ships (what Kubernetes' gRPC probes speak): "" is the
// server, each model a service of its name, following its state; unknown names are NOT_FOUND.
import path from 'node:path';
import test from 'ava';
import * as grpc from '@grpc/grpc-js';
import { service as healthDefinition } from 'grpc-health-check';
import { makeRepository, ROOT, startServer, tempDir } from '../helpers/server.js';
import { grpcError } from '../helpers/errors.js';

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
  return { check, close: () => client.close() };
}

test('grpc.health.v1 Check: the server, each model as it loads and unloads, NOT_FOUND for an unknown name', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const repo = makeRepository(temp.dir, { digits: path.join(ROOT, 'bundles', 'digits'), digits_u8: path.join(ROOT, 'bundles', 'digits_u8') });
  const server = await startServer({ model_repo: repo, global: { model_control_mode: 'explicit' } }, { root: temp.dir });
  t.teardown(() => server.stop());
  const health = healthClient(server.address);
  t.teardown(() => health.close());
  t.is(await health.check(''), 'SERVING', 'the server');
  t.is(await health.check('digits'), 'NOT_SERVING', 'explicit mode: in the repository, not loaded');
  await server.client.call('RepositoryModelLoad', { model_name: 'digits' });
  t.is(await health.check('digits'), 'SERVING');
  await server.client.call('RepositoryModelUnload', { model_name: 'digits' });
  t.is(await health.check('digits'), 'NOT_SERVING', 'unloaded');
  t.is((await grpcError(t, health.check('no_such_model'))).code, grpc.status.NOT_FOUND);
});
