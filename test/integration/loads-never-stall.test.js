// A model that takes seconds to compile, loaded beside one that is serving, must not stall it: the
// compiler thread compiles (and reads the weights into host RAM) while the device keeps executing,
// and the device only opens the weightless session once the compiled files are ready. Before this,
// the device's dispatch loop awaited the whole compile and a request for digits waited seconds.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import test from 'ava';
import { mlpLayers, writeBundle } from '../helpers/mlp-catalog.js';
import { dataAs, FIXTURES, makeRepository, ROOT, startServer, tempDir } from '../helpers/server.js';

const heldout = JSON.parse(readFileSync(path.join(FIXTURES, 'digits_heldout.json'), 'utf8'));
const image = Float32Array.from(heldout.images[0]);
const CLIENTS = 2;

const p99 = (/** @type {number[]} */ latencies) => [...latencies].sort((a, b) => a - b)[Math.min(latencies.length - 1, Math.floor(latencies.length * 0.99))];

/**
 * Send digits requests from CLIENTS loops until `until()` says stop; the latencies in ms.
 * @param {import('../../dist/client/client.js').InferenceClient} client
 * @param {(answered: number) => boolean} until
 */
async function traffic(client, until) {
  /** @type {number[]} */
  const latencies = [];
  await Promise.all(Array.from({ length: CLIENTS }, async () => {
    while (!until(latencies.length)) {
      const started = performance.now();
      const { outputs } = await client.infer('digits', [{ name: 'image', datatype: 'FP32', shape: [1, 8, 8], data: image }], { outputs: ['label'] });
      latencies.push(performance.now() - started);
      const label = Number(dataAs(outputs[0], BigInt64Array)[0]);
      if (label !== heldout.labels[0]) throw new Error(`digits answered ${label}, expected ${heldout.labels[0]}`);
    }
  }));
  return latencies;
}

test('requests for a loaded model keep completing, none held for the load, while a large model compiles on its device', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const repo = makeRepository(temp.dir, { digits: path.join(ROOT, 'bundles', 'digits') });
  // About 134 MB of weights: hashing, ONNX Runtime's full optimisation and the split take seconds.
  writeBundle(repo, 'large', mlpLayers(5, [2048, 4096, 4096, 2048]));
  const server = await startServer({ model_repo: repo, global: { model_control_mode: 'explicit' } }, { root: temp.dir });
  t.teardown(() => server.stop());
  await server.client.call('RepositoryModelLoad', { model_name: 'digits' });

  await traffic(server.client, (n) => n >= 200); // warm up
  const quiet = await traffic(server.client, (n) => n >= 600);

  let loaded = false;
  const loadStarted = performance.now();
  const load = server.client.call('RepositoryModelLoad', { model_name: 'large' }).finally(() => { loaded = true; });
  const during = await traffic(server.client, () => loaded);
  await load;
  const loadMs = performance.now() - loadStarted;

  const index = await server.client.call('RepositoryIndex', {});
  t.is(index.models.find((m) => m.name === 'large')?.state, 'READY');
  t.log(`load of the large model: ${Math.round(loadMs)} ms; digits p99 ${p99(quiet).toFixed(2)} ms quiet, ${p99(during).toFixed(2)} ms during the load (${during.length} requests, max ${Math.max(...during).toFixed(1)} ms)`);
  // The load really took long enough to matter: a stalled loop would hold requests for all of it.
  t.true(loadMs > 20 * p99(quiet), `the load took ${loadMs} ms, too short to test a stall`);
  t.true(during.length >= 50, `only ${during.length} requests completed during a ${Math.round(loadMs)} ms load`);
  // A stall holds the requests in flight for the load's seconds: none may wait a quarter of it.
  // (Measured against the load's own length, which a busy machine stretches as much as it does the
  // requests; how much the compile's share of the cores costs the p99 is logged above, not asserted:
  // on a loaded machine it is the machine's figure, not the server's.)
  t.true(Math.max(...during) < loadMs / 4, `a request waited ${Math.max(...during).toFixed(0)} ms of a ${Math.round(loadMs)} ms load`);
});
