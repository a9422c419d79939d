// A structure-aware fuzzer of the REST inference endpoint (KServe V2 REST with Triton's binary
// tensor extension) against the real server: valid JSON and binary bodies for the example models
// are mutated where the format has meaning (datatypes, shapes, data nested, cut, out of range,
// NaN and Infinity, huge numbers, wrong types; names; parameters, "__proto__" among them;
// binary_data_size and Inference-Header-Content-Length that lie; deep nesting), and for a share
// of cases on the bytes (flipped, cut, spliced) or compressed (gzip, deflate, or garbage said to be).
//
// What counts as a finding: a request answered 500 (but one naming a failed model.js hook, which is
// the hook's, as over gRPC) or any other 5xx than 503 (not ready) and 504 (the request's own
// `timeout` parameter passed: the gRPC fuzzer's DEADLINE_EXCEEDED), a connection broken or reset
// without an answer, no answer before the deadline, and, after every batch, a known request that
// no longer answers correctly.
// bench/fuzz.js runs it (--target rest); test/adversarial/fuzz.test.js runs a share in CI.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { deflateSync, gzipSync } from 'node:zlib';
import { FIXTURES } from '../test/helpers/server.js';
import { generator } from './seeded.js';

const heldout = JSON.parse(readFileSync(path.join(FIXTURES, 'digits_heldout.json'), 'utf8'));

/** @typedef {ReturnType<typeof generator>} Draws */
/** A body as the fuzzer builds it: the JSON (an object) and the binary part after it. @typedef {{ model: string, json: Record<string, any>, binary: Buffer[] }} Case */

const DATATYPES = ['BOOL', 'UINT8', 'UINT16', 'UINT32', 'UINT64', 'INT8', 'INT16', 'INT32', 'INT64', 'FP16', 'BF16', 'FP32', 'FP64', 'BYTES'];
/** Values for a tensor's elements, each wrong for some datatype (bare words are written as they are). */
const ODD_VALUES = ['0', '1', '-1', '255', '256', '300', '-129', '65536', '4294967296', '18446744073709551616', '-9223372036854775809', '9223372036854775807',
  '1.5', '1e400', '-1e400', '1e39', '3.4e38', 'NaN', 'Infinity', '-Infinity', 'true', 'false', 'null', '"x"', '""', '{}', '[]', '[[1]]', '"\\u0000"', '1e-400', '-0', '01', '.5', '1.', '0x10'];
const ODD_DIMS = [0, 1, 2, 3, 8, 64, -1, 1.5, '1', 2 ** 53, 2 ** 63, 1e308, null, [], [1], {}, true];

/** Valid bodies, one per shape of use. @returns {Case[]} */
function seeds() {
  /** @type {number[]} */
  const image = heldout.images[0];
  const f32 = (/** @type {number[]} */ v) => Buffer.from(Float32Array.from(v).buffer);
  const dtypes = [['in_bool', 'BOOL', [true, false, true]], ['in_u8', 'UINT8', [1, 2, 255]], ['in_u16', 'UINT16', [1, 2, 3]], ['in_u32', 'UINT32', [1, 2, 3]],
    ['in_u64', 'UINT64', [1, 2, 3]], ['in_i8', 'INT8', [-1, 2, 3]], ['in_i16', 'INT16', [1, -2, 3]], ['in_i32', 'INT32', [1, 2, -3]], ['in_i64', 'INT64', [1, 2, 3]],
    ['in_f32', 'FP32', [0.5, 1.5, -2]], ['in_f64', 'FP64', [0.25, 1e300, -3]], ['in_bytes', 'BYTES', ['a', 'bé', '']]];
  return [
    { model: 'digits', json: { id: 'json', inputs: [{ name: 'image', datatype: 'FP32', shape: [1, 8, 8], data: image }], outputs: [{ name: 'label' }] }, binary: [] },
    { model: 'digits', json: { inputs: [{ name: 'image', datatype: 'FP32', shape: [1, 8, 8], data: [image.slice(0, 32), image.slice(32)] }] }, binary: [] },
    { model: 'digits', json: { inputs: [{ name: 'image', datatype: 'FP32', shape: [2, 8, 8], parameters: { binary_data_size: 512 } }], outputs: [{ name: 'probabilities', parameters: { binary_data: true } }] }, binary: [f32([...image, ...image])] },
    { model: 'digits_u8', json: { inputs: [{ name: 'image', datatype: 'UINT8', shape: [1, 8, 8], data: image.map((v) => v * 15) }], parameters: { binary_data_output: true } }, binary: [] },
    { model: 'digit_finder', json: { inputs: [{ name: 'canvas', datatype: 'FP32', shape: [32, 32], data: new Array(1024).fill(0).map((_, i) => (i % 9 === 0 ? 16 : 0)) }] }, binary: [] },
    {
      model: 'dtypes',
      json: {
        inputs: [...dtypes.map(([name, datatype, data]) => ({ name, datatype, shape: [1, 3], data })), { name: 'in_f16', datatype: 'FP16', shape: [1, 3], parameters: { binary_data_size: 6 } }],
        outputs: [{ name: 'out_f64' }, { name: 'out_bytes' }, { name: 'out_u64', parameters: { binary_data: true } }],
      },
      binary: [Buffer.from(Uint16Array.from([0x3c00, 0x4000, 0]).buffer)],
    },
  ];
}

