// Messages to another thread sent together (shared/thread-messages.ts, Outbox): what one event-loop turn pushes goes
// as one batch at the end of the turn, in order, with every buffer to transfer; nothing is sent for
// a turn that pushed nothing; a cleared outbox sends nothing of what it held.
import { MessageChannel } from 'node:worker_threads';
import test from 'ava';
import { Outbox } from '../../../dist/shared/thread-messages.js';

const turn = () => new Promise((resolve) => setImmediate(resolve));

test('one batch per turn, in order, sent at the end of the turn', async (t) => {
  /** @type {{ messages: string[], transfer: unknown[] }[]} */
  const sent = [];
  const outbox = new Outbox((messages, transfer) => sent.push({ messages, transfer }));
  outbox.push('a');
  outbox.push('b');
  outbox.push('c');
  t.is(sent.length, 0, 'nothing before the turn ends');
  await turn();
  t.deepEqual(sent, [{ messages: ['a', 'b', 'c'], transfer: [] }]);
  await turn();
  t.is(sent.length, 1, 'a turn that pushed nothing sends nothing');
  outbox.push('d');
  await turn();
  t.deepEqual(sent.map((s) => s.messages), [['a', 'b', 'c'], ['d']]);
});

test('buffers move with their batch to the other end; a cleared outbox sends nothing it held', async (t) => {
  const { port1, port2 } = new MessageChannel();
  t.teardown(() => port1.close());
  /** @type {{ n: number, data: Uint8Array }[][]} */
  const got = [];
  port2.on('message', (batch) => got.push(batch));
  const outbox = new Outbox((messages, transfer) => port1.postMessage(messages, transfer));
  const a = new Uint8Array([1, 2, 3]);
  const b = new Uint8Array([4]);
  outbox.push({ n: 1, data: a }, [a.buffer]);
  outbox.push({ n: 2, data: b }, [b.buffer]);
  await turn();
  t.is(a.byteLength, 0, 'transferred, not copied: the sender\'s view is detached');
  t.is(b.byteLength, 0);
  while (got.length === 0) await turn();
  t.deepEqual(got[0].map((m) => [m.n, [...m.data]]), [[1, [1, 2, 3]], [2, [4]]]);

  const c = new Uint8Array([9]);
  outbox.push({ n: 3, data: c }, [c.buffer]);
  outbox.clear();
  await turn();
  await new Promise((resolve) => setTimeout(resolve, 20));
  t.is(got.length, 1, 'cleared: its receiver went, nothing is sent');
  t.is(c.byteLength, 1, 'and its buffer stays with the sender');
});
