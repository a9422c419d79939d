// A device actor's matching of requests fed by a preprocess hook with their inputs
// (actors/device/hook-feeds.ts): whichever comes first, by the link that sent the request and its
// id there (each door's own: the main thread's handle's and each edge's), so that two links' requests with
// the same id never take each other's inputs; stale inputs dropped; a withdrawn request forgotten.
import test from 'ava';
import { HookFeeds } from '../../../../dist/actors/device/hook-feeds.js';

/** A door's link (shared/channels/device.ts `door`). */
const LINK = 1;
import { instanceKey } from '../../../../dist/shared/model-spec.js';

/** @typedef {import('../../../../dist/shared/channels/device.js').InferCommand} InferCommand */

function feeds() {
  /** @type {InferCommand[]} */
  const ready = [];
  /** @type {string[]} */
  const events = [];
  const f = new HookFeeds({
    ready: (cmd) => ready.push(cmd),
    expect: (instance) => events.push(`expect ${instance}`),
    arrived: (instance) => events.push(`arrived ${instance}`),
  });
  return { f, ready, events };
}

/**
 * @param {number} id the device's id
 * @returns {InferCommand}
 */
const command = (id) => ({ type: 'infer', id, instance: instanceKey('m', 1), inputs: [], rows: 1, outputs: ['y'], outputRegions: [null], frame: null, deadlineMs: Infinity, enqueuedAtMs: 1, inputsFromHook: true });
/** @returns {import('../../../../dist/shared/channels/device.js').HookInputs} */
const fed = (/** @type {number} */ link, /** @type {number} */ id, value = id) => ({ link, id, inputs: [{ name: 'x', datatype: 'FP32', shape: [1], data: new Uint8Array([value]) }], sentAtMs: 5 });

test('inputs after their command, or before it: the request is ready once it has both, its queue time from the hook\'s send', (t) => {
  const { f, ready, events } = feeds();
  f.command(command(1), LINK, 1);
  t.deepEqual(events, ['expect m#1'], 'its model\'s queue may wait for it');
  t.true(f.inputs(fed(LINK, 1)));
  t.deepEqual(events, ['expect m#1', 'arrived m#1']);
  t.is(ready[0].inputs[0].data[0], 1);
  t.false(ready[0].inputsFromHook);
  t.is(ready[0].enqueuedAtMs, 5);
  // Early: the hook thread was quicker than the command.
  t.false(f.inputs(fed(LINK, 2)));
  f.command(command(2), LINK, 2);
  t.is(ready[1].inputs[0].data[0], 2);
  t.deepEqual(f.size, { awaiting: 0, early: 0 });
});

test('two links\' requests with the same id take their own inputs, each under the device\'s id', (t) => {
  const { f, ready } = feeds();
  f.command(command(1), LINK, 1);
  f.command(command(2), 7, 1); // door 7's request 1, the device's 2
  f.inputs(fed(7, 1, 70));
  f.inputs(fed(LINK, 1, 10));
  t.deepEqual(ready.map((c) => [c.id, c.inputs[0].data[0]]), [[2, 70], [1, 10]]);
});

test('inputs for a request already gone are dropped, not kept; a withdrawn request is forgotten; a closed link\'s early inputs go', (t) => {
  const { f, ready, events } = feeds();
  f.command(command(5), LINK, 5);
  t.true(f.cancel(5), 'withdrawn while waiting');
  t.deepEqual(events, ['expect m#1', 'arrived m#1']);
  t.false(f.inputs(fed(LINK, 5)), 'its inputs come late');
  t.false(f.inputs(fed(LINK, 4)), 'and a cancelled earlier one\'s');
  t.deepEqual(f.size, { awaiting: 0, early: 0 }, 'at or below the link\'s last command: dropped');
  t.false(f.cancel(99), 'one not waiting is not this one\'s');
  f.inputs(fed(8, 3));
  t.deepEqual(f.size, { awaiting: 0, early: 1 });
  f.forgetLink(8);
  t.deepEqual(f.size, { awaiting: 0, early: 0 });
  t.is(ready.length, 0);
});
