// Hostile ModelStreamInfer streams and undecodable messages, against a node and against a
// gateway-only process in front of one: a message that is not a ModelInferRequest ends its
// stream promptly with INVALID_ARGUMENT (the client need not end it, nor set a deadline), every
// good request sent before it is answered, nothing after it is read; a unary call with such bytes
// gets the same status. Both processes keep serving.
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import test from 'ava';
import { loadInferenceClient } from '../../dist/protocol/proto.js';
import { FIXTURES, ROOT, startServer } from '../helpers/server.js';
import { grpcError } from '../helpers/errors.js';

const { service } = loadInferenceClient();
const encode = (/** @type {any} */ request) => service.ModelInfer.requestSerialize(request);
const decodeStreamReply = (/** @type {Buffer} */ bytes) => service.ModelStreamInfer.responseDeserialize(bytes);
const heldout = JSON.parse(readFileSync(path.join(FIXTURES, 'digits_heldout.json'), 'utf8'));
const same = (/** @type {Buffer} */ b) => b;
const METHOD = '/inference.GRPCInferenceService/';

/** A good request for digits, raw: held-out image i. */
const good = (/** @type {number} */ i) => encode({
  model_name: 'digits', id: `good${i}`, outputs: [{ name: 'label' }],
  inputs: [{ name: 'image', datatype: 'FP32', shape: ['1', '8', '8'] }],
  raw_input_contents: [Buffer.from(Float32Array.from(heldout.images[i]).buffer)],
});

/**
 * Bytes that are not a ModelInferRequest, and what the status must name. protobufjs alone would
 * decode most of these into some plausible request (a cut-short model name, a field read with the
 * wrong wire type); the strict wire check refuses them on the node and the gateway alike.
 * @type {[label: string, bytes: Buffer, names: RegExp][]}
 */
const BROKEN = [
  ['a string field longer than the message', Buffer.from([0x0a, 0x05, 0x61]), /model_name at byte 1 claims 5 bytes, but its message has 1 left/],
  ['a truncated varint', Buffer.from([0x08, 0xff, 0xff]), /model_name at byte 0 is varint, but the field is length-delimited/],
  ['a tag cut short', Buffer.from([0x0a, 0x01, 0x61, 0xff]), /a tag at byte 3 is a truncated or over-long varint/],
  ['wire type 7, which does not exist', Buffer.from([0x0f, 0x00]), /model_name at byte 0 is wire type 7/],
  ['field number 0', Buffer.from([0x02, 0x00]), /field number 0 at byte 0/],
  ['an unterminated group in an unknown field', Buffer.from([0xa3, 0x06]), /field 100 at byte 0 has group start/],
  ['a model name that is not UTF-8', Buffer.from([0x0a, 0x02, 0xff, 0xfe]), /model_name at byte 2 is not valid UTF-8/],
  ['a parameter whose key overruns it', Buffer.from('0a0664696769747322030a0561', 'hex'), /parameters\.key at byte 11 claims 5 bytes/],
  ['a parameter without a value', Buffer.from('0a0664696769747322030a0161', 'hex'), /parameters: an entry at byte 10 has a key but no value/],
  ['packed FP32 contents of 3 bytes', Buffer.from('0a06646967697473' + '2a0a' + '0a0178' + '2a05' + '3203000080', 'hex'), /inputs\.contents\.fp32_contents at byte 17 holds 3 bytes, not a whole number of 4-byte elements/],
  ['a shape dim sent as a 32-bit float', Buffer.from('0a06646967697473' + '2a08' + '0a0178' + '1d0000803f', 'hex'), /inputs\.shape at byte 13 is 32-bit, but the field is varint/],
];

/** @type {import('../helpers/server.js').Server} */
let node;
/** @type {import('../helpers/server.js').Server} */
let gateway;

test.before(async () => {
  node = await startServer({ model_repo: path.join(ROOT, 'bundles') });
  gateway = await startServer({ gateway: { endpoints: [node.address], health_seconds: 0.2 } });
});

test.after.always(async () => {
  await gateway?.stop();
  await node?.stop();
});

/**
 * Open a raw stream to `address`, send `messages` and never end it; resolve to its answers and the status it ended with.
 * @param {string} address
 * @param {Buffer[]} messages
 */
async function rawStream(address, messages) {
  const client = new grpc.Client(address, grpc.credentials.createInsecure());
  try {
    const stream = client.makeBidiStreamRequest(`${METHOD}ModelStreamInfer`, same, same);
    /** @type {ReturnType<typeof decodeStreamReply>[]} */
    const answers = [];
    stream.on('data', (/** @type {Buffer} */ b) => answers.push(decodeStreamReply(b)));
    for (const m of messages) stream.write(m);
    const [status] = await Promise.race([
      once(stream, 'error'),
      new Promise((_, reject) => setTimeout(() => reject(new Error('the stream was not ended within 10 s')), 10_000)),
    ]);
    return { answers, status };
  } finally {
    client.close();
  }
}

/**
 * One unary ModelInfer of `bytes` as they are, on a connection of its own.
 * @param {string} address
 * @param {Buffer} bytes
 */
function rawUnary(address, bytes) {
  const client = new grpc.Client(address, grpc.credentials.createInsecure());
  return new Promise((resolve, reject) => client.makeUnaryRequest(`${METHOD}ModelInfer`, same, same, bytes, (err, res) => {
    client.close();
    return err ? reject(err) : resolve(res);
  }));
}

for (const via of ['node', 'gateway']) {
  const address = () => (via === 'node' ? node : gateway).address;

  test(`${via}: an undecodable ModelInfer is INVALID_ARGUMENT naming what is wrong`, async (t) => {
    for (const [label, bytes, names] of BROKEN) {
      const err = await grpcError(t, rawUnary(address(), bytes), label);
      t.is(/** @type {any} */ (err).code, grpc.status.INVALID_ARGUMENT, label);
      t.regex(/** @type {any} */ (err).details, /^ModelInfer: the request is not a valid inference\.ModelInferRequest message \(.+\)$/, label);
      t.regex(/** @type {any} */ (err).details, names, label);
    }
    const answer = /** @type {Buffer} */ (await rawUnary(address(), good(0)));
    t.is(service.ModelInfer.responseDeserialize(answer).id, 'good0', 'and the server still answers');
  });

  test(`${via}: a broken message ends its stream promptly; every good request before it is answered, none after`, async (t) => {
    for (const [label, bytes] of BROKEN) {
      const { answers, status } = await rawStream(address(), [good(0), good(1), good(2), good(3), bytes, good(4)]);
      t.is(status.code, grpc.status.INVALID_ARGUMENT, label);
      t.regex(status.details, /^ModelStreamInfer: the request is not a valid inference\.ModelInferRequest message/, label);
      t.deepEqual(answers.map((a) => a.infer_response.id).sort(), ['good0', 'good1', 'good2', 'good3'], label);
      for (const a of answers) {
        const i = Number(a.infer_response.id.slice(4));
        t.is(a.error_message, '', label);
        t.is(Number(a.infer_response.raw_output_contents[0].readBigInt64LE(0)), heldout.labels[i], `${label}: answer ${i} is right`);
      }
    }
    // The broken message first: the stream ends, nothing answered.
    const { answers, status } = await rawStream(address(), [BROKEN[0][1], good(0)]);
    t.is(status.code, grpc.status.INVALID_ARGUMENT);
    t.is(answers.length, 0);
  });
}
