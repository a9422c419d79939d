// A structure-aware fuzzer of ModelInfer and ModelStreamInfer against the real server: valid
// requests for the example models (every datatype, raw and typed contents, BYTES, hooked and meta
// models) are mutated where the protocol has meaning (names, datatypes, shapes with negative,
// zero and 2^63-1 dims, contents mixed and cut, BYTES length prefixes, parameters of every type at
// every level, shared-memory parameters, outputs) and, for a share of cases, on the wire (bytes
// flipped, cut, spliced). Each case goes as a unary call or inside a stream.
//
// What counts as a finding: a call without a status before its deadline (a hang), INTERNAL or
// UNKNOWN (a bug: every bad input has a client status), a stream that ends without answering
// what it must, and, after every batch, a known request that no longer answers correctly (or the
// process gone). Statuses are counted and printed.
//
// `--target rest` fuzzes the node's REST port instead (bench/fuzz-rest.js: JSON and binary bodies,
// mutated in their structure and their bytes, compressed or not).
//
//   npm run build && node bench/fuzz.js [--cases 1000000] [--seconds 1800] [--seed 1] [--target node,gateway,rest]
//
// test/adversarial/fuzz.test.js runs a few thousand cases of the same engines in CI.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import * as grpc from '@grpc/grpc-js';
import { loadInferenceClient } from '../dist/protocol/proto.js';
import { fuzzRest } from './fuzz-rest.js';
import { FIXTURES, ROOT, makeRepository, startServer, tempDir } from '../test/helpers/server.js';
import { generator } from './seeded.js';

const { service } = loadInferenceClient();
const METHOD = '/inference.GRPCInferenceService/';
const same = (/** @type {Buffer} */ b) => b;
const heldout = JSON.parse(readFileSync(path.join(FIXTURES, 'digits_heldout.json'), 'utf8'));

/** Statuses a bad input may get; anything else is a finding. */
const CLIENT_STATUSES = new Set([0, 1, 3, 4, 5, 8, 9, 12, 14]);
const DATATYPES = ['BOOL', 'UINT8', 'UINT16', 'UINT32', 'UINT64', 'INT8', 'INT16', 'INT32', 'INT64', 'FP16', 'BF16', 'FP32', 'FP64', 'BYTES'];
const CONTENTS = ['bool_contents', 'int_contents', 'int64_contents', 'uint_contents', 'uint64_contents', 'fp32_contents', 'fp64_contents', 'bytes_contents'];
const PARAMETER_KEYS = ['timeout', 'priority', 'sequence_id', 'sequence_start', 'sequence_end', 'binary_data', 'binary_data_size', 'binary_data_output',
  'shared_memory_region', 'shared_memory_offset', 'shared_memory_byte_size', 'classification', 'headers', 'fuzz'];
/** A request as the fuzzer builds and mutates it, before protobufjs encodes it. @typedef {Record<string, any>} Request */
/** The seeded generator's draws. @typedef {ReturnType<typeof generator>} Draws */

const DIMS = ['0', '1', '2', '3', '4', '8', '-1', '-9223372036854775808', '9223372036854775807', '4294967296', '65536', '33'];

/**
 * The repository the fuzzer serves: the example bundles and the every-datatype fixture.
 * @param {string} root
 */
export function fuzzRepository(root) {
  return makeRepository(root, {
    digits: path.join(ROOT, 'bundles', 'digits'),
    digits_u8: path.join(ROOT, 'bundles', 'digits_u8'),
    digit_cells: path.join(ROOT, 'bundles', 'digit_cells'),
    digit_finder: path.join(ROOT, 'bundles', 'digit_finder'),
    severity_grader: path.join(ROOT, 'bundles', 'severity_grader'),
    dtypes: path.join(FIXTURES, 'models', 'dtypes'),
  });
}


