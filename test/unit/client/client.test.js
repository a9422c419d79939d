// The client is for callers that talk to a server: importing it must not load ONNX Runtime or
// any server code. A child process records every module the import resolves.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import test from 'ava';
import { ROOT, startServer, tensor } from '../../helpers/server.js';
import { grpcError } from '../../helpers/errors.js';

const run = promisify(execFile);

test('importing the client loads neither onnxruntime nor server code', async (t) => {
  const script = `
    import { registerHooks } from 'node:module';
    const seen = [];
    registerHooks({ resolve(specifier, context, next) { const r = next(specifier, context); seen.push(r.url); return r; } });
    const { InferenceClient } = await import('./dist/client/client.js');
    if (typeof InferenceClient !== 'function') throw new Error('no InferenceClient');
    console.log(JSON.stringify(seen));
  `;
  const { stdout } = await run(process.execPath, ['--input-type=module', '-e', script], { cwd: ROOT });
  /** @type {string[]} */
  const urls = JSON.parse(stdout);
  t.true(urls.some((u) => u.includes('@grpc/grpc-js')), 'sanity: the hook saw the client\'s imports');
  const root = new URL(`file://${ROOT}`).href;
  const ours = urls.filter((u) => u.startsWith(`${root}dist/`)).map((u) => u.slice(root.length)).sort();
  t.deepEqual(ours, ['dist/client/client.js', 'dist/protocol/proto.js', 'dist/shared/bytes-elements.js', 'dist/shared/constants.js', 'dist/shared/dtypes.js']);
  t.false(urls.some((u) => u.includes('onnxruntime')), 'onnxruntime-node must not load');
});

test('inferMany runs requests concurrently and returns results in input order', async (t) => {
  const server = await startServer({ model_repo: `${ROOT}/bundles` });
  t.teardown(() => server.stop());
  const image = (/** @type {number} */ v) => [tensor('image', 'FP32', [1, 8, 8], new Float32Array(64).fill(v))];
  const requests = [0, 4, 8, 12, 16].map(image);
  const results = await server.client.inferMany('digits', requests, { outputs: ['logits'], concurrency: 3 });
  t.is(results.length, 5);
  for (const [i, outputs] of results.entries()) {
    const alone = (await server.client.infer('digits', requests[i], { outputs: ['logits'] })).outputs;
    // Coalesced or alone, the same logits; the last bits may differ, as the row count picks the kernel.
    t.is(outputs[0].data.length, alone[0].data.length);
    const [got, want] = [outputs[0].data, alone[0].data].map((d) => /** @type {Float32Array} */ (d));
    got.forEach((v, k) => t.true(Math.abs(v - want[k]) < 1e-4 * (1 + Math.abs(v)), `logit ${k}: ${v} vs ${want[k]}`));
  }
});

test('errors reach the caller with the gRPC status and the server\'s message', async (t) => {
  const server = await startServer({ model_repo: `${ROOT}/bundles` });
  t.teardown(() => server.stop());
  const err = await grpcError(t, server.client.infer('digits', [{ name: 'image', datatype: 'FP32', shape: [1, 8], data: new Float32Array(8) }]));
  t.is(err.code, 3);
  t.regex(err.details, /expected shape \[-1, 8, 8\]/);
  await t.throwsAsync(server.client.call('NoSuchRpc'), { message: /no RPC NoSuchRpc/ });
});
