// The REST surface under attack, each with its exact bytes, on the real server: bodies that once
// killed the process or held its memory, bodies that overflowed the stack into a 500, bytes that
// are not HTTP after a good request, slow bodies, numbers out of range, zip bombs. Each must get
// its own 4xx (never a 500, never a reset before the answer), and the server must serve on.
import net from 'node:net';
import path from 'node:path';
import { gzipSync } from 'node:zlib';
import test from 'ava';
import { FIXTURES, makeRepository, scrapeMetrics, startServer, tempDir } from '../helpers/server.js';

const MiB = 2 ** 20;

/** @type {import('../helpers/server.js').Server} */
let server;
/** @type {import('../helpers/server.js').TempDir} */
let temp;
let port = 0;

test.before(async () => {
  temp = tempDir();
  const repo = makeRepository(temp.dir, { echo: path.join(FIXTURES, 'models', 'echo'), dtypes: path.join(FIXTURES, 'models', 'dtypes') });
  // Limits small enough to reach quickly: JSON 4 MiB, tensors in flight 8 MiB, a request within 3 s.
  server = await startServer({ model_repo: repo, global: { endpoints: { max_json_body_bytes: 4 * MiB, max_receive_message_bytes: 32 * MiB, max_inflight_bytes: 8 * MiB, http_request_timeout_seconds: 3 } } }, { root: temp.dir });
  port = Number(new URL(/** @type {string} */ (server.rest)).port);
});

test.after.always(async () => {
  await server?.stop();
  temp?.cleanup();
});

/**
 * Sends `head` then what `body` writes on a raw connection; resolves to everything the server
 * answered (status line first) once it closes the connection or `ms` pass, and whether the
 * connection was reset before the answer arrived.
 * @param {string} head
 * @param {(socket: net.Socket) => void} [body]
 */
function raw(head, body = () => undefined, ms = 6000) {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    let got = '';
    let reset = false;
    socket.on('data', (d) => { got += d; });
    socket.on('error', (e) => { if (!got) reset = /** @type {NodeJS.ErrnoException} */ (e).code === 'ECONNRESET'; });
    const timer = setTimeout(() => socket.destroy(), ms);
    socket.on('close', () => {
      clearTimeout(timer);
      resolve({ got, status: Number(got.slice(9, 12)), reset });
    });
    socket.write(head);
    body(socket);
  });
}

/** Writes `total` bytes of `piece` repeated, chunked (Transfer-Encoding), then ends the body. */
const chunked = (/** @type {Buffer} */ piece, /** @type {number} */ total) => (/** @type {net.Socket} */ s) => {
  let sent = 0;
  const pump = () => {
    while (sent < total) {
      sent += piece.length;
      s.write(`${piece.length.toString(16)}\r\n`);
      s.write(piece);
      if (!s.write('\r\n')) {
        s.once('drain', pump);
        return;
      }
    }
    s.write('0\r\n\r\n');
  };
  s.on('error', () => undefined);
  pump();
};

/** @param {string} route @param {string | Buffer} body @param {Record<string, string>} [headers] */
async function post(route, body, headers = {}) {
  const res = await fetch(`${server.rest}${route}`, { method: 'POST', body: /** @type {BodyInit} */ (/** @type {unknown} */ (body)), headers });
  const text = await res.text();
  return { status: res.status, text, json: /** @type {any} */ (text.startsWith('{') ? JSON.parse(text) : null) };
}

/** The server still answers an inference. */
async function serving(/** @type {import('ava').ExecutionContext} */ t) {
  const res = await post('/v2/models/echo/infer', JSON.stringify({ inputs: [{ name: 'x', datatype: 'FP32', shape: [1, 1024], data: Array(1024).fill(0.5) }] }));
  t.is(res.status, 200, res.text.slice(0, 200));
}