const f32 = (/** @type {number[]} */ values) => Buffer.from(Float32Array.from(values).buffer);
const bytesElements = (/** @type {string[]} */ strings) => Buffer.concat(strings.flatMap((s) => {
  const b = Buffer.from(s);
  const n = Buffer.alloc(4);
  n.writeUInt32LE(b.length);
  return [n, b];
}));

/**
 * Valid requests, one per shape of use; the mutations start from these.
 * @returns {Request[]}
 */
function seeds() {
  /** @type {number[]} */
  const image = heldout.images[0];
  const dtypeInputs = [];
  const dtypeRaw = [];
  /** @type {Record<string, number>} */
  const widths = { BOOL: 1, UINT8: 1, UINT16: 2, UINT32: 4, UINT64: 8, INT8: 1, INT16: 2, INT32: 4, INT64: 8, FP16: 2, FP32: 4, FP64: 8 };
  for (const [name, datatype] of [['in_bool', 'BOOL'], ['in_u8', 'UINT8'], ['in_u16', 'UINT16'], ['in_u32', 'UINT32'], ['in_u64', 'UINT64'], ['in_i8', 'INT8'],
    ['in_i16', 'INT16'], ['in_i32', 'INT32'], ['in_i64', 'INT64'], ['in_f16', 'FP16'], ['in_f32', 'FP32'], ['in_f64', 'FP64'], ['in_bytes', 'BYTES']]) {
    dtypeInputs.push({ name, datatype, shape: ['4', '3'] });
    dtypeRaw.push(datatype === 'BYTES' ? bytesElements(Array.from({ length: 12 }, (_, i) => `s${i}`)) : Buffer.alloc(12 * widths[datatype], 1));
  }
  return [
    { model_name: 'digits', id: 'raw', inputs: [{ name: 'image', datatype: 'FP32', shape: ['2', '8', '8'] }], raw_input_contents: [f32([...image, ...image])] },
    { model_name: 'digits', id: 'typed', inputs: [{ name: 'image', datatype: 'FP32', shape: ['1', '8', '8'], contents: { fp32_contents: image } }], outputs: [{ name: 'label' }, { name: 'probabilities' }] },
    { model_name: 'digits_u8', inputs: [{ name: 'image', datatype: 'UINT8', shape: ['1', '8', '8'] }], raw_input_contents: [Buffer.from(image.map((v) => v * 15))] },
    { model_name: 'severity_grader', inputs: [{ name: 'image', datatype: 'FP32', shape: ['1', '8', '8'] }], raw_input_contents: [f32(image)] },
    { model_name: 'digit_finder', inputs: [{ name: 'canvas', datatype: 'FP32', shape: ['32', '32'] }], raw_input_contents: [f32(new Array(1024).fill(0).map((_, i) => (i % 9 === 0 ? 16 : 0)))] },
    { model_name: 'dtypes', inputs: dtypeInputs, raw_input_contents: dtypeRaw },
  ];
}

/** @param {Draws} r */
function randomParameter(r) {
  switch (r.int(7)) {
    case 0: return { bool_param: r.chance(0.5) };
    case 1: return { int64_param: r.pick(['0', '1', '-1', '9223372036854775807', '-9223372036854775808', String(r.int(1e9))]) };
    case 2: return { uint64_param: r.pick(['0', '1', '18446744073709551615', String(r.int(1e9))]) };
    case 3: return { double_param: r.pick([0, -1, 1e308, Number.NaN, Number.POSITIVE_INFINITY, r.next()]) };
    case 4: return { string_param: r.pick(['', 'x', 'region', 'a'.repeat(r.int(5000)), '\u0000', 'é']) };
    case 5: return {};
    default: return { int64_param: String(r.int(100)) };
  }
}

/** @param {Draws} r */
function randomParameters(r) {
  /** @type {Record<string, object>} */
  const out = {};
  for (let i = r.int(3); i >= 0; i--) out[r.pick(PARAMETER_KEYS)] = randomParameter(r);
  return out;
}

