// Shared memory against a client that changes its objects under the server (a region shrunk after
// registration fails the requests that use it, never the process), keys that are not plain
// objects, offsets and sizes at every edge, overlapping regions, and the switch that turns it off.
import { execFileSync } from 'node:child_process';
import { closeSync, ftruncateSync, mkdirSync, openSync, readFileSync, readSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import test from 'ava';
import { status } from '@grpc/grpc-js';
import { createRegion, destroyRegion, writeRegion } from '../../dist/client/shared-memory.js';
import { FIXTURES, ROOT, startServer, tensor } from '../helpers/server.js';
import { grpcError } from '../helpers/errors.js';

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
    const err = await grpcError(t, server.client.infer('digits', /** @type {any} */ (inputs), /** @type {any} */ (options)), label);
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
    const err = await grpcError(t, server.client.registerSystemSharedMemory('r', key, 16), key.slice(0, 40));
    t.is(/** @type {any} */ (err).code, status.INVALID_ARGUMENT, key.slice(0, 40));
    t.regex(err?.message ?? '', message, key.slice(0, 40));
    t.true((err?.message ?? '').length < 1000, 'the key is echoed cut short');
  }
  // The plain object registers; nothing was left registered by the refusals.
  await server.client.registerSystemSharedMemory('r', `/${base}_file`, 16);
  t.deepEqual(Object.keys(await server.client.systemSharedMemoryStatus()), ['r']);
});

test('offsets and sizes at and past every edge, 2^64-1 included; overlapping regions; the switch that turns it off', async (t) => {
  const server = await startServer({ model_repo: path.join(ROOT, 'bundles') });
  t.teardown(() => server.stop());
  const off = await startServer({ model_repo: path.join(ROOT, 'bundles'), global: { endpoints: { system_shared_memory: false } } });
  t.teardown(() => off.stop());
  const key = `/stowage_adv_${process.pid}_edges`;
  t.teardown(() => {
    try { destroyRegion(key); } catch { /* gone */ }
  });
  createRegion(key, 4096);
  const MAX64 = '18446744073709551615';
  const register = (/** @type {string} */ name, /** @type {string} */ offset, /** @type {string} */ size) =>
    server.client.call('SystemSharedMemoryRegister', { name, key, offset, byte_size: size });
  /** @type {[offset: string, size: string, message: RegExp | null][]} */
  const registrations = [
    ['0', '4096', null],
    ['4095', '1', null],
    ['4096', '1', /holds 4096 bytes, fewer than offset 4096 \+ byte_size 1/],
    ['0', '4097', /holds 4096 bytes, fewer than offset 0 \+ byte_size 4097/],
    ['0', '0', /byte_size > 0/],
    [MAX64, '1', /must be whole numbers/],
    ['0', MAX64, /must be whole numbers/],
    ['9007199254740992', '1', /must be whole numbers/], // 2^53: past what a double holds exactly
  ];
  for (const [i, [offset, size, message]] of registrations.entries()) {
    const label = `register offset ${offset} byte_size ${size}`;
    if (!message) {
      await register(`ok${i}`, offset, size);
      continue;
    }
    const err = await grpcError(t, register(`bad${i}`, offset, size), label);
    t.is(/** @type {any} */ (err).code, status.INVALID_ARGUMENT, label);
    t.regex(err?.message ?? '', message, label);
  }
  t.deepEqual(Object.keys(await server.client.systemSharedMemoryStatus()).sort(), ['ok0', 'ok1']);

  // Requests against region ok0 (the whole 4096 bytes): the image is 256 bytes, probabilities 40.
  const image = Float32Array.from(JSON.parse(readFileSync(path.join(FIXTURES, 'digits_heldout.json'), 'utf8')).images[0]);
  writeRegion(key, 4096 - 256, image);
  const param = (/** @type {string} */ v) => (v.startsWith('-') ? { int64_param: v } : { uint64_param: v });
  const infer = (/** @type {string} */ offset, /** @type {string} */ size) => server.client.call('ModelInfer', {
    model_name: 'digits',
    inputs: [{ name: 'image', datatype: 'FP32', shape: ['1', '8', '8'], parameters: { shared_memory_region: { string_param: 'ok0' }, shared_memory_offset: param(offset), shared_memory_byte_size: param(size) } }],
    outputs: [{ name: 'label' }],
  });
  const answer = await infer(String(4096 - 256), '256');
  t.is(answer.outputs[0].name, 'label', 'the last 256 bytes of the region are read');
  /** @type {[offset: string, size: string, message: RegExp][]} */
  const requests = [
    [String(4096 - 255), '256', /input "image": offset 3841 \+ byte_size 256 is outside region "ok0" of 4096 bytes/],
    ['0', '255', /expected shared_memory_byte_size 256/],
    [MAX64, '256', /shared_memory_offset must be a non-negative int64/],
    ['0', MAX64, /shared_memory_byte_size must be a non-negative int64/],
    ['-1', '256', /shared_memory_offset must be a non-negative int64/],
  ];
  for (const [offset, size, message] of requests) {
    const label = `input at offset ${offset}, byte_size ${size}`;
    const err = await grpcError(t, infer(offset, size), label);
    t.is(/** @type {any} */ (err).code, status.INVALID_ARGUMENT, label);
    t.regex(err?.message ?? '', message, label);
  }

  // Overlapping regions of one object: an output written over the bytes its own input was read
  // from. Inputs are read before outputs are written, so the answer is the one computed inline.
  await server.client.registerSystemSharedMemory('tail', key, 256, 4096 - 256);
  const inline = await server.client.infer('digits', [tensor('image', 'FP32', [1, 8, 8], image)], { outputs: ['probabilities'] });
  const overlapping = await server.client.infer('digits', /** @type {any} */ ([{ name: 'image', datatype: 'FP32', shape: [1, 8, 8], sharedMemory: { region: 'tail', byteSize: 256 } }]),
    /** @type {any} */ ({ outputs: [{ name: 'probabilities', sharedMemory: { region: 'ok0', byteSize: 40, offset: 4096 - 256 } }] }));
  t.is(overlapping.outputs[0].data.length, 0, 'written to the region, not inline');
  const fd = openSync(`/dev/shm/${key.slice(1)}`, 'r');
  const written = new Float32Array(10);
  try { readSync(fd, new Uint8Array(written.buffer), 0, 40, 4096 - 256); } finally { closeSync(fd); }
  t.deepEqual([...written], [.../** @type {Float32Array} */ (inline.outputs[0].data)]);

  // Turned off: registration refused, nothing else changes; the extension is not advertised.
  const refused = await grpcError(t, off.client.registerSystemSharedMemory('r', key, 16));
  t.is(/** @type {any} */ (refused).code, status.INVALID_ARGUMENT);
  t.regex(refused?.message ?? '', /system shared memory is turned off on this server \(endpoints\.system_shared_memory: false\)/);
  t.deepEqual(await off.client.systemSharedMemoryStatus(), {});
  await off.client.unregisterSystemSharedMemory();
  t.false((await off.client.call('ServerMetadata', {})).extensions.includes('system_shared_memory'));
  t.true((await server.client.call('ServerMetadata', {})).extensions.includes('system_shared_memory'));
});