test.serial('an array of 135 million elements, the body that aborted Node: 413 by its length, 413 chunked, and 400 when the limit admits it', async (t) => {
  // `[` + `0,` × 134,999,999 + `0]`, 270 MB: refused by its Content-Length before a byte is read.
  const length = 1 + 2 * 134_999_999 + 2;
  const declared = /** @type {any} */ (await raw(`POST /v2/logging HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${length}\r\n\r\n[`, (s) => s.write('0,'.repeat(1024))));
  t.is(declared.status, 413, declared.got.slice(0, 200));
  t.regex(declared.got, /270000001 bytes, past endpoints\.max_json_body_bytes = 4194304/);
  // Chunked, with no length to refuse it by: 413 as soon as it passes the limit, answered, not reset.
  const streamed = /** @type {any} */ (await raw('POST /v2/logging HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n', chunked(Buffer.from('0,'.repeat(32768)), 12 * MiB), 2500));
  t.is(streamed.status, 413, streamed.got.slice(0, 200));
  t.false(streamed.reset);
  t.regex(streamed.got, /passed endpoints\.max_json_body_bytes/);
  // Within the limit (a million elements, 2 MB), the reader's bound refuses it without building it.
  const within = await post('/v2/logging', `[${'0,'.repeat(999_999)}0]`);
  t.is(within.status, 400);
  t.regex(within.json.error, /more than 100000 values at byte/);
  await serving(t);
});

test.serial('a JSON inference body past max_json_body_bytes is refused before it is parsed; binary tensor bytes keep their own limit', async (t) => {
  const header = { inputs: [{ name: 'x', datatype: 'FP32', shape: [1280, 1024], data: [] }] };
  const big = /** @type {any} */ (await raw(`POST /v2/models/echo/infer HTTP/1.1\r\nHost: x\r\nContent-Length: ${200 * 1000 * 1000}\r\n\r\n`, (s) => s.write(JSON.stringify(header).slice(0, 50))));
  t.is(big.status, 413);
  t.regex(big.got, /past endpoints\.max_json_body_bytes/);
  // 5 MiB of binary tensor after a small JSON header: within max_receive_message_bytes, served.
  const tensor = Buffer.from(new Float32Array(1280 * 1024).fill(1.5).buffer);
  const head = Buffer.from(JSON.stringify({ inputs: [{ name: 'x', datatype: 'FP32', shape: [1280, 1024], parameters: { binary_data_size: tensor.length } }], outputs: [{ name: 'y', parameters: { binary_data: true } }] }));
  const res = await fetch(`${server.rest}/v2/models/echo/infer`, { method: 'POST', body: Buffer.concat([head, tensor]), headers: { 'inference-header-content-length': String(head.length) } });
  t.is(res.status, 200);
  // A JSON header claimed larger than the JSON limit: 413 from the header alone.
  const claimed = /** @type {any} */ (await raw(`POST /v2/models/echo/infer HTTP/1.1\r\nHost: x\r\nInference-Header-Content-Length: ${5 * MiB}\r\nContent-Length: ${6 * MiB}\r\n\r\n{`));
  t.is(claimed.status, 413);
  t.regex(claimed.got, /JSON header is 5242880 bytes, past endpoints\.max_json_body_bytes/);
});

test.serial('bodies count against max_inflight_bytes as they arrive: stalled bodies past it are refused 429 at once, and a stalled body times out 408', async (t) => {
  // Two connections each declaring a 7 MiB body and stalling after 1 MiB: the second would take
  // the bytes in flight past 8 MiB, and is refused by its Content-Length without being read.
  /** @type {net.Socket[]} */
  const held = [];
  const stall = (/** @type {number} */ declared) => new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    held.push(s);
    let got = '';
    s.on('data', (d) => { got += d; resolve(got); });
    s.on('error', () => resolve(got));
    s.write(`POST /v2/models/echo/infer HTTP/1.1\r\nHost: x\r\nInference-Header-Content-Length: 10\r\nContent-Length: ${declared}\r\n\r\n`);
    s.write(Buffer.alloc(MiB, 0x20));
    setTimeout(() => resolve(got), 1500);
  });
  const first = stall(7 * MiB);
  await new Promise((resolve) => setTimeout(resolve, 200));
  const second = /** @type {string} */ (await stall(7 * MiB));
  t.regex(second, /^HTTP\/1\.1 429/, second.slice(0, 200));
  t.regex(second, /past endpoints\.max_inflight_bytes = 8388608/);
  t.true((await scrapeMetrics(server.adminPort)).stowage_grpc_inflight_bytes >= 7 * MiB, 'the stalled body is counted while it arrives');
  // The first, stalled: answered 408 when the request timeout (3 s) passes, its bytes given back.
  const timedOut = /** @type {string} */ (await new Promise((resolve) => {
    let got = '';
    held[0].on('data', (d) => { got += d; });
    held[0].on('close', () => resolve(got));
    setTimeout(() => resolve(got), 6000);
  }));
  t.regex(timedOut, /^HTTP\/1\.1 408/, timedOut.slice(0, 200));
  void first;
  for (const s of held) s.destroy();
  for (let i = 0; i < 50 && (await scrapeMetrics(server.adminPort)).stowage_grpc_inflight_bytes > 0; i++) await new Promise((resolve) => setTimeout(resolve, 50));
  t.is((await scrapeMetrics(server.adminPort)).stowage_grpc_inflight_bytes, 0, 'every byte given back');
  await serving(t);
});

