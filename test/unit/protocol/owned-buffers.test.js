// Which deserialized messages own their memory: the geometry grpc-js's stream decoder leaves
// (Buffer.concat of the 5-byte prefix and the message, then subarray(5)), and nothing else.
import test from 'ava';
import { markOwnedBuffers, ownsItsBuffer } from '../../../dist/protocol/proto.js';

/** A one-method definition whose deserializer returns a fresh object per message. */
const definition = markOwnedBuffers(/** @type {any} */ ({
  ModelInfer: { path: '/x', requestStream: false, responseStream: false, requestDeserialize: (/** @type {Buffer} */ b) => ({ length: b.length }), requestSerialize: () => Buffer.alloc(0), responseSerialize: () => Buffer.alloc(0), responseDeserialize: () => ({}) },
  Other: { path: '/y', requestStream: false, responseStream: false, requestDeserialize: () => ({}), requestSerialize: () => Buffer.alloc(0), responseSerialize: () => Buffer.alloc(0), responseDeserialize: () => ({}) },
}), ['ModelInfer']);

/** What grpc-js hands the deserializer for a message of `size` bytes. */
const framed = (/** @type {number} */ size) => Buffer.concat([Buffer.from([0]), Buffer.alloc(4), Buffer.alloc(size)], size + 5).subarray(5);

test('a message of half Buffer.poolSize or more, alone in its ArrayBuffer, owns it', (t) => {
  t.true(ownsItsBuffer(definition.ModelInfer.requestDeserialize(framed(600 * 1024))));
  t.true(ownsItsBuffer(definition.ModelInfer.requestDeserialize(framed(Buffer.poolSize))));
});

test('a small message in Node\'s shared pool, or any other layout, does not', (t) => {
  t.false(ownsItsBuffer(definition.ModelInfer.requestDeserialize(framed(100))), 'pooled');
  t.false(ownsItsBuffer(definition.ModelInfer.requestDeserialize(framed((Buffer.poolSize >>> 1) - 100))), 'pooled, just under the threshold');
  const big = Buffer.alloc(70_000);
  t.false(ownsItsBuffer(definition.ModelInfer.requestDeserialize(big.subarray(5, 60_000))), 'memory beyond the message');
  t.false(ownsItsBuffer(definition.ModelInfer.requestDeserialize(big.subarray(0))), 'no gRPC prefix before it');
  const shared = Buffer.from(new SharedArrayBuffer(10_005));
  t.false(ownsItsBuffer(definition.ModelInfer.requestDeserialize(shared.subarray(5))), 'shared memory');
  t.false(ownsItsBuffer(definition.Other.requestDeserialize(framed(600 * 1024))), 'a method not marked');
});
