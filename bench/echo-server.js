// The front-end ceiling: a bare grpc-js server of the same KServe V2 service, on the same
// proto-loader definition as Stowage, that answers ModelInfer without computing. Its ModelMetadata
// and ModelConfig are a copy of what Stowage answers for the same models (bench/front-end.js asks
// Stowage and hands them over), so a client such as perf_analyzer sends it the same messages. The
// answer has the outputs the model would have, of the same sizes: an output the size of an input
// is that input's bytes sent back, any other is a zero buffer made once per size.
//
//   node bench/echo-server.js MODELS.json [--port P] [--window BYTES]
//
// MODELS.json: { "<model>": { "metadata": <ModelMetadataResponse>, "config": <ModelConfig> } }.
// --window sets the HTTP/2 receive windows the way Stowage's endpoints.http2_window_bytes does
// (0, the default, keeps Node's 64 KiB): the "tuned echo". Prints `listening <port>` when bound.
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import * as grpc from '@grpc/grpc-js';
import { loadInferenceClient } from '../dist/protocol/proto.js';
import { widenHttp2Windows } from '../dist/protocol/edge.js';

const { values, positionals } = parseArgs({ allowPositionals: true, options: { port: { type: 'string', default: '0' }, window: { type: 'string', default: '0' } } });
const models = JSON.parse(readFileSync(positionals[0], 'utf8'));

const BYTES = { BOOL: 1, UINT8: 1, INT8: 1, UINT16: 2, INT16: 2, FP16: 2, BF16: 2, UINT32: 4, INT32: 4, FP32: 4, UINT64: 8, INT64: 8, FP64: 8 };
const zeros = new Map();
function zeroBuffer(size) {
  let buffer = zeros.get(size);
  if (!buffer) zeros.set(size, (buffer = Buffer.alloc(size)));
  return buffer;
}

function notFound(name) {
  return { code: grpc.status.NOT_FOUND, details: `no model '${name}'` };
}

const unary = (fn) => (call, callback) => {
  try {
    callback(null, fn(call.request));
  } catch (err) {
    callback(err);
  }
};

function modelOf(name) {
  const model = models[name];
  if (!model) throw notFound(name);
  return model;
}

function infer(req) {
  const { metadata } = modelOf(req.model_name);
  const rows = Number(req.inputs[0]?.shape[0] ?? 1);
  const inputs = req.raw_input_contents;
  const outputs = [];
  const raw = [];
  for (const out of metadata.outputs) {
    const shape = out.shape.map((d, i) => (i === 0 && Number(d) < 0 ? rows : Number(d)));
    const size = shape.reduce((a, b) => a * b, 1) * (BYTES[out.datatype] ?? 4);
    outputs.push({ name: out.name, datatype: out.datatype, shape: shape.map(String) });
    raw.push(inputs.find((b) => b.length === size) ?? zeroBuffer(size));
  }
  return { model_name: req.model_name, model_version: '1', id: req.id, outputs, raw_output_contents: raw };
}

const server = new grpc.Server({ 'grpc.max_receive_message_length': 2147483647, 'grpc.max_send_message_length': 2147483647 });
server.addService(loadInferenceClient().service, {
  ServerLive: unary(() => ({ live: true })),
  ServerReady: unary(() => ({ ready: true })),
  ModelReady: unary((req) => ({ ready: Boolean(models[req.name]) })),
  ServerMetadata: unary(() => ({ name: 'echo', version: '0', extensions: [] })),
  ModelMetadata: unary((req) => modelOf(req.name).metadata),
  ModelConfig: unary((req) => ({ config: modelOf(req.name).config })),
  ModelStatistics: unary(() => ({ model_stats: [] })),
  ModelInfer: unary(infer),
});
const port = await new Promise((resolve, reject) => server.bindAsync(`127.0.0.1:${values.port}`, grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))));
if (Number(values.window) > 0) widenHttp2Windows(() => port, Number(values.window));
console.log(`listening ${port}`);
process.on('SIGTERM', () => server.tryShutdown(() => process.exit(0)));