test.serial('100,000-deep nesting in data, shape and datatype, a malformed %-escape, a key that does not exist: 400 and 404, never 500', async (t) => {
  const deep = `${'['.repeat(100_000)}${']'.repeat(100_000)}`;
  for (const [field, body] of [
    ['data', `{"inputs":[{"name":"x","datatype":"FP32","shape":[1,1024],"data":${deep}}]}`],
    ['shape', `{"inputs":[{"name":"x","datatype":"FP32","shape":${deep},"data":[1]}]}`],
    ['datatype', `{"inputs":[{"name":"x","datatype":${deep},"shape":[1],"data":[1]}]}`],
  ]) {
    const res = await post('/v2/models/echo/infer', body);
    t.is(res.status, 400, field);
    t.regex(res.json.error, /nesting deeper than 100 levels at byte \d+/, field);
  }
  const escape = await fetch(`${server.rest}/v2/models/%zz/config`);
  t.is(escape.status, 400);
  t.regex((await escape.json()).error, /"%zz", which is not valid %-encoding/);
  const key = await post('/v2/systemsharedmemory/region/r1/register', JSON.stringify({ key: '/stowage-no-such-key', offset: 0, byte_size: 16 }));
  t.is(key.status, 404);
  t.regex(key.json.error, /no shared-memory object of key "\/stowage-no-such-key" exists/);
  await serving(t);
});

test.serial('a parameter named __proto__ is a parameter like any other: refused by name, not slipped past', async (t) => {
  const res = await post('/v2/repository/models/echo/load', '{"parameters":{"__proto__":"x"}}');
  t.is(res.status, 400);
  t.regex(res.json.error, /parameters \(__proto__\) are not supported/);
});

test.serial('a valid request followed by bytes that are not HTTP, on one connection: the request is answered, then the bytes refused 400', async (t) => {
  const body = JSON.stringify({ inputs: [{ name: 'x', datatype: 'FP32', shape: [1, 1024], data: Array(1024).fill(1) }] });
  const answer = /** @type {any} */ (await raw(`POST /v2/models/echo/infer HTTP/1.1\r\nHost: x\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}GARBAGE \x00\x01 HTTP/9\r\n\r\n`));
  t.is(answer.status, 200);
  const second = answer.got.indexOf('HTTP/1.1 400', 12);
  t.true(second > 0, answer.got.slice(-300));
  t.regex(answer.got.slice(second), /not valid HTTP\/1\.1/);
});

test.serial('the 10 s header timeout cuts at about 10 s, not 17-30 s', async (t) => {
  // The request timeout here is 3 s, and headers are due within it too: a slow header is cut at ~3 s.
  const started = Date.now();
  const slow = /** @type {any} */ (await raw('GET /v2/health/live HTTP/1.1\r\nHost: x\r\n', () => undefined, 15_000));
  const took = Date.now() - started;
  t.is(slow.status, 408);
  t.true(took >= 2500 && took < 6000, `cut after ${took} ms`);
});

