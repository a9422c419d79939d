// Shared memory against a client that changes its objects under the server: a region shrunk after
// registration fails the requests that use it, never the process.
import { execFileSync } from 'node:child_process';
import { closeSync, ftruncateSync, mkdirSync, openSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import test from 'ava';
import { status } from '@grpc/grpc-js';
import { createRegion, destroyRegion, writeRegion } from '../../dist/client/shared-memory.js';
import { ROOT, startServer, tensor } from '../helpers/server.js';

const resize = (/** @type {string} */ key, /** @type {number} */ bytes) => {
  const fd = openSync(`/dev/shm/${key.slice(1)}`, 'r+');
  try { ftruncateSync(fd, bytes); } finally { closeSync(fd); }
};

test('a region truncated after registration fails its requests with INVALID_ARGUMENT; the server lives on', async (t) => {
  const server = await startServer({ model_repo: path.join(ROOT, 'bundles') });
  const key = `/stowage_adv_${process.pid}_shrunk`;
  t.teardown(async () => {
    try { destroyRegion(key); } catch { /* gone */ }
    await server.stop();
  });
  const image = new Float32Array(64).fill(3);
  createRegion(key, 4096);
  writeRegion(key, 0, image);
  await server.client.registerSystemSharedMemory('r', key, 4096);
  const fromRegion = /** @type {any[]} */ ([{ name: 'image', datatype: 'FP32', shape: [1, 8, 8], sharedMemory: { region: 'r', byteSize: 256 } }]);
  const toRegion = { outputs: [{ name: 'probabilities', sharedMemory: { region: 'r', byteSize: 40, offset: 1024 } }] };
  const first = await server.client.infer('digits', fromRegion);
  t.is(first.outputs.length, 3, 'answered while the region is whole');

  resize(key, 0); // the attack: used to end the process with SIGBUS on the next request
  for (const [label, inputs, options] of /** @type {const} */ ([
    ['an input read from it', fromRegion, {}],
    ['an output written to it', [tensor('image', 'FP32', [1, 8, 8], image)], toRegion],
  ])) {
    const err = await t.throwsAsync(server.client.infer('digits', /** @type {any} */ (inputs), /** @type {any} */ (options)), undefined, label);
    t.is(/** @type {any} */ (err).code, status.INVALID_ARGUMENT, label);
    t.regex(err?.message ?? '', /was shrunk to 0 bytes after its region was registered/, label);
  }
  // Half of it back: an input in the first 256 bytes is covered again, an output at 1024 is not.
  resize(key, 512);
  writeRegion(key, 0, image);
  t.deepEqual((await server.client.infer('digits', fromRegion)).outputs[2].data, first.outputs[2].data);
  await t.throwsAsync(server.client.infer('digits', [tensor('image', 'FP32', [1, 8, 8], image)], /** @type {any} */ (toRegion)), { message: /shrunk to 512 bytes/ });
  // Other requests, coalesced or not, were never affected; the process is alive.
  const inline = await Promise.all(Array.from({ length: 8 }, () => server.client.infer('digits', [tensor('image', 'FP32', [1, 8, 8], image)])));
  for (const r of inline) t.deepEqual(r.outputs[2].data, first.outputs[2].data);
});

test('keys that are not plain shared-memory objects are refused INVALID_ARGUMENT, naming what is wrong', async (t) => {
  const server = await startServer({ model_repo: path.join(ROOT, 'bundles') });
  const base = `stowage_adv_${process.pid}`;
  const made = [`${base}_file`, `${base}_link`, `${base}_fifo`, `${base}_dir`].map((n) => `/dev/shm/${n}`);
  t.teardown(async () => {
    for (const p of made) rmSync(p, { recursive: true, force: true });
    await server.stop();
  });
  writeFileSync(made[0], Buffer.alloc(4096));
  symlinkSync(made[0], made[1]);
  execFileSync('mkfifo', [made[2]]);
  mkdirSync(made[3]);
  /** @type {[key: string, message: RegExp][]} */
  const corpus = [
    [`/${base}_file\0tail`, /not a POSIX shared-memory name/], // shm_open would see only "/..._file"
    [`/${base}_link`, /not a link or a directory/],
    [`/${base}_fifo`, /not a regular shared-memory object/],
    [`/${base}_dir`, /not a link or a directory/],
    ['/../etc/passwd', /not a POSIX shared-memory name/],
    [`/${'k'.repeat(1_000_000)}`, /\(1000001 characters\)/],
  ];
  for (const [key, message] of corpus) {
    const err = await t.throwsAsync(server.client.registerSystemSharedMemory('r', key, 16), undefined, key.slice(0, 40));
    t.is(/** @type {any} */ (err).code, status.INVALID_ARGUMENT, key.slice(0, 40));
    t.regex(err?.message ?? '', message, key.slice(0, 40));
    t.true((err?.message ?? '').length < 1000, 'the key is echoed cut short');
  }
  // The plain object registers; nothing was left registered by the refusals.
  await server.client.registerSystemSharedMemory('r', `/${base}_file`, 16);
  t.deepEqual(Object.keys(await server.client.systemSharedMemoryStatus()), ['r']);
});