/** @param {Draws} r */
function randomName(r) {
  return r.pick(['', 'x', 'image', 'canvas', 'in_f32', 'label', 'z'.repeat(r.int(300_000)), '../../etc/passwd', 'imäge', 'image\u0000']);
}

/**
 * @param {Draws} r
 * @param {number} n
 */
function randomContents(r, n) {
  const field = r.pick(CONTENTS);
  const values = Array.from({ length: n }, () => {
    switch (field) {
      case 'bool_contents': return r.chance(0.5);
      case 'int64_contents': return r.pick(['0', '-1', '9223372036854775807', '5']);
      case 'uint64_contents': return r.pick(['0', '18446744073709551615', '5']);
      case 'bytes_contents': return Buffer.from(r.pick(['', 'ab', '\xff\xfe']));
      case 'fp32_contents':
      case 'fp64_contents': return r.pick([0, 1.5, -1, Number.NaN, 1e38]);
      default: return r.int(2 ** 31) - (field === 'int_contents' ? 2 ** 30 : 0);
    }
  });
  return { [field]: values };
}

/**
 * One to three protocol-level changes to a copy of `seed`.
 * @param {Draws} r
 * @param {Request} seed
 * @returns {Request}
 */
function mutate(r, seed) {
  const m = structuredClone(seed);
  m.inputs = m.inputs ?? [];
  m.raw_input_contents = m.raw_input_contents ?? [];
  for (let k = 1 + r.int(3); k > 0; k--) {
    const input = m.inputs.length ? m.inputs[r.int(m.inputs.length)] : undefined;
    const rawAt = m.raw_input_contents.length ? r.int(m.raw_input_contents.length) : -1;
    switch (r.int(18)) {
      case 0: m.model_name = r.pick(['digits', 'dtypes', 'digit_finder', 'digits_u8', 'ghost', randomName(r)]); break;
      case 1: m.model_version = r.pick(['', '1', '2', '0', '-1', 'one', '18446744073709551615']); break;
      case 2: if (input) input.datatype = r.pick([...DATATYPES, '', 'FP8', 'fp32', 'STRING']); break;
      case 3: if (input) input.shape = Array.from({ length: r.int(5) }, () => r.pick(DIMS)); break;
      case 4: if (input) input.shape[r.int(input.shape.length || 1)] = r.pick(DIMS); break;
      case 5: if (m.inputs.length) m.inputs.splice(r.int(m.inputs.length), 1); break;
      case 6: if (input) m.inputs.push(structuredClone(input)); break;
      case 7: if (input) input.name = randomName(r); break;
      case 8: if (rawAt >= 0) m.raw_input_contents.splice(rawAt, 1); else m.raw_input_contents.push(Buffer.alloc(r.int(64))); break;
      case 9: if (rawAt >= 0) m.raw_input_contents[rawAt] = m.raw_input_contents[rawAt].subarray(0, r.int(m.raw_input_contents[rawAt].length + 1)); break;
      case 10: if (rawAt >= 0) m.raw_input_contents[rawAt] = Buffer.concat([m.raw_input_contents[rawAt], Buffer.alloc(1 + r.int(64), 0xff)]); break;
      case 11: if (input) input.contents = randomContents(r, r.pick([0, 1, 12, 64, 65, 128])); break;
      case 12: { // a BYTES element's length prefix made to lie
        const b = rawAt >= 0 ? Buffer.from(m.raw_input_contents[rawAt]) : undefined;
        if (b && b.length >= 4) {
          b.writeUInt32LE(r.pick([0xffffffff, b.length, b.length - 3, 0x7fffffff, 1]), r.chance(0.5) ? 0 : Math.max(0, b.length - 4 - r.int(4)));
          m.raw_input_contents[rawAt] = b;
        }
        break;
      }
      case 13: m.parameters = randomParameters(r); break;
      case 14: if (input) input.parameters = randomParameters(r); break;
      case 15: m.outputs = Array.from({ length: r.int(4) }, () => ({ name: r.pick(['label', 'logits', 'probabilities', 'out_bytes', 'ghost', randomName(r)]), parameters: r.chance(0.5) ? randomParameters(r) : {} })); break;
      case 16: if (input) input.parameters = { shared_memory_region: { string_param: r.pick(['', 'nowhere', 'r']) }, shared_memory_byte_size: randomParameter(r), ...(r.chance(0.5) ? { shared_memory_offset: randomParameter(r) } : {}) }; break;
      default: m.id = r.pick(['', 'x', 'i'.repeat(r.int(100_000))]); break;
    }
  }
  return m;
}