test.serial('JSON numbers out of their datatype\'s range are refused, not wrapped; NaN and Infinity travel as Triton writes them', async (t) => {
  const input = (/** @type {string} */ name, /** @type {string} */ datatype, /** @type {string} */ data) => `{"name":"${name}","datatype":"${datatype}","shape":[1,3],"data":${data}}`;
  const cases = [
    ['in_u8', 'UINT8', '[300,1,2]', /element 0 is 300, not an integer from 0 to 255/],
    ['in_i8', 'INT8', '[1,-129,2]', /element 1 is -129, not an integer from -128 to 127/],
    ['in_u64', 'UINT64', '[18446744073709551616,0,0]', /element 0 is 18446744073709551616, not an integer from 0 to 18446744073709551615/],
    ['in_i32', 'INT32', '[1.5,0,0]', /element 0 is 1\.5, not an integer/],
    ['in_f32', 'FP32', '[1e400,1,2]', /element 0 is 1e400, not a number a double holds/],
    ['in_f32', 'FP32', '[1,1e39,2]', /element 1 is 1e39, not a number within FP32's range/],
  ];
  for (const [name, datatype, data, message] of cases) {
    const res = await post('/v2/models/dtypes/infer', `{"inputs":[${input(/** @type {string} */ (name), /** @type {string} */ (datatype), /** @type {string} */ (data))}]}`);
    t.is(res.status, 400, String(message));
    t.regex(res.json.error, /** @type {RegExp} */ (message));
  }
  // The dtypes model is an identity per datatype: NaN and ±Infinity come back as those words.
  const all = ['in_bool', 'in_u8', 'in_u16', 'in_u32', 'in_u64', 'in_i8', 'in_i16', 'in_i32', 'in_i64', 'in_f64'].map((n) => input(n, ({ in_bool: 'BOOL', in_u8: 'UINT8', in_u16: 'UINT16', in_u32: 'UINT32', in_u64: 'UINT64', in_i8: 'INT8', in_i16: 'INT16', in_i32: 'INT32', in_i64: 'INT64', in_f64: 'FP64' })[n] ?? '', n === 'in_bool' ? '[true,false,true]' : n === 'in_f64' ? '[NaN,-Infinity,1e308]' : '[1,2,3]'));
  const half = Buffer.from(new Uint16Array(3).buffer);
  const strings = input('in_bytes', 'BYTES', '["a","b","c"]');
  const head = Buffer.from(`{"inputs":[${[...all, strings, input('in_f32', 'FP32', '[Infinity,NaN,-0.5]').replace('"data":[Infinity,NaN,-0.5]', '"data":[Infinity,NaN,-0.5]')].join(',')},{"name":"in_f16","datatype":"FP16","shape":[1,3],"parameters":{"binary_data_size":6}}],"outputs":[{"name":"out_f32"},{"name":"out_f64"}]}`);
  const res = await fetch(`${server.rest}/v2/models/dtypes/infer`, { method: 'POST', body: Buffer.concat([head, half]), headers: { 'inference-header-content-length': String(head.length) } });
  const text = await res.text();
  t.is(res.status, 200, text.slice(0, 300));
  t.regex(text, /"name":"out_f32","datatype":"FP32","shape":\[1,3\],"data":\[Infinity,NaN,-0\.5\]/);
  t.regex(text, /"name":"out_f64","datatype":"FP64","shape":\[1,3\],"data":\[NaN,-Infinity,1e\+308\]/);
  t.false(text.includes('null'));
});

test.serial('compressed bodies: gzip and deflate are inflated, and a zip bomb is 413 by its inflated size, not memory', async (t) => {
  const body = Buffer.from(JSON.stringify({ inputs: [{ name: 'x', datatype: 'FP32', shape: [1, 1024], data: Array(1024).fill(0.25) }] }));
  const gz = await post('/v2/models/echo/infer', gzipSync(body), { 'content-encoding': 'gzip' });
  t.is(gz.status, 200);
  t.is(gz.json.outputs[0].data[3], 0.25);
  const { deflateSync } = await import('node:zlib');
  t.is((await post('/v2/models/echo/infer', deflateSync(body), { 'content-encoding': 'deflate' })).status, 200);
  // 64 KB on the wire, 64 MiB inflated.
  const bomb = gzipSync(Buffer.alloc(64 * MiB, 0x20));
  t.true(bomb.length < 100_000);
  const exploded = await post('/v2/logging', bomb, { 'content-encoding': 'gzip' });
  t.is(exploded.status, 413);
  t.regex(exploded.json.error, /inflated, passed endpoints\.max_json_body_bytes/);
  const unknown = await post('/v2/logging', body, { 'content-encoding': 'br' });
  t.is(unknown.status, 415);
  const broken = await post('/v2/logging', Buffer.from('not gzip at all'), { 'content-encoding': 'gzip' });
  t.is(broken.status, 400);
  t.regex(broken.json.error, /not valid gzip/);
  await serving(t);
});

test.serial('every JSON field of the control routes is type-checked: 400 naming the field and what it got, never 500', async (t) => {
  /** @type {[route: string, body: unknown, names: RegExp][]} */
  const cases = [
    ['/v2/systemsharedmemory/region/r1/register', { key: '/k', offset: {}, byte_size: 16 }, /register: "offset" must be a whole number from 0, not \{\}/],
    ['/v2/systemsharedmemory/region/r1/register', { key: '/k', offset: -1, byte_size: 16 }, /"offset" must be a whole number from 0, not -1/],
    ['/v2/systemsharedmemory/region/r1/register', { key: '/k', offset: 0.5, byte_size: 16 }, /"offset" must be a whole number from 0, not 0\.5/],
    ['/v2/systemsharedmemory/region/r1/register', { key: '/k', byte_size: '16' }, /"byte_size" must be a whole number from 0, not "16"/],
    ['/v2/systemsharedmemory/region/r1/register', { key: '/k' }, /"byte_size" must be a whole number from 0, not nothing/],
    ['/v2/systemsharedmemory/region/r1/register', { key: {}, byte_size: 16 }, /"key" must be the shared-memory object's name \(a string\), not \{\}/],
    ['/v2/cudasharedmemory/region/r1/register', { raw_handle: { b64: 'AAAA' }, device_id: {}, byte_size: 16 }, /register: "device_id" must be a whole number from 0, not \{\}/],
    ['/v2/cudasharedmemory/region/r1/register', { raw_handle: { b64: 'AAAA' }, device_id: 0, byte_size: [] }, /"byte_size" must be a whole number from 0, not \[\]/],
    ['/v2/cudasharedmemory/region/r1/register', { raw_handle: 'AAAA', device_id: 0, byte_size: 16 }, /"raw_handle" must be \{"b64": .*\}, not "AAAA"/],
    ['/v2/repository/index', { ready: 'yes' }, /repository index: "ready" must be true or false, not "yes"/],
    ['/v2/repository/models/echo/load', { parameters: [] }, /parameters must be an object/],
    ['/v2/logging', { log_verbose_level: {} }, /log setting "log_verbose_level" must be a boolean, a whole number or a string/],
  ];
  for (const [route, body, names] of cases) {
    const res = await post(route, JSON.stringify(body));
    t.is(res.status, 400, `${route} ${JSON.stringify(body)}: ${res.text}`);
    t.regex(res.json?.error ?? '', names, route);
  }
  await serving(t);
});

test.serial('an unknown model is 404 whatever its request carries; the same request for a model served is 400', async (t) => {
  const noData = JSON.stringify({ inputs: [{ name: 'x', datatype: 'FP32', shape: [1, 1024] }] });
  const ghost = await post('/v2/models/ghost/infer', noData);
  t.is(ghost.status, 404, ghost.text);
  t.regex(ghost.json.error, /unknown model "ghost"/);
  const badType = await post('/v2/models/ghost/infer', JSON.stringify({ inputs: [{ name: 'x', datatype: 'FP8', shape: [1], data: [1] }] }));
  t.is(badType.status, 404, badType.text);
  const echo = await post('/v2/models/echo/infer', noData);
  t.is(echo.status, 400, echo.text);
  t.regex(echo.json.error, /input "x" has no "data", no binary_data_size and no shared_memory_region/);
});
