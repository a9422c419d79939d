// Runs off the device thread, through the real server: with runtime.inline_run_below_ms 0 every
// run goes to a libuv thread, the device keeps taking requests meanwhile, and a run whose every
// request has gone (here: its client cancelled) is terminated instead of computed to the end.
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import test from 'ava';
import { status } from '@grpc/grpc-js';
import { mlpLayers, writeBundle } from '../helpers/mlp-catalog.js';
import { dataAs, startServer, tempDir, tensor } from '../helpers/server.js';

test('a run whose requests have all gone is terminated, and the device serves the next request', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  // Sixteen 1024x1024 layers (64 MiB of weights) over 256 rows: a run long enough to be caught in the middle.
  writeBundle(`${temp.dir}/repo`, 'slow', mlpLayers(9, Array(17).fill(1024)));
  const manifest = path.join(temp.dir, 'repo', 'slow', 'manifest.yaml');
  writeFileSync(manifest, readFileSync(manifest, 'utf8').replace('compiled_batch_sizes: [1, 8]', 'compiled_batch_sizes: [1, 256]'));
  writeBundle(`${temp.dir}/repo`, 'quick', mlpLayers(10, [16, 8, 4]));
  const server = await startServer({ model_repo: `${temp.dir}/repo`, global: { runtime: { inline_run_below_ms: 0, intra_op_threads: 1, cpu_device_memory_bytes: 160 * 2 ** 20 } } }, { root: temp.dir });
  t.teardown(() => server.stop());
  const rows = 256;
  const x = tensor('x', 'FP32', [rows, 1024], new Float32Array(rows * 1024).fill(0.01));
  // The whole run, once, for scale.
  const started = performance.now();
  await server.client.infer('slow', [x]);
  const wholeMs = performance.now() - started;
  // The client goes well inside the run (its stream cancelled): the device is told to drop the
  // request, finds it running alone, and terminates the run. (A deadline shorter than the learned
  // run would not start it at all: it is refused at dispatch, scheduler.ts.)
  const cancelAfter = Math.max(10, Math.round(wholeMs / 8));
  const stream = server.client.stream();
  const gone = new Promise((resolve) => stream.on('error', resolve));
  stream.write({ model_name: 'slow', id: 'late', inputs: [{ name: 'x', datatype: 'FP32', shape: [rows, 1024] }], raw_input_contents: [Buffer.from(new Float32Array(rows * 1024).fill(0.01).buffer)] });
  await new Promise((r) => setTimeout(r, cancelAfter));
  stream.cancel();
  t.is(/** @type {any} */ (await gone).code, status.CANCELLED);
  const warning = await server.waitForLog((l) => /a run was terminated, every request riding in it having been cancelled/.test(l.msg ?? ''));
  t.is(warning.model, 'slow');
  // The device goes on: another model, then the slow one again, answered in full.
  const { outputs } = await server.client.infer('quick', [tensor('x', 'FP32', [1, 16], new Float32Array(16).fill(1))]);
  t.is(dataAs(outputs[0], Float32Array).length, 4);
  const again = await server.client.infer('slow', [x]);
  t.deepEqual(again.outputs[0].shape, [rows, 1024]);
  t.log(`a whole run ${wholeMs.toFixed(0)} ms; the client went after ${cancelAfter} ms`);
});