/**
 * Wire-level damage to an encoded request.
 * @param {Draws} r
 * @param {Buffer} bytes
 */
function damage(r, bytes) {
  const b = Buffer.from(bytes);
  switch (r.int(5)) {
    case 0: for (let i = 1 + r.int(4); i > 0 && b.length; i--) b[r.int(b.length)] ^= 1 << r.int(8); return b;
    case 1: return b.subarray(0, r.int(b.length + 1));
    case 2: { const at = r.int(b.length + 1); return Buffer.concat([b.subarray(0, at), Buffer.from(Array.from({ length: 1 + r.int(8) }, () => r.int(256))), b.subarray(at)]); }
    case 3: { const at = r.int(b.length + 1); const len = r.int(32); return Buffer.concat([b.subarray(0, at), b.subarray(at, at + len), b.subarray(at)]); }
    default: if (b.length) b[r.int(Math.min(b.length, 16))] = r.pick([0x00, 0x07, 0x0f, 0xff, 0x80]); return b;
  }
}

/**
 * One unary call; `hung` when it ran out the fuzzer's own deadline (a request's `timeout` parameter ends it sooner).
 * @param {grpc.Client} client
 * @param {Buffer} bytes
 * @param {number} deadlineMs
 * @returns {Promise<{ code: number, details: string, hung: boolean }>}
 */
function unary(client, bytes, deadlineMs) {
  const deadline = Date.now() + deadlineMs;
  return new Promise((resolve) => {
    client.makeUnaryRequest(`${METHOD}ModelInfer`, same, same, bytes, new grpc.Metadata(), { deadline },
      (err) => resolve(err ? { code: err.code, details: err.details, hung: err.code === grpc.status.DEADLINE_EXCEEDED && Date.now() >= deadline } : { code: 0, details: '', hung: false }));
  });
}

/**
 * Send `messages` on one stream and end it; resolves to the answers and the final status.
 * @param {grpc.Client} client
 * @param {Buffer[]} messages
 * @param {number} deadlineMs
 * @returns {Promise<{ answers: unknown[], code: number, details: string, hung: boolean }>}
 */
function stream(client, messages, deadlineMs) {
  return new Promise((resolve) => {
    const deadline = Date.now() + deadlineMs;
    const call = client.makeBidiStreamRequest(`${METHOD}ModelStreamInfer`, same, same, new grpc.Metadata(), { deadline });
    /** @type {unknown[]} */
    const answers = [];
    call.on('data', (/** @type {Buffer} */ b) => answers.push(service.ModelStreamInfer.responseDeserialize(b)));
    call.on('status', (/** @type {grpc.StatusObject} */ s) => resolve({ answers, code: s.code, details: s.details, hung: s.code === grpc.status.DEADLINE_EXCEEDED && Date.now() >= deadline }));
    call.on('error', () => { /* the status event says it */ });
    for (const m of messages) call.write(m);
    call.end();
  });
}

/**
 * A request whose answer is known: the process is alive and still computes right.
 * @param {grpc.Client} client
 * @returns {Promise<string | null>} what is wrong, or null
 */