/** A JSON value nested `depth` levels around `inner`. @param {number} depth @param {string} inner */
const nested = (depth, inner) => `${'['.repeat(depth)}${inner}${']'.repeat(depth)}`;

/**
 * One to three format-level changes to a copy of `seed`: the body's text and its headers.
 * @param {Draws} r
 * @param {Case} seed
 * @returns {{ text: string, binary: Buffer[], headers: Record<string, string> }}
 */
function mutate(r, seed) {
  const json = structuredClone(seed.json);
  let binary = seed.binary.map((b) => Buffer.from(b));
  /** @type {Record<string, string>} */
  const headers = {};
  /** Bare words put in place of a value (written unquoted: NaN, 1e400, ...), marked for the text pass. */
  const raw = new Map();
  const bare = (/** @type {string} */ word) => {
    const mark = `\u0001${raw.size}\u0001`;
    raw.set(mark, word);
    return mark;
  };
  for (let k = 1 + r.int(3); k > 0; k--) {
    const picked = Array.isArray(json.inputs) && json.inputs.length ? json.inputs[r.int(json.inputs.length)] : undefined;
    const input = picked && typeof picked === 'object' && !Array.isArray(picked) ? picked : undefined;
    switch (r.int(16)) {
      case 0: if (input) input.datatype = r.pick([...DATATYPES, '', 'FP8', 'fp32', 7, null, []]); break;
      case 1: if (input) input.shape = Array.from({ length: r.int(5) }, () => r.pick(ODD_DIMS)); break;
      case 2: if (Array.isArray(input?.shape) && input.shape.length) input.shape[r.int(input.shape.length)] = r.pick(ODD_DIMS); break;
      case 3: if (input && Array.isArray(input.data) && input.data.length) input.data[r.int(input.data.length)] = bare(r.pick(ODD_VALUES)); break;
      case 4: if (input) input.data = r.pick([[], [[]], 'data', 7, null, {}, input.data?.slice?.(0, r.int(8)), bare(nested(1 + r.int(150), '1'))]); break;
      case 5: if (input) input.name = r.pick(['', 'x', 'image', 'canvas', 7, null, 'z'.repeat(r.int(10_000)), 'imäge', '\u0000']); break;
      case 6: if (Array.isArray(json.inputs)) json.inputs.splice(r.int(json.inputs.length + 1), r.int(2), ...(r.chance(0.5) && input ? [structuredClone(input)] : [])); break;
      case 7: if (input) input.parameters = r.pick([{ binary_data_size: r.pick([0, 1, 511, 512, 513, -1, 1.5, 2 ** 53, '512', null]) }, bare('{"__proto__":"x","binary_data_size":1}'), { shared_memory_region: 'nowhere', shared_memory_byte_size: 8 }, [], 'p', { nested: { deep: [1] } }]); break;
      case 8: json.parameters = r.pick([{ binary_data_output: r.pick([true, false, 1, 'yes']) }, { timeout: r.pick([0, 1, -1, 1e12, 'soon']) }, bare('{"__proto__":{"polluted":true}}'), null, [], 5]); break;
      case 9: json.outputs = r.pick([[], [{ name: 'label' }], [{ name: 'ghost' }], [{}], [{ name: 'label', parameters: { binary_data: r.pick([true, 'yes', 0]) } }], 'label', null, [null]]); break;
      case 10: json.id = r.pick(['', 'x', 7, null, 'i'.repeat(r.int(50_000))]); break;
      case 11: delete json[r.pick(['inputs', 'outputs', 'id', 'parameters'])]; break;
      case 12: binary = binary.map((b) => b.subarray(0, r.int(b.length + 1))); break;
      case 13: binary.push(Buffer.alloc(1 + r.int(64), 0xff)); break;
      case 14: headers['inference-header-content-length'] = String(r.pick([-1, 0, 1, 10, 1e9, 1.5, 'x', '99999999999999999999'])); break;
      default: json[r.pick(['inputs', 'outputs', 'extra'])] = bare(nested(1 + r.int(200), '{}')); break;
    }
  }
  let text = JSON.stringify(json);
  for (const [mark, word] of raw) text = text.replace(JSON.stringify(mark), word);
  return { text, binary, headers };
}

/** Byte-level damage. @param {Draws} r @param {Buffer} b */
function damage(r, b) {
  const out = Buffer.from(b);
  switch (r.int(4)) {
    case 0: for (let i = 1 + r.int(4); i > 0 && out.length; i--) out[r.int(out.length)] ^= 1 << r.int(8); return out;
    case 1: return out.subarray(0, r.int(out.length + 1));
    case 2: { const at = r.int(out.length + 1); return Buffer.concat([out.subarray(0, at), Buffer.from(Array.from({ length: 1 + r.int(8) }, () => r.int(256))), out.subarray(at)]); }
    default: { const at = r.int(out.length + 1); return Buffer.concat([out.subarray(0, at), out.subarray(at, at + r.int(32)), out.subarray(at)]); }
  }
}

