// Every copy of a request's tensor bytes, counted on the real server and held against the table at
// the top of src/shared/request-path.ts: a copy added to (or removed from) a path fails this test until
// the table says so. The server runs under test/helpers/copy-probe.cjs, which logs every copy of
// at least MIN_BYTES that JavaScript makes in any of its threads; the table's `native` copies
// (onnxruntime-node's, in C++) are the ones the probe cannot see. Echo's tensors are f32[n, 1024],
// 4 KiB a row, so a request's input and output each weigh `rows * 4096` bytes: the copies of a
// request are the bytes the probe saw, in units of that.
import { copyFileSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { open } from 'node:fs/promises';
import path from 'node:path';
import test from 'ava';
import { createRegion, destroyRegion, readRegion, writeRegion } from '../../dist/client/shared-memory.js';
import { loadInferenceClient } from '../../dist/protocol/proto.js';
import { dataAs, FIXTURES, makeRepository, ROOT, startServer, tempDir, tensor } from '../helpers/server.js';

/** Copies smaller than this are not the tensors' (a small message's tensor is 16 KiB). */
const MIN_BYTES = 12 * 1024;
const ROW_BYTES = 4096;

/**
 * The table of src/shared/request-path.ts: path -> its copies and how many of them are native.
 * @returns {Map<string, { copies: number, native: number }>}
 */
function copyTable() {
  const source = readFileSync(path.join(ROOT, 'src', 'shared', 'request-path.ts'), 'utf8');
  const rows = new Map();
  for (const line of source.split('\n')) {
    const cells = line.replace(/^\s*\*\s*/, '').split('|').map((c) => c.trim());
    // | path | copies | native | each copy | hops |
    if (cells.length >= 6 && /^\d+$/.test(cells[2]) && /^\d+$/.test(cells[3])) rows.set(cells[1], { copies: Number(cells[2]), native: Number(cells[3]) });
  }
  return rows;
}

const table = copyTable();
/**
 * The copies JavaScript makes on `row`'s path: what the probe must see.
 * @param {string} row
 */
function seen(row) {
  const entry = table.get(row);
  if (!entry) throw new Error(`src/shared/request-path.ts has no row "${row}" in its copy table`);
  return entry.copies - entry.native;
}

/** @type {import('../helpers/server.js').Server} */
let server;
/** @type {import('../helpers/server.js').TempDir} */
let temp;
let probeFile = '';

test.before(async () => {
  temp = tempDir();
  probeFile = path.join(temp.dir, 'copies.log');
  writeFileSync(probeFile, '');
  const echoManifest = readFileSync(path.join(FIXTURES, 'models', 'echo', 'manifest.yaml'), 'utf8');
  const repo = makeRepository(temp.dir, { echo: path.join(FIXTURES, 'models', 'echo') }, {
    'hooked/manifest.yaml': echoManifest,
    'hooked/model.js': readFileSync(path.join(FIXTURES, 'hooks', 'negates-by-element.js'), 'utf8'),
    'preprocessed/manifest.yaml': echoManifest,
    'preprocessed/model.js': readFileSync(path.join(FIXTURES, 'hooks', 'complements-before.js'), 'utf8'),
  });
  copyFileSync(path.join(FIXTURES, 'models', 'echo', 'model.onnx'), path.join(repo, 'hooked', 'model.onnx'));
  copyFileSync(path.join(FIXTURES, 'models', 'echo', 'model.onnx'), path.join(repo, 'preprocessed', 'model.onnx'));
  server = await startServer({ model_repo: repo, global: { hooks: { threads: 1 } } }, {
    root: temp.dir,
    nodeArgs: ['--require', path.join(ROOT, 'test', 'helpers', 'copy-probe.cjs')],
    env: { STOWAGE_COPY_PROBE: probeFile, STOWAGE_COPY_PROBE_MIN_BYTES: String(MIN_BYTES) },
  });
});

test.after.always(async () => {
  await server?.stop();
  temp?.cleanup();
});

/**
 * What the probe logged while `run` ran: each copy as { thread, operation, bytes, where }, and
 * their bytes in units of `unitBytes`. Every copy on a request's path is made before its answer
 * is sent, and every test here is serial, so the lines written meanwhile are this run's.
 * @param {number} unitBytes
 * @param {() => Promise<unknown>} run
 */
async function copiesDuring(unitBytes, run) {
  const from = statSync(probeFile).size;
  await run();
  const handle = await open(probeFile);
  try {
    const { size } = await handle.stat();
    const buffer = Buffer.alloc(size - from);
    await handle.read(buffer, 0, buffer.length, from);
    const copies = buffer.toString('utf8').split('\n').filter(Boolean).map((line) => {
      const [thread, operation, bytes, ...where] = line.split(' ');
      return { thread: Number(thread), operation, bytes: Number(bytes), where: where.join(' ') };
    });
    const total = copies.reduce((sum, c) => sum + c.bytes, 0);
    return { copies, units: Math.round(total / unitBytes), shown: copies.map((c) => `${c.operation} ${c.bytes} in thread ${c.thread} at ${c.where}`).join('\n') };
  } finally {
    await handle.close();
  }
}

const x = (/** @type {number} */ rows) => tensor('x', 'FP32', [rows, 1024], Float32Array.from({ length: rows * 1024 }, (_, i) => (i % 13) - 6));

/**
 * A request id that puts the tensor's bytes at an offset aligned for FP32 in the message the
 * server receives (or misaligned, with `aligned` false). Its tensor is the message's last field,
 * and grpc-js hands the server the message 5 bytes into a buffer of its own.
 * @param {string} model
 * @param {number} rows
 * @param {boolean} aligned
 */
function alignedId(model, rows, aligned) {
  const { requestSerialize } = loadInferenceClient().service.ModelInfer;
  const data = dataAs(x(rows), Float32Array);
  for (let pad = 0; pad < 8; pad++) {
    const id = 'r'.repeat(pad + 1);
    const message = requestSerialize({
      model_name: model, id, parameters: {}, outputs: [],
      inputs: [{ name: 'x', datatype: 'FP32', shape: [rows, 1024], parameters: {} }],
      raw_input_contents: [Buffer.from(data.buffer)],
    });
    const offset = 5 + message.length - data.byteLength;
    if ((offset % 4 === 0) === aligned) return id;
  }
  throw new Error('no id length gives the alignment asked for');
}

/**
 * The answer of echo (or hooked: 1 - x) to `sent`, checked element by element.
 * @param {import('ava').ExecutionContext} t
 * @param {import('../helpers/server.js').Tensor[]} outputs
 * @param {import('../helpers/server.js').Tensor} sent
 */
function check(t, outputs, sent, hooked = false) {
  const got = dataAs(outputs[0], Float32Array);
  const x = dataAs(sent, Float32Array);
  t.is(got.length, x.length);
  t.true(got.every((v, i) => v === (hooked ? 1 - x[i] : x[i])), 'the answer is the model\'s');
}

test.serial('inline lone: a large aligned request is copied as the table says', async (t) => {
  const input = x(64);
  const id = alignedId('echo', 64, true);
  const { units, shown } = await copiesDuring(64 * ROW_BYTES, async () => check(t, (await server.client.infer('echo', [input], { id })).outputs, input));
  t.is(units, seen('inline lone'), shown);
});

test.serial('REST binary lone: the body\'s tensor goes to the device as it is; the response\'s pieces are written as they are', async (t) => {
  const input = x(64);
  const data = dataAs(input, Float32Array);
  // The JSON header padded to a multiple of 4 bytes, so the tensor after it is aligned for FP32.
  let header = Buffer.from(JSON.stringify({ inputs: [{ name: 'x', datatype: 'FP32', shape: [64, 1024], parameters: { binary_data_size: data.byteLength } }], outputs: [{ name: 'y', parameters: { binary_data: true } }] }));
  header = Buffer.concat([header, Buffer.alloc((4 - (header.length % 4)) % 4, ' ')]);
  const { units, shown } = await copiesDuring(64 * ROW_BYTES, async () => {
    const res = await fetch(`${server.rest}/v2/models/echo/infer`, { method: 'POST', body: Buffer.concat([header, Buffer.from(data.buffer)]), headers: { 'inference-header-content-length': String(header.length) } });
    const body = Buffer.from(await res.arrayBuffer());
    const y = new Float32Array(body.buffer.slice(body.byteOffset + Number(res.headers.get('inference-header-content-length')), body.byteOffset + body.length));
    t.true(y.length === data.length && y.every((v, i) => v === data[i]), 'the answer is the model\'s');
  });
  t.is(units, seen('REST binary lone'), shown);
});

test.serial('REST JSON lone: no copy of the tensor\'s bytes, only the join of the JSON text (the data converted both ways)', async (t) => {
  const input = x(64);
  const data = dataAs(input, Float32Array);
  const body = Buffer.from(JSON.stringify({ inputs: [{ name: 'x', datatype: 'FP32', shape: [64, 1024], data: [...data] }] }));
  const { copies, shown } = await copiesDuring(64 * ROW_BYTES, async () => {
    const res = await fetch(`${server.rest}/v2/models/echo/infer`, { method: 'POST', body, headers: { 'content-type': 'application/json' } });
    const answer = /** @type {{ outputs: { data: number[] }[] }} */ (await res.json());
    t.true(answer.outputs[0].data.length === data.length && answer.outputs[0].data.every((v, i) => v === data[i]), 'the answer is the model\'s');
  });
  // The body's chunks joined (http-edge.ts): the JSON text, which the table does not count as the tensor's.
  const joins = copies.filter((c) => c.operation === 'Buffer.concat' && c.bytes === body.length);
  t.is(joins.length, 1, shown);
  const tensorCopies = copies.filter((c) => !joins.includes(c)).reduce((sum, c) => sum + c.bytes, 0);
  t.is(Math.round(tensorCopies / (64 * ROW_BYTES)), seen('REST JSON lone'), shown);
});

test.serial('inline misaligned: an input misaligned for its type costs one copy into staging', async (t) => {
  const input = x(64);
  const id = alignedId('echo', 64, false);
  const { copies, units, shown } = await copiesDuring(64 * ROW_BYTES, async () => check(t, (await server.client.infer('echo', [input], { id })).outputs, input));
  t.is(units, seen('inline misaligned'), shown);
  t.true(copies.some((c) => c.where.includes('realign')), `the device realigned it:\n${shown}`);
});

test.serial('inline small: a message in Node\'s Buffer pool is copied out of it once', async (t) => {
  const input = x(4);
  const { units, shown } = await copiesDuring(4 * ROW_BYTES, async () => check(t, (await server.client.infer('echo', [input], { id: alignedId('echo', 4, true) })).outputs, input));
  t.is(units, seen('inline small'), shown);
});

/**
 * Requests of `rows` rows each that coalescing depends on timing for: `send` runs `requests` of
 * them (attempt by attempt) until some rode together, then the copies are held against the table:
 * lone requests cost the `lone` path's, coalesced ones the `coalesced` path's.
 * @param {import('ava').ExecutionContext} t
 * @param {{ rows: number, requests: number, lone: string, coalesced: string }} paths
 * @param {(attempt: number) => Promise<void>} send
 */
async function coalescedCopies(t, { rows, requests, lone, coalesced: path }, send) {
  /** Executions of echo by batch size so far. @returns {Promise<Map<number, number>>} */
  const executions = async () => new Map((await server.client.call('ModelStatistics', { name: 'echo' })).model_stats[0].batch_stats
    .map((/** @type {any} */ b) => [Number(b.batch_size), Number(b.compute_infer.count)]));
  for (let attempt = 0; attempt < 5; attempt++) {
    const before = await executions();
    const { units, shown } = await copiesDuring(rows * ROW_BYTES, () => send(attempt));
    const after = await executions();
    let coalesced = 0;
    for (const [size, count] of after) if (size > rows) coalesced += (count - (before.get(size) ?? 0)) * (size / rows);
    if (coalesced === 0) continue;
    t.is(units, (requests - coalesced) * seen(lone) + coalesced * seen(path), `${coalesced} of ${requests} coalesced:\n${shown}`);
    return;
  }
  t.fail('no two requests ever rode in one execution');
}

test.serial('inline coalesced: each request that rode with others costs one copy into the joined input', async (t) => {
  const rows = 64;
  const requests = 12;
  const id = alignedId('echo', rows, true);
  await coalescedCopies(t, { rows, requests, lone: 'inline lone', coalesced: 'inline coalesced' }, async () => {
    const inputs = Array.from({ length: requests }, () => x(rows));
    const answers = await Promise.all(inputs.map((input) => server.client.infer('echo', [input], { id })));
    answers.forEach((a, i) => check(t, a.outputs, inputs[i]));
  });
});

test.serial('hooked: a request through pre- and postprocess hooks is copied as the table says (its tensors go to the hook thread uncopied)', async (t) => {
  const input = x(64);
  const id = alignedId('hooked', 64, true);
  const { units, shown } = await copiesDuring(64 * ROW_BYTES, async () => check(t, (await server.client.infer('hooked', [input], { id })).outputs, input, true));
  t.is(units, seen('hooked'), shown);
});

test.serial('preprocess only: the device writes the outputs into the frame the edge asked for, as for a plain request, not protobufjs', async (t) => {
  const input = x(64);
  const id = alignedId('preprocessed', 64, true);
  const { copies, units, shown } = await copiesDuring(64 * ROW_BYTES, async () => check(t, (await server.client.infer('preprocessed', [input], { id })).outputs, input, true));
  t.is(units, seen('preprocess only'), shown);
  t.false(copies.some((c) => /protobufjs|encode/i.test(c.where)), `protobufjs encoded none of it:\n${shown}`);
});

/**
 * One request to echo with its input and output in a region; `outputOffset` places the output
 * (an offset misaligned for FP32 keeps ONNX Runtime from writing it in place).
 * @param {import('ava').ExecutionContext} t
 * @param {string} label
 * @param {number} outputOffset
 */
async function sharedMemoryRequest(t, label, outputOffset) {
  const sent = x(64);
  const data = dataAs(sent, Float32Array);
  const bytes = data.byteLength;
  const key = `/stowage_copies_${process.pid}_${label}`;
  createRegion(key, outputOffset + 2 * bytes);
  t.teardown(() => destroyRegion(key));
  writeRegion(key, 0, data);
  await server.client.registerSystemSharedMemory(label, key, outputOffset + 2 * bytes);
  t.teardown(() => server.client.unregisterSystemSharedMemory(label));
  const result = await copiesDuring(bytes, async () => {
    const { outputs } = await server.client.infer('echo', [{ name: 'x', datatype: 'FP32', shape: sent.shape, sharedMemory: { region: label, byteSize: bytes } }],
      { outputs: [{ name: 'y', sharedMemory: { region: label, byteSize: bytes, offset: bytes + outputOffset } }] });
    t.is(outputs[0].data.length, 0, 'nothing inline');
  });
  const written = new Float32Array(readRegion(key, bytes + outputOffset, bytes).slice().buffer);
  t.true(written.every((v, i) => v === data[i]), 'the output is in the region');
  return result;
}

test.serial('shared memory in place: inputs read from the region and the output computed into it', async (t) => {
  const { units, shown } = await sharedMemoryRequest(t, 'inplace', 0);
  t.is(units, seen('shared memory in place'), shown);
});

test.serial('shared memory copied: an output ONNX Runtime cannot write in place is copied into its slice', async (t) => {
  const { units, shown } = await sharedMemoryRequest(t, 'copied', 2);
  t.is(units, seen('shared memory copied'), shown);
});

test.serial('shared memory coalesced: requests riding together, outputs end to end in one region, are computed into it (their inputs joined)', async (t) => {
  const rows = 64;
  const requests = 8;
  const bytes = rows * ROW_BYTES;
  const key = `/stowage_copies_${process.pid}_coalesced`;
  // Inputs first, then the outputs end to end: request i reads slice i and writes slice requests + i.
  createRegion(key, 2 * requests * bytes);
  t.teardown(() => destroyRegion(key));
  await server.client.registerSystemSharedMemory('coalesced', key, 2 * requests * bytes);
  t.teardown(() => server.client.unregisterSystemSharedMemory('coalesced'));
  await coalescedCopies(t, { rows, requests, lone: 'shared memory in place', coalesced: 'shared memory coalesced' }, async (attempt) => {
    const inputs = Array.from({ length: requests }, (_, i) => Float32Array.from({ length: rows * 1024 }, (_, k) => ((k + i * 7 + attempt) % 17) - 8));
    inputs.forEach((data, i) => writeRegion(key, i * bytes, data));
    const answers = await Promise.all(inputs.map((_, i) => server.client.infer('echo', [{ name: 'x', datatype: 'FP32', shape: [rows, 1024], sharedMemory: { region: 'coalesced', byteSize: bytes, offset: i * bytes } }],
      { outputs: [{ name: 'y', sharedMemory: { region: 'coalesced', byteSize: bytes, offset: (requests + i) * bytes } }] })));
    for (const a of answers) t.is(a.outputs[0].data.length, 0, 'nothing inline');
    inputs.forEach((data, i) => {
      const written = new Float32Array(readRegion(key, (requests + i) * bytes, bytes).slice().buffer);
      t.true(written.every((v, k) => v === data[k]), `request ${i}'s output is in its slice`);
    });
  });
});