async function healthy(client) {
  const image = heldout.images[3];
  const bytes = service.ModelInfer.requestSerialize({ model_name: 'digits', inputs: [{ name: 'image', datatype: 'FP32', shape: ['1', '8', '8'] }], outputs: [{ name: 'label' }], raw_input_contents: [f32(image)] });
  /** @type {Error | { raw_output_contents: Buffer[] }} */
  const answer = await new Promise((resolve) => client.makeUnaryRequest(`${METHOD}ModelInfer`, same, same, bytes, new grpc.Metadata(), { deadline: Date.now() + 15_000 },
    (err, res) => resolve(err ? err : service.ModelInfer.responseDeserialize(/** @type {Buffer} */ (res)))));
  if (answer instanceof Error) return `the known request failed: ${answer.message}`;
  const label = Number(answer.raw_output_contents[0].readBigInt64LE(0));
  return label === heldout.labels[3] ? null : `the known request answered ${label}, expected ${heldout.labels[3]}`;
}

/**
 * @typedef {{ done: number, statuses: Record<string, number>, findings: number, seconds: number }} Progress
 * @param {{ address: string, cases: number, seconds?: number, seed?: number, batch?: number, concurrency?: number, deadlineMs?: number, onBatch?: (p: Progress) => void }} options
 *
 * Fuzz the server at `address`: `cases` requests (or until `seconds` pass), in batches of
 * `batch`, `concurrency` at once; a fifth of each batch goes on streams. Resolves to counts and
 * findings (each with its seed and case number, to replay).
 */
export async function fuzz({ address, cases, seconds = Infinity, seed = 1, batch = 200, concurrency = 8, deadlineMs = 30_000, onBatch = (_progress) => {} }) {
  const r = generator(seed);
  const base = seeds();
  const client = new grpc.Client(address, grpc.credentials.createInsecure(), { 'grpc.max_send_message_length': -1, 'grpc.max_receive_message_length': -1 });
  /** @type {Record<string, number>} */
  const statuses = {};
  /** @type {{ seed: number, case: number, kind: string, details: string, request?: string }[]} */
  const findings = [];
  const count = (/** @type {number} */ code) => { statuses[grpc.status[code] ?? code] = (statuses[grpc.status[code] ?? code] ?? 0) + 1; };
  const started = Date.now();
  let done = 0;
  let wireDamaged = 0;
  try {
    while (done < cases && (Date.now() - started) / 1000 < seconds && findings.length < 20) {
      const n = Math.min(batch, cases - done);
      const made = Array.from({ length: n }, () => {
        const request = mutate(r, r.pick(base));
        let bytes = service.ModelInfer.requestSerialize(request);
        if (r.chance(0.3)) {
          bytes = damage(r, bytes);
          wireDamaged++;
        }
        return bytes;
      });
      const streamed = made.splice(0, Math.floor(n / 5));
      let next = 0;
      const worker = async () => {
        while (next < made.length) {
          const i = next++;
          const { code, details, hung } = await unary(client, made[i], deadlineMs);
          count(code);
          if (hung || (!CLIENT_STATUSES.has(code) && !(code === 13 && /hook in model\.js failed/.test(details)))) {
            findings.push({ seed, case: done + streamed.length + i, kind: hung ? 'no answer before the deadline' : grpc.status[code], details: details.slice(0, 300), request: made[i].toString('base64').slice(0, 2000) });
          }
        }
      };
      const streams = [];
      for (let s = 0; s < streamed.length; s += 8) {
        const group = streamed.slice(s, s + 8);
        streams.push(stream(client, group, deadlineMs).then(({ answers, code, details, hung }) => {
          count(code);
          if (hung) findings.push({ seed, case: done + s, kind: 'stream without a status before the deadline', details: `${answers.length} of ${group.length} answered` });
          if (code === 0 && answers.length !== group.length) findings.push({ seed, case: done + s, kind: 'stream ended OK without answering every request', details: `${answers.length} of ${group.length}` });
          if (code !== 0 && code !== 3) findings.push({ seed, case: done + s, kind: `stream ended ${grpc.status[code]}`, details: details.slice(0, 300) });
          if (code === 3 && !/the request is not a valid/.test(details)) findings.push({ seed, case: done + s, kind: 'stream ended INVALID_ARGUMENT for a decodable message', details: details.slice(0, 300) });
        }));
      }
      await Promise.all([...Array.from({ length: concurrency }, worker), ...streams]);
      done += n;
      const sick = await healthy(client);
      if (sick) findings.push({ seed, case: done, kind: 'after the batch', details: sick });
      onBatch({ done, statuses, findings: findings.length, seconds: (Date.now() - started) / 1000 });
      if (sick) break;
    }
  } finally {
    client.close();
  }
  return { cases: done, wireDamaged, statuses, findings, seconds: (Date.now() - started) / 1000 };
}