/**
 * One case as the bytes and headers to send.
 * @param {Draws} r
 * @param {Case} seed
 */
function build(r, seed) {
  const { text, binary, headers } = mutate(r, seed);
  const json = Buffer.from(text);
  let body = binary.length ? Buffer.concat([json, ...binary]) : json;
  if (binary.length && !headers['inference-header-content-length']) headers['inference-header-content-length'] = String(json.length);
  let damaged = false;
  if (r.chance(0.25)) {
    body = damage(r, body);
    damaged = true;
  }
  if (r.chance(0.1)) {
    const how = r.pick(['gzip', 'deflate', 'garbage']);
    headers['content-encoding'] = how === 'garbage' ? r.pick(['gzip', 'deflate']) : how;
    body = how === 'gzip' ? gzipSync(body) : how === 'deflate' ? deflateSync(body) : damage(r, body);
  }
  return { body, headers, damaged };
}

/**
 * Fuzz the REST port at `url` (http://host:port): `cases` bodies (or until `seconds` pass), in
 * batches of `batch`, `concurrency` at once. Resolves to counts by HTTP status and the findings
 * (each with its seed and case number, to replay).
 * @param {{ url: string, cases: number, seconds?: number, seed?: number, batch?: number, concurrency?: number, deadlineMs?: number, onBatch?: (p: { done: number, findings: number, seconds: number }) => void }} options
 */
export async function fuzzRest({ url, cases, seconds = Infinity, seed = 1, batch = 500, concurrency = 8, deadlineMs = 30_000, onBatch = () => {} }) {
  const r = generator(seed);
  const base = seeds();
  /** @type {Record<string, number>} */
  const statuses = {};
  /** @type {{ seed: number, case: number, kind: string, details: string, body?: string }[]} */
  const findings = [];
  const started = Date.now();
  let done = 0;
  let damaged = 0;
  while (done < cases && (Date.now() - started) / 1000 < seconds && findings.length < 20) {
    const n = Math.min(batch, cases - done);
    const made = Array.from({ length: n }, () => {
      const seedCase = r.pick(base);
      const one = build(r, seedCase);
      if (one.damaged) damaged++;
      return { ...one, model: seedCase.model };
    });
    let next = 0;
    const worker = async () => {
      while (next < made.length) {
        const i = next++;
        const { body, headers, model } = made[i];
        try {
          const res = await fetch(`${url}/v2/models/${model}/infer`, { method: 'POST', body, headers, signal: AbortSignal.timeout(deadlineMs) });
          const text = await res.text();
          statuses[res.status] = (statuses[res.status] ?? 0) + 1;
          const clients = res.status === 503 || (res.status === 504 && /passed its deadline|refused before it ran: its deadline is/.test(text)) || (res.status === 500 && /hook in model\.js failed/.test(text));
          if (res.status >= 500 && !clients) {
            findings.push({ seed, case: done + i, kind: `HTTP ${res.status}`, details: text.slice(0, 300), body: body.toString('base64').slice(0, 2000) });
          }
        } catch (err) {
          statuses.error = (statuses.error ?? 0) + 1;
          const e = /** @type {Error & { cause?: { code?: string } }} */ (err);
          findings.push({ seed, case: done + i, kind: e.name === 'TimeoutError' ? 'no answer before the deadline' : `connection: ${e.cause?.code ?? e.message}`, details: e.message, body: body.toString('base64').slice(0, 2000) });
        }
      }
    };
    await Promise.all(Array.from({ length: concurrency }, worker));
    done += n;
    const sick = await healthy(url);
    if (sick) findings.push({ seed, case: done, kind: 'after the batch', details: sick });
    onBatch({ done, findings: findings.length, seconds: (Date.now() - started) / 1000 });
    if (sick) break;
  }
  return { cases: done, damaged, statuses, findings, seconds: (Date.now() - started) / 1000 };
}

/** A request whose answer is known: the process is alive and still computes right. @param {string} url */
async function healthy(url) {
  try {
    const res = await fetch(`${url}/v2/models/digits/infer`, { method: 'POST', signal: AbortSignal.timeout(15_000), body: JSON.stringify({ inputs: [{ name: 'image', datatype: 'FP32', shape: [1, 8, 8], data: heldout.images[3] }], outputs: [{ name: 'label' }] }) });
    const answer = /** @type {{ outputs: { data: number[] }[] }} */ (await res.json());
    const label = answer.outputs?.[0]?.data?.[0];
    return label === heldout.labels[3] ? null : `the known request answered ${JSON.stringify(answer).slice(0, 200)}, expected label ${heldout.labels[3]}`;
  } catch (err) {
    return `the known request failed: ${/** @type {Error} */ (err).message}`;
  }
}
