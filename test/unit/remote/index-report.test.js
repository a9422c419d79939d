// The gateway's reading of a node's RepositoryIndex answer (remote/index-report.ts), against the bytes
// protobufjs writes from proto/grpc_service.proto, so that a field renumbered in the proto fails
// here: the READY models' names in the node's order, every other state left out (a state that only
// starts with READY too), fields it does not read skipped, and a truncated or malformed answer refused.
import test from 'ava';
import { loadInferenceClient } from '../../../dist/protocol/proto.js';
import { readReadyModels } from '../../../dist/remote/index-report.js';

const { RepositoryIndex: rpc } = loadInferenceClient().service;

test('a RepositoryIndex answer gives its READY models\' names in order, as protobufjs wrote it', (t) => {
  const bytes = rpc.responseSerialize({
    models: [
      { name: 'résnet-ü', version: '3', state: 'READY', reason: '' },
      { name: 'loading-one', version: '1', state: 'LOADING', reason: 'loading' },
      { name: 'almost', version: '1', state: 'READYING', reason: '' },
      { name: 'gone', version: '1', state: 'UNAVAILABLE', reason: 'unloaded' },
      { name: 'm2', state: 'READY' },
      { name: '', state: 'READY' },
    ],
  });
  t.deepEqual(readReadyModels(bytes), ['résnet-ü', 'm2', '']);
  const decoded = /** @type {{ models: { name: string, state: string }[] }} */ (rpc.responseDeserialize(bytes));
  t.deepEqual(readReadyModels(bytes), decoded.models.filter((m) => m.state === 'READY').map((m) => m.name), 'as protobufjs reads it');
});

test('an empty index reads as no models; a truncated or malformed one is refused', (t) => {
  t.deepEqual(readReadyModels(rpc.responseSerialize({ models: [] })), []);
  const bytes = rpc.responseSerialize({ models: [{ name: 'm0', version: '1', state: 'READY', reason: '' }, { name: 'm1', state: 'READY' }] });
  t.throws(() => readReadyModels(bytes.subarray(0, bytes.length - 2)), { message: /RepositoryIndex answer malformed/ });
  // Field 1 with wire type 3 (a group start): no wire type the proto gives it.
  t.throws(() => readReadyModels(Buffer.from([0x0b, 0x00])), { message: /RepositoryIndex answer malformed: wire type 3/ });
});

test('at 10,000 models the answer reads as protobufjs reads it', (t) => {
  const models = Array.from({ length: 10_000 }, (_, k) => ({ name: `m${String(k).padStart(5, '0')}`, version: '1', state: k % 7 === 3 ? 'UNAVAILABLE' : 'READY', reason: '' }));
  const bytes = rpc.responseSerialize({ models });
  const expected = models.filter((m) => m.state === 'READY').map((m) => m.name);
  t.deepEqual(readReadyModels(bytes), expected);
});