async function main() {
  const { values } = parseArgs({
    options: {
      cases: { type: 'string', default: '1000000' },
      seconds: { type: 'string', default: '1800' },
      seed: { type: 'string', default: String(Date.now() % 1e9) },
      target: { type: 'string', default: 'node,gateway,rest' },
    },
  });
  const temp = tempDir('stowage-fuzz-');
  const node = await startServer({ model_repo: fuzzRepository(temp.dir) }, { root: temp.dir });
  const gateway = values.target.includes('gateway') ? await startServer({ gateway: { endpoints: [node.address] } }) : undefined;
  const targets = values.target.split(',');
  const cases = Math.ceil(Number(values.cases) / targets.length);
  const seconds = Number(values.seconds) / targets.length;
  let failed = false;
  // Ctrl-C or a kill stops the servers this script started (they would outlive it otherwise).
  for (const signal of ['SIGINT', 'SIGTERM']) {
    process.once(signal, async () => {
      await gateway?.stop();
      await node.stop();
      temp.cleanup();
      process.exit(130);
    });
  }
  try {
    for (const target of targets) {
      const address = target === 'gateway' && gateway ? gateway.address : target === 'rest' ? /** @type {string} */ (node.rest) : node.address;
      const rssBefore = process.platform === 'linux' ? rssOf(node.child.pid ?? 0) : 0;
      console.log(`fuzzing the ${target} at ${address}: up to ${cases} cases or ${seconds} s, seed ${values.seed}`);
      const onBatch = (/** @type {{ done: number, seconds: number, findings: number }} */ { done, seconds: s, findings }) => { if (done % 10_000 < 500) console.log(`  ${done} cases, ${s.toFixed(0)} s, ${findings} findings${rssBefore ? `, node RSS ${(rssOf(node.child.pid ?? 0) / 2 ** 20).toFixed(0)} MiB` : ''}`); };
      const result = target === 'rest'
        ? await fuzzRest({ url: address, cases, seconds, seed: Number(values.seed), onBatch })
        : await fuzz({ address, cases, seconds, seed: Number(values.seed), onBatch });
      const damaged = 'wireDamaged' in result ? result.wireDamaged : result.damaged;
      console.log(`${target}: ${result.cases} cases (${damaged} damaged on the wire) in ${result.seconds.toFixed(0)} s, ${(result.cases / result.seconds).toFixed(0)}/s`);
      console.log(`  statuses: ${JSON.stringify(result.statuses)}`);
      if (rssBefore) console.log(`  node RSS ${(rssBefore / 2 ** 20).toFixed(0)} MiB before, ${(rssOf(node.child.pid ?? 0) / 2 ** 20).toFixed(0)} MiB after`);
      console.log(`  findings: ${result.findings.length}`);
      for (const f of result.findings) console.log(`    ${JSON.stringify(f)}`);
      failed ||= result.findings.length > 0;
    }
    console.log(`node process alive: ${node.child.exitCode === null}${gateway ? `, gateway alive: ${gateway.child.exitCode === null}` : ''}`);
  } finally {
    await gateway?.stop();
    await node.stop();
    temp.cleanup();
  }
  process.exitCode = failed ? 1 : 0;
}

/** @param {number} pid */
function rssOf(pid) {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0) * 1024;
}

if (import.meta.url === `file://${process.argv[1]}`) await main();
