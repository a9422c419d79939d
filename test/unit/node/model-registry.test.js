// The registry's leases (node/model-registry.ts) with edge threads' slots in shared memory: a ready
// model's instance gets an open slot and a route; a reload closes the old instance's slot at once
// (an edge holding the old route takes no new lease on it) and opens one for the new instance
// under a new tag; waiting for an instance to drain waits for the main thread's requests and for
// every lease an edge holds, then frees the slot, which another instance may take under another
// tag that the old route never passes for; a model that is not ready has no route.
import test from 'ava';
import { ModelRegistry, ModelState } from '../../../dist/node/model-registry.js';
import { Leases } from '../../../dist/shared/leases.js';
import { instanceKey } from '../../../dist/shared/model-spec.js';
import { modelSpec } from '../../helpers/specs.js';

const spec = modelSpec({ name: 'm' });
const ready = (/** @type {number} */ generation) => ({ name: 'm', state: ModelState.READY, spec, instance: instanceKey('m', generation), reason: '' });
const settled = async (/** @type {Promise<unknown>} */ p) => Promise.race([p.then(() => true), new Promise((resolve) => setTimeout(() => resolve(false), 30))]);

function registry() {
  const memory = Leases.memory(1);
  const r = new ModelRegistry();
  /** @type {[string, import('../../../dist/shared/channels/edge.js').EdgeRoute | null][]} */
  const told = [];
  r.watchRoutes((model, route) => told.push([model, route]));
  r.shareLeases(new Leases(memory));
  return { r, edge: new Leases(memory, 0), told };
}

test('a ready model gets a slot and a route; a reload moves new leases to the new instance at once', async (t) => {
  const { r, edge, told } = registry();
  r.set({ name: 'm', state: ModelState.LOADING, spec, reason: '' });
  t.is(r.routeOf('m'), null, 'loading: no route');
  r.set(ready(1));
  const first = r.routeOf('m');
  t.truthy(first);
  t.is(first?.instance, instanceKey('m', 1));
  t.deepEqual(told.at(-1), ['m', first], 'the edges are told');
  t.true(edge.acquire(/** @type {any} */ (first).slot, /** @type {any} */ (first).tag), 'an edge leases the serving instance');

  r.set(ready(2)); // a reload: the new version serves
  const second = /** @type {import('../../../dist/shared/channels/edge.js').EdgeRoute} */ (r.routeOf('m'));
  t.is(second.instance, instanceKey('m', 2));
  t.not(second.slot, /** @type {any} */ (first).slot);
  t.not(second.tag, /** @type {any} */ (first).tag);
  t.false(edge.acquire(/** @type {any} */ (first).slot, /** @type {any} */ (first).tag), 'the old route takes no new lease');
  t.true(edge.acquire(second.slot, second.tag));
  t.deepEqual(r.pending(), new Map([['m', 2]]), 'the edge\'s leases on both instances count as in flight');
  edge.release(second.slot);

  // The old instance drains only once the main thread's request and the edge's lease are done.
  const lease = r.acquire('m');
  t.is(lease.instance, instanceKey('m', 2));
  const mainHeld = r.acquire('m');
  r.release(mainHeld);
  const drained = r.drained(instanceKey('m', 1));
  t.false(await settled(drained), 'the edge still holds a lease on it');
  edge.release(/** @type {any} */ (first).slot);
  t.false(await settled(drained), 'nothing polls: the edge\'s last release on the closed slot must say so');
  r.edgesReleased(); // what the edge's 'lastRelease' message does on the main thread
  t.true(await settled(drained));
  r.release(lease);

  // Its slot is free again: another instance may take it, under a tag the old route never passes for.
  r.set({ name: 'm', state: ModelState.UNAVAILABLE, spec, instance: instanceKey('m', 2), reason: 'unloaded' });
  t.is(r.routeOf('m'), null, 'not ready: no route');
  t.deepEqual(told.at(-1), ['m', null]);
  await r.drained(instanceKey('m', 2));
  r.set(ready(3));
  const third = /** @type {import('../../../dist/shared/channels/edge.js').EdgeRoute} */ (r.routeOf('m'));
  t.true([/** @type {any} */ (first).slot, second.slot].includes(third.slot), 'a freed slot is reused');
  t.false(edge.acquire(/** @type {any} */ (first).slot, /** @type {any} */ (first).tag));
  t.false(edge.acquire(second.slot, second.tag));
  t.true(edge.acquire(third.slot, third.tag));
});

test('the main thread\'s requests alone: drained waits for the last release', async (t) => {
  const r = new ModelRegistry();
  r.set(ready(1));
  const a = r.acquire('m');
  const b = r.acquire('m');
  const drained = r.drained(instanceKey('m', 1));
  r.release(a);
  t.false(await settled(drained));
  r.release(b);
  t.true(await settled(drained));
  t.throws(() => r.acquire('ghost'), { message: /unknown model "ghost"/ });
});
