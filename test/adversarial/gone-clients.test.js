// Clients that go before their request reaches a device: it is never run, nor counted a success.
// A REST client that closes its connection while the server parses its 9 MB JSON body, and gRPC
// calls cancelled the moment their whole (one-frame) message is sent, whose RST_STREAM the server
// reads with the message, before grpc-js runs their handler; on the main thread and through edge threads.
import http2 from 'node:http2';
import net from 'node:net';
import path from 'node:path';
import test from 'ava';
import { loadInferenceClient } from '../../dist/protocol/proto.js';
import { FIXTURES, makeRepository, startServer, tempDir } from '../helpers/server.js';

const ROWS = 1800; // echo's x is [n, 1024] FP32: 9.2 MB of JSON, the values written "1.25"

/**
 * A server over the echo model, and its REST statistics of echo.
 * @param {import('ava').ExecutionContext} t
 * @param {number} edges
 */
async function echoServer(t, edges) {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const repo = makeRepository(temp.dir, { echo: path.join(FIXTURES, 'models', 'echo') });
  const server = await startServer({ model_repo: repo, global: { endpoints: { edge_threads: edges } } }, { root: temp.dir });
  t.teardown(() => server.stop());
  const stats = async () => {
    const { inference_stats: s, execution_count: executions } = (await (await fetch(`${server.rest}/v2/models/echo/stats`)).json()).model_stats[0];
    return { success: s.success.count, fail: s.fail.count, executions };
  };
  return { server, stats };
}

/**
 * Poll `stats` until `settled` holds of it (the server has dealt with what was sent), at most 5 s.
 * @template T
 * @param {() => Promise<T>} stats
 * @param {(s: T) => boolean} settled
 */
async function settle(stats, settled) {
  const until = Date.now() + 5000;
  let s = await stats();
  while (!settled(s) && Date.now() < until) {
    await new Promise((resolve) => setTimeout(resolve, 50));
    s = await stats();
  }
  return s;
}

for (const edges of [0, 2]) {
  test(`edge_threads ${edges}: a REST client gone while its JSON body is parsed is not run`, async (t) => {
    const { server, stats } = await echoServer(t, edges);
    const body = `{"inputs":[{"name":"x","datatype":"FP32","shape":[${ROWS},1024],"data":[${Array(ROWS * 1024).fill('1.25').join(',')}]}]}`;
    const url = new URL(/** @type {string} */ (server.rest));
    const socket = net.connect(Number(url.port), url.hostname);
    await new Promise((resolve) => socket.once('connect', resolve));
    await new Promise((resolve) => socket.write(`POST /v2/models/echo/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`, resolve));
    // The body is in (a few ms on loopback); its parse takes far longer: the client goes during it.
    await new Promise((resolve) => setTimeout(resolve, 20));
    socket.destroy();
    const s = await settle(stats, (x) => x.fail + x.success > 0);
    t.log(`after the client went: ${s.success} succeeded, ${s.fail} failed, ${s.executions} executions`);
    t.is(s.success, 0, 'not counted a success');
    t.is(s.executions, 0, 'never run');
    // Counted as the cancelled request it is; 0 only if a busy server had not read the whole body yet.
    t.true(s.fail <= 1);
  });

  test(`edge_threads ${edges}: gRPC calls cancelled as soon as their message is sent are not run`, async (t) => {
    const { server, stats } = await echoServer(t, edges);
    const serialize = /** @type {(value: unknown) => Buffer} */ (loadInferenceClient().service.ModelInfer.requestSerialize);
    const message = serialize({ model_name: 'echo', inputs: [{ name: 'x', datatype: 'FP32', shape: [1, 1024] }], raw_input_contents: [Buffer.alloc(4096)] });
    const frame = Buffer.alloc(5 + message.length);
    frame.writeUInt32BE(message.length, 1);
    message.copy(frame, 5);
    const CALLS = 20;
    const client = http2.connect(`http://${server.address}`);
    t.teardown(() => client.close());
    await new Promise((resolve) => client.once('connect', resolve));
    for (let i = 0; i < CALLS; i++) {
      const stream = client.request({ ':method': 'POST', ':path': '/inference.GRPCInferenceService/ModelInfer', 'content-type': 'application/grpc', te: 'trailers' });
      stream.on('error', () => {});
      stream.end(frame);
      stream.close(http2.constants.NGHTTP2_CANCEL); // RST_STREAM right behind the message's last frame
    }
    // What the server did with them: each either failed (cancelled) or, had it run, succeeded.
    await new Promise((resolve) => setTimeout(resolve, 1500));
    const s = await stats();
    t.log(`${CALLS} cancelled calls: ${s.success} succeeded, ${s.fail} failed, ${s.executions} executions`);
    t.true(s.fail > 0, 'some reached their handler after their client had gone (the case this is about)');
    t.is(s.success, 0, 'none counted a success');
    t.is(s.executions, 0, 'none run');
    // The server still answers a call that stays.
    const { outputs } = await server.client.infer('echo', [{ name: 'x', datatype: 'FP32', shape: [1, 1024], data: new Float32Array(1024).fill(2) }]);
    t.is(outputs[0].data.length, 1024);
  });
}
