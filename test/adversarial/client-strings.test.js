// Errors quote what the client sent, cut short: a 1 MB name comes back as the status it earns,
// not as a failure to fit the message into a gRPC trailer.
import path from 'node:path';
import test from 'ava';
import { status } from '@grpc/grpc-js';
import { ROOT, startServer, tensor } from '../helpers/server.js';

test('a huge model, tensor or region name is answered with its own status and a short message', async (t) => {
  const server = await startServer({ model_repo: path.join(ROOT, 'bundles') });
  t.teardown(() => server.stop());
  const huge = 'n'.repeat(1_000_000);
  const image = tensor('image', 'FP32', [1, 8, 8], new Float32Array(64));
  const cases = /** @type {[string, () => Promise<unknown>, number][]} */ ([
    ['model name', () => server.client.infer(huge, [image]), status.NOT_FOUND],
    ['input name', () => server.client.infer('digits', [{ ...image, name: huge }]), status.INVALID_ARGUMENT],
    ['output name', () => server.client.infer('digits', [image], { outputs: [huge] }), status.INVALID_ARGUMENT],
    ['region name', () => server.client.registerSystemSharedMemory(`triton_${huge}`, '/k', 16), status.INVALID_ARGUMENT],
  ]);
  for (const [what, call, code] of cases) {
    const err = /** @type {any} */ (await t.throwsAsync(call(), undefined, what));
    t.is(err.code, code, `${what}: ${String(err.details).slice(0, 100)}`);
    t.true(err.details.length < 2000, `${what}: ${err.details.length} characters`);
    t.regex(err.details, /\(1\d{6} characters\)/, what);
  }
  t.is((await server.client.infer('digits', [image])).outputs.length, 3, 'still serving');
});
