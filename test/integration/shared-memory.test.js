// System shared memory through the real server with our client's helpers: inputs read in place,
// outputs written into the region, bounds and keys checked, and unregistering a region while a
// request uses it is safe.
import path from 'node:path';
import test from 'ava';
import { status } from '@grpc/grpc-js';
import { createRegion, destroyRegion, readRegion, writeRegion } from '../../dist/client/shared-memory.js';
import { bytesOf, FIXTURES, makeRepository, ROOT, startServer, tempDir } from '../helpers/server.js';
import { grpcError } from '../helpers/errors.js';

/** @type {import('../helpers/server.js').Server} */
let server;
/** @type {import('../helpers/server.js').TempDir} */
let temp;
/** @type {string[]} */
const keys = [];

test.before(async () => {
  temp = tempDir();
  const repo = makeRepository(temp.dir, {
    convnet: path.join(FIXTURES, 'models', 'convnet'),
    dtypes: path.join(FIXTURES, 'models', 'dtypes'),
    stretch: path.join(FIXTURES, 'models', 'stretch'),
  });
  server = await startServer({ model_repo: repo }, { root: temp.dir });
});

test.after.always(async () => {
  for (const key of keys) {
    try { destroyRegion(key); } catch { /* already gone */ }
  }
  await server?.stop();
  temp?.cleanup();
});

/**
 * A shared-memory object of `byteSize` bytes made for this test (removed after it).
 * @param {string} label
 * @param {number} byteSize
 */
function region(label, byteSize) {
  const key = `/stowage_it_${process.pid}_${label}`;
  createRegion(key, byteSize);
  keys.push(key);
  return key;
}

const images = (/** @type {number} */ rows, /** @type {number} */ seed) => Float32Array.from({ length: rows * 3 * 32 * 32 }, (_, i) => Math.cos(seed + i * 0.01));

test.serial('inputs are read from the region and outputs written into it', async (t) => {
  const x = images(4, 1);
  const key = region('io', x.byteLength + 4 * 10 * 4);
  writeRegion(key, 0, x);
  await server.client.registerSystemSharedMemory('io', key, x.byteLength + 160);
  const { outputs } = await server.client.infer('convnet',
    [{ name: 'image', datatype: 'FP32', shape: [4, 3, 32, 32], sharedMemory: { region: 'io', byteSize: x.byteLength } }],
    { outputs: [{ name: 'scores', sharedMemory: { region: 'io', byteSize: 160, offset: x.byteLength } }] });
  t.deepEqual(outputs[0].shape, [4, 10]);
  t.is(outputs[0].data.length, 0, 'nothing inline');
  const fromRegion = new Float32Array(readRegion(key, x.byteLength, 160).buffer);
  const inline = (await server.client.infer('convnet', [{ name: 'image', datatype: 'FP32', shape: [4, 3, 32, 32], data: x }])).outputs[0].data;
  t.deepEqual([...fromRegion], [...inline]);
  await server.client.unregisterSystemSharedMemory('io');
});

test.serial('outputs in the region are right whichever way they get there: computed into it, copied in, over the input, coalesced', async (t) => {
  const x = images(4, 3);
  const out = 4 * 10 * 4;
  const key = region('ways', x.byteLength + 8 * out);
  writeRegion(key, 0, x);
  await server.client.registerSystemSharedMemory('ways', key, x.byteLength + 8 * out);
  const inline = [...(await server.client.infer('convnet', [{ name: 'image', datatype: 'FP32', shape: [4, 3, 32, 32], data: x }])).outputs[0].data];
  /** @type {import('../../dist/client/client.js').SharedMemoryInput[]} */
  const input = [{ name: 'image', datatype: 'FP32', shape: [4, 3, 32, 32], sharedMemory: { region: 'ways', byteSize: x.byteLength } }];
  const scoresAt = (/** @type {number} */ offset) => ({ outputs: [{ name: 'scores', sharedMemory: { region: 'ways', byteSize: out, offset } }] });
  const read = (/** @type {number} */ offset) => [...new Float32Array(readRegion(key, offset, out).buffer.slice(0))];

  // Aligned, alone: ONNX Runtime computes into the region.
  await server.client.infer('convnet', input, scoresAt(x.byteLength));
  t.deepEqual(read(x.byteLength), inline, 'computed into the region');
  // Misaligned for FP32: written after the run.
  await server.client.infer('convnet', input, scoresAt(x.byteLength + out + 2));
  t.deepEqual([...new Float32Array(Uint8Array.from(readRegion(key, x.byteLength + out + 2, out)).buffer)], inline, 'copied in at an odd offset');
  // Four at once, each to its own place: whether they run alone or coalesced, each gets its own rows.
  await Promise.all([2, 3, 4, 5].map((k) => server.client.infer('convnet', input, scoresAt(x.byteLength + k * out))));
  for (const k of [2, 3, 4, 5]) t.deepEqual(read(x.byteLength + k * out), inline, `concurrent request ${k}`);
  // Over the request's own input bytes: ONNX Runtime must read the whole input before it is overwritten.
  await server.client.infer('convnet', input, scoresAt(0));
  t.deepEqual(read(0), inline, 'written over the input');
  await server.client.unregisterSystemSharedMemory('ways');
});

