// The gRPC server's HTTP/2 receive windows (endpoints.http2_window_bytes), read from the SETTINGS
// and WINDOW_UPDATE frames a plain HTTP/2 client receives from the real server.
import http2 from 'node:http2';
import path from 'node:path';
import test from 'ava';
import { FIXTURES, ROOT, makeRepository, startServer, tempDir } from '../helpers/server.js';

/**
 * One ServerLive call over a raw HTTP/2 connection; resolves to the windows the server granted:
 * its SETTINGS_INITIAL_WINDOW_SIZE (per stream) and the connection window this client may fill.
 * @param {string} address
 */
async function windowsGranted(address) {
  const client = http2.connect(`http://${address}`);
  try {
    const stream = client.request({
      ':method': 'POST', ':path': '/inference.GRPCInferenceService/ServerLive',
      'content-type': 'application/grpc', te: 'trailers',
    });
    const trailers = new Promise((resolve) => stream.once('trailers', resolve));
    stream.end(Buffer.from([0, 0, 0, 0, 0])); // an empty, uncompressed ServerLiveRequest
    stream.resume();
    const { 'grpc-status': status } = /** @type {Record<string, string>} */ (await trailers);
    // The server widens a connection when its first stream arrives: its SETTINGS and WINDOW_UPDATE
    // are sent then, before that stream's answer, so they are here by its trailers. A ping's round
    // trip makes sure every frame sent before its answer has been read.
    await new Promise((r) => client.ping(r));
    return { status, stream: client.remoteSettings.initialWindowSize, connection: client.state.remoteWindowSize ?? 0 };
  } finally {
    client.close();
  }
}

test('by default a connection may send 4 MiB per stream and per connection before the server acknowledges', async (t) => {
  const temp = tempDir();
  const repo = makeRepository(temp.dir, { echo: path.join(FIXTURES, 'models', 'echo') });
  const server = await startServer({ model_repo: repo }, { root: temp.dir });
  try {
    const granted = await windowsGranted(server.address);
    t.is(granted.status, '0');
    t.is(granted.stream, 4 * 2 ** 20);
    t.true(granted.connection >= 4 * 2 ** 20 - 64, `connection window ${granted.connection}`);
    // 600 KiB tensors arrive whole through the wider windows, several at once on one connection.
    const inputs = Array.from({ length: 4 }, (_, k) => new Float32Array(150 * 1024).map((_, i) => i * (k + 1)));
    const replies = await Promise.all(inputs.map((x) => server.client.infer('echo', [{ name: 'x', datatype: 'FP32', shape: [150, 1024], data: x }])));
    replies.forEach((reply, k) => t.deepEqual(reply.outputs[0].data, inputs[k]));
  } finally {
    await server.stop();
    temp.cleanup();
  }
});

test('endpoints.http2_window_bytes sets them; 65535 keeps HTTP/2\'s own', async (t) => {
  for (const bytes of [65535, 1048576]) {
    const server = await startServer({ model_repo: path.join(ROOT, 'bundles'), global: { endpoints: { http2_window_bytes: bytes } } });
    try {
      const granted = await windowsGranted(server.address);
      t.is(granted.stream, bytes);
      t.true(granted.connection >= bytes - 64 && granted.connection <= bytes, `connection window ${granted.connection} for ${bytes}`);
    } finally {
      await server.stop();
    }
  }
});

test('a window below HTTP/2\'s minimum is refused at start-up with the key and the bound', async (t) => {
  const err = await t.throwsAsync(startServer({ model_repo: path.join(ROOT, 'bundles'), global: { endpoints: { http2_window_bytes: 1000 } } }));
  t.regex(err.message, /http2_window_bytes/);
  t.regex(err.message, /65535/);
});
