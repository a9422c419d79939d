// The admin port against what a port scanner, a broken health checker or a slow client sends:
// every request gets an HTTP answer (or is cut off), and the process keeps serving gRPC.
import net from 'node:net';
import path from 'node:path';
import test from 'ava';
import { ROOT, startServer, tensor } from '../helpers/server.js';
import { present } from '../helpers/checks.js';

/**
 * Send `raw` bytes to the admin port; resolve to what came back before the server closed or `ms` passed.
 * @param {number | undefined} port
 * @param {string | Buffer} raw
 * @returns {Promise<string>}
 */
function rawRequest(port, raw, ms = 5000) {
  return new Promise((resolve, reject) => {
    const socket = net.connect(present(port, 'the admin port'), '127.0.0.1');
    let got = '';
    const timer = setTimeout(() => { socket.destroy(); resolve(got); }, ms);
    socket.on('data', (d) => { got += d.toString('latin1'); });
    socket.on('error', (err) => (got ? undefined : reject(err)));
    socket.on('close', () => { clearTimeout(timer); resolve(got); });
    socket.end(raw);
  });
}

const statusOf = (/** @type {string} */ reply) => Number(/^HTTP\/1\.1 (\d{3})/.exec(reply)?.[1]);

test('the admin port answers every malformed request with a 4xx and the server keeps serving', async (t) => {
  const server = await startServer({ model_repo: path.join(ROOT, 'bundles') });
  t.teardown(() => server.stop());
  const port = server.adminPort;
  /** @type {[raw: string, status: number][]} what is sent, and the status expected */
  const corpus = [
    ['GET //[ HTTP/1.1\r\nHost: x\r\n\r\n', 400], // not a parseable URL: used to throw out of the listener and end the process
    ['GET //[::1 HTTP/1.1\r\nHost: x\r\n\r\n', 400],
    ['GET http://[bad/readyz HTTP/1.1\r\nHost: x\r\n\r\n', 400],
    ['GET * HTTP/1.1\r\nHost: x\r\n\r\n', 400],
    ['GET readyz HTTP/1.1\r\nHost: x\r\n\r\n', 400],
    ['OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n', 400],
    ['GET /%zz HTTP/1.1\r\nHost: x\r\n\r\n', 404],
    [`GET /${'a'.repeat(5000)} HTTP/1.1\r\nHost: x\r\n\r\n`, 404],
    ['POST /readyz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n', 405],
    ['GARBAGE\r\n\r\n', 400], // Node's HTTP parser: clientError answers 400
    ['GET / HTTP/9.9\r\n\r\n', 400],
    [`GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${'b'.repeat(64 * 1024)}\r\n\r\n`, 431],
    ['\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03', 400], // a TLS ClientHello
  ];
  for (const [raw, expected] of corpus) {
    const reply = await rawRequest(port, raw);
    t.is(statusOf(reply), expected, `${JSON.stringify(raw.slice(0, 40))} answered ${JSON.stringify(reply.slice(0, 80))}`);
  }
  // The 404 for a long path names it cut short, not 5000 characters back.
  const long = await rawRequest(port, `GET /${'a'.repeat(5000)} HTTP/1.1\r\nHost: x\r\n\r\n`);
  t.true(long.length < 1000, `the 404 is ${long.length} bytes`);
  t.regex(long, /5001 characters/);
  // Still alive and serving, gRPC included.
  t.is((await fetch(`http://127.0.0.1:${port}/healthz`)).status, 200);
  const out = await server.client.infer('digits', [tensor('image', 'FP32', [1, 8, 8], new Float32Array(64))]);
  t.is(out.outputs[0].name, 'logits');
});

test('a client that stops halfway through its headers does not hold up others', async (t) => {
  const server = await startServer({ model_repo: path.join(ROOT, 'bundles') });
  t.teardown(() => server.stop());
  const socket = net.connect(present(server.adminPort, 'the admin port'), '127.0.0.1');
  await new Promise((resolve) => socket.once('connect', resolve));
  socket.write('GET /healthz HTTP/1.1\r\n'); // and nothing more
  t.is((await fetch(`http://127.0.0.1:${server.adminPort}/readyz`)).status, 200);
  socket.destroy();
});
