// The device actor's dispatch loop by itself (actors/device/inbox.ts), with steps that record what
// they are asked: the inbox admitted in arrival order before the next choice, a control call
// answered in its turn, one batch per turn of the event loop, a held queue looked at again when
// its hold ends, a refused batch failed whole, and a cancel taking a request where it is.
import test from 'ava';
import { DevicePump } from '../../../../dist/actors/device/inbox.js';
import { nowMs } from '../../../../dist/shared/timers.js';
import { instanceKey } from '../../../../dist/shared/model-spec.js';

/** @typedef {import('../../../../dist/shared/channels/device.js').InferCommand} InferCommand */

/** @returns {InferCommand} */
const infer = (/** @type {number} */ id) => ({ type: 'infer', id, instance: instanceKey('m', 1), inputs: [], rows: 1, outputs: ['y'], outputRegions: [null], frame: null, deadlineMs: Infinity, enqueuedAtMs: 0 });

/**
 * A pump over a queue of admitted requests, run as batches of up to `batch`.
 * @param {{ batch?: number, refused?: Error | null, heldUntilMs?: number }} [options]
 */
function pumpWith({ batch = 2, refused = null, heldUntilMs } = {}) {
  /** @type {string[]} */
  const log = [];
  /** @type {InferCommand[]} */
  const queued = [];
  let held = heldUntilMs;
  const pump = new DevicePump({
    admit: (cmd) => { log.push(`admit ${cmd.id}`); queued.push(cmd); },
    answer: async (call) => { log.push(`answer ${call.type}`); },
    next: () => {
      if (held !== undefined && nowMs() < held) return { batch: [], shed: [], heldUntilMs: held };
      held = undefined;
      return { batch: queued.splice(0, batch), shed: [] };
    },
    shed: () => undefined,
    refusal: () => refused,
    fail: (id, err) => log.push(`fail ${id}: ${/** @type {Error} */ (err).message}`),
    run: async (b) => { log.push(`run ${b.map((c) => c.id).join(',')}`); },
    unqueue: (id) => {
      const at = queued.findIndex((c) => c.id === id);
      if (at < 0) return false;
      queued.splice(at, 1);
      log.push(`unqueued ${id}`);
      return true;
    },
    cancelRunning: (id) => log.push(`cancel running ${id}`),
  });
  return { pump, log };
}

test('the inbox is admitted in arrival order, a control call in its turn, then one batch per turn until none is ready', async (t) => {
  const { pump, log } = pumpWith();
  pump.push(infer(1));
  pump.push(/** @type {any} */ ({ type: 'status', id: 9 }));
  pump.push(infer(2));
  pump.push(infer(3));
  t.is(pump.waiting, 4);
  await pump.pump();
  t.deepEqual(log, ['admit 1', 'answer status', 'admit 2', 'admit 3', 'run 1,2', 'run 3']);
  t.is(pump.waiting, 0);
});

test('a refused batch fails every request in it; a cancel takes a request from the inbox, its queue, or the run', async (t) => {
  const { pump, log } = pumpWith({ refused: new Error('out of service') });
  pump.push(infer(1));
  pump.push(infer(2));
  pump.cancel(2);
  await pump.pump();
  t.deepEqual(log, ['admit 1', 'fail 1: out of service']);
  const other = pumpWith();
  other.pump.push(infer(5));
  await other.pump.pump();
  other.pump.cancel(5);
  t.deepEqual(other.log.slice(-1), ['cancel running 5'], 'run already: the run is told');
});

test('a queue held for rows on their way is looked at again when its hold ends, and soon() pumps once for a burst', async (t) => {
  const { pump, log } = pumpWith({ heldUntilMs: nowMs() + 30 });
  pump.push(infer(1));
  await pump.pump();
  t.deepEqual(log, ['admit 1'], 'held: nothing runs yet');
  await new Promise((resolve) => setTimeout(resolve, 60));
  t.deepEqual(log, ['admit 1', 'run 1'], 'run when the hold ended, without another message');
  pump.push(infer(2));
  pump.soon();
  pump.soon();
  await new Promise((resolve) => setImmediate(resolve));
  await new Promise((resolve) => setImmediate(resolve));
  t.deepEqual(log.slice(2), ['admit 2', 'run 2']);
});