test.serial('an output whose size the graph leaves open is answered as computed, in the region as inline', async (t) => {
  // stretch's manifest says y is [n, 3]; the model computes [n, 4]. ONNX Runtime cannot be handed a
  // [1, 3] tensor to fill, so the output is copied in after the run, whole.
  const x = Float32Array.from([5, -7]);
  const key = region('stretch', 64);
  await server.client.registerSystemSharedMemory('stretch', key, 64);
  const inline = (await server.client.infer('stretch', [{ name: 'x', datatype: 'FP32', shape: [1, 2], data: x }])).outputs[0];
  t.deepEqual(inline.shape, [1, 4]);
  const { outputs } = await server.client.infer('stretch', [{ name: 'x', datatype: 'FP32', shape: [1, 2], data: x }],
    { outputs: [{ name: 'y', sharedMemory: { region: 'stretch', byteSize: 32 } }] });
  t.deepEqual(outputs[0].shape, [1, 4]);
  t.deepEqual([...new Float32Array(Uint8Array.from(readRegion(key, 0, 16)).buffer)], [5, -7, 5, -7]);
  await server.client.unregisterSystemSharedMemory('stretch');
});

test.serial('unregistering a region while requests read it is safe, and they answer correctly', async (t) => {
  const x = images(32, 2);
  const key = region('busy', x.byteLength);
  writeRegion(key, 0, x);
  const reference = (await server.client.infer('convnet', [{ name: 'image', datatype: 'FP32', shape: [32, 3, 32, 32], data: x }])).outputs[0].data;
  await server.client.registerSystemSharedMemory('busy', key, x.byteLength);
  /** @type {import('../../dist/client/client.js').SharedMemoryInput[]} */
  const input = [{ name: 'image', datatype: 'FP32', shape: [32, 3, 32, 32], sharedMemory: { region: 'busy', byteSize: x.byteLength } }];
  const inflight = Array.from({ length: 4 }, () => server.client.infer('convnet', input));
  await server.client.unregisterSystemSharedMemory('busy');
  destroyRegion(key); // the client removes the object too; the server's mapping stays valid
  // The requests reached the server before the unregister (one connection, in order): all finish, right.
  for (const r of await Promise.allSettled(inflight)) {
    if (r.status === 'rejected') t.fail(r.reason?.details);
    else t.deepEqual([...r.value.outputs[0].data], [...reference]);
  }
  const after = await grpcError(t, server.client.infer('convnet', input));
  t.is(after.code, status.NOT_FOUND);
  t.regex(after.details, /no shared-memory region "busy" is registered/);
});

test.serial('BYTES inputs are parsed from the region', async (t) => {
  const strings = ['alpha', '', 'ünï', 'x'.repeat(100), 'e', 'f'].map((s) => new TextEncoder().encode(s));
  const framed = new Uint8Array(strings.reduce((n, s) => n + 4 + s.length, 0));
  let at = 0;
  for (const s of strings) {
    new DataView(framed.buffer).setUint32(at, s.length, true);
    framed.set(s, at + 4);
    at += 4 + s.length;
  }
  const key = region('bytes', framed.byteLength);
  writeRegion(key, 0, framed);
  await server.client.registerSystemSharedMemory('bytes', key, framed.byteLength);
  /** @type {Record<string, [import('../../dist/shared/dtypes.js').Datatype, new (length: number) => import('../../dist/client/client.js').TypedArray]>} */
  const numeric = { bool: ['BOOL', Uint8Array], u8: ['UINT8', Uint8Array], u16: ['UINT16', Uint16Array], u32: ['UINT32', Uint32Array],
    u64: ['UINT64', BigUint64Array], i8: ['INT8', Int8Array], i16: ['INT16', Int16Array], i32: ['INT32', Int32Array],
    i64: ['INT64', BigInt64Array], f16: ['FP16', Uint16Array], f32: ['FP32', Float32Array], f64: ['FP64', Float64Array] };
  /** @type {(import('../../dist/client/client.js').Tensor | import('../../dist/client/client.js').SharedMemoryInput)[]} */
  const inputs = Object.entries(numeric).map(([n, [datatype, Ctor]]) => ({ name: `in_${n}`, datatype, shape: [2, 3], data: new Ctor(6) }));
  inputs.push({ name: 'in_bytes', datatype: 'BYTES', shape: [2, 3], sharedMemory: { region: 'bytes', byteSize: framed.byteLength } });
  const { outputs } = await server.client.infer('dtypes', inputs, { outputs: ['out_bytes'] });
  t.deepEqual(bytesOf(outputs[0]).map((b) => new TextDecoder().decode(b)), strings.map((s) => new TextDecoder().decode(s)));
  await server.client.unregisterSystemSharedMemory('bytes');
});

test('keys that are not shared-memory names are refused before anything is opened', async (t) => {
  for (const key of ['no_slash', '/a/b', '/../../etc/passwd', '/..']) {
    const err = await grpcError(t, server.client.registerSystemSharedMemory(`k${keys.length}`, key, 16));
    t.is(err.code, status.INVALID_ARGUMENT, key);
    t.regex(err.details, /not a POSIX shared-memory name/, key);
  }
});

test('status lists what is registered; names starting with triton_ are reserved', async (t) => {
  const key = region('status', 64);
  await server.client.registerSystemSharedMemory('st', key, 32, 16);
  t.deepEqual((await server.client.systemSharedMemoryStatus('st')).st, { name: 'st', key, offset: 16, byteSize: 32 });
  const reserved = await grpcError(t, server.client.registerSystemSharedMemory('triton_x', key, 16));
  t.is(reserved.code, status.INVALID_ARGUMENT);
  await server.client.unregisterSystemSharedMemory('st');
  const gone = await grpcError(t, server.client.systemSharedMemoryStatus('st'));
  t.is(gone.code, status.NOT_FOUND);
});