test('a region unregistered while requests use it: those admitted finish on it, later ones are NOT_FOUND, nothing else breaks', async (t) => {
  const server = await startServer({ model_repo: path.join(ROOT, 'bundles') });
  const key = `/stowage_adv_${process.pid}_inflight`;
  t.teardown(async () => {
    try { destroyRegion(key); } catch { /* gone */ }
    await server.stop();
  });
  const image = new Float32Array(64).fill(5);
  createRegion(key, 4096);
  writeRegion(key, 0, image);
  await server.client.registerSystemSharedMemory('busy', key, 4096);
  const expected = (await server.client.infer('digits', [tensor('image', 'FP32', [1, 8, 8], image)], { outputs: ['probabilities'] })).outputs[0].data;
  const fromRegion = /** @type {any[]} */ ([{ name: 'image', datatype: 'FP32', shape: [1, 8, 8], sharedMemory: { region: 'busy', byteSize: 256 } }]);

  // Coalesced rows run in a larger batch than one alone, which changes the last bits of a float.
  const close = (/** @type {ArrayLike<number>} */ got) => Array.from(got).every((v, i) => Math.abs(v - Number(expected[i])) < 1e-5);

  // Forty requests naming the region, and the unregister sent right behind them, before any answer.
  /** @type {Promise<{ data?: any, err?: any }>[]} */
  const before = Array.from({ length: 40 }, (_, i) => server.client.infer('digits', fromRegion, { outputs: ['probabilities'], id: `r${i}` })
    .then((r) => ({ data: r.outputs[0].data }), (err) => ({ err })));
  await server.client.unregisterSystemSharedMemory('busy');
  const answers = await Promise.all(before);
  const finished = answers.filter((a) => a.data);
  t.log(`${finished.length} of 40 finished on the region, ${40 - finished.length} were refused`);
  for (const a of answers) {
    if (a.data) t.true(close(a.data), 'a request admitted before the unregister read the region whole');
    else t.regex(`${a.err.code} ${a.err.details}`, /^5 no shared-memory region "busy" is registered/);
  }
  // Later requests are NOT_FOUND; the name can be registered again and used at once.
  for (const err of await Promise.all(Array.from({ length: 10 }, () => t.throwsAsync(server.client.infer('digits', fromRegion))))) {
    t.is(/** @type {any} */ (err).code, status.NOT_FOUND);
  }
  await server.client.registerSystemSharedMemory('busy', key, 4096);
  t.true(close(/** @type {any} */ ((await server.client.infer('digits', fromRegion, { outputs: ['probabilities'] })).outputs[0].data)));
});
