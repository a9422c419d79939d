// The registry's leases (node/model-registry.ts, node/model-slots.ts), one mechanism in shared memory
// for every thread: a ready model's instance gets an open slot and a route; a reload closes the old
// instance's slot at once (a thread holding the old route, an edge's or the main thread's, takes no
// new lease on it) and opens one for the new instance under a new tag; waiting for an instance to
// drain waits for every thread's leases, each in its row, then frees the slot, which another
// instance may take under another tag that the old route never passes for; a model that is not
// ready has no route.
import test from 'ava';
import { ModelRegistry, ModelState } from '../../../dist/node/model-registry.js';
import { Leases, SEGMENT_SLOTS } from '../../../dist/shared/leases.js';
import { instanceKey } from '../../../dist/shared/model-spec.js';
import { modelSpec } from '../../helpers/specs.js';

const spec = modelSpec({ name: 'm' });
const ready = (/** @type {number} */ generation) => ({ name: 'm', state: ModelState.READY, spec, instance: instanceKey('m', generation), reason: '' });
const settled = async (/** @type {Promise<unknown>} */ p) => Promise.race([p.then(() => true), new Promise((resolve) => setTimeout(() => resolve(false), 30))]);

function registry() {
  const leases = Leases.create(1);
  const r = new ModelRegistry(leases);
  /** @type {[string, import('../../../dist/shared/channels/edge.js').EdgeRoute | null][]} */
  const told = [];
  r.watchRoutes((model, route) => told.push([model, route]));
  return { r, leases, edge: () => new Leases(leases.shape, 0), main: () => new Leases(leases.shape, 1), told };
}

test('a ready model gets a slot and a route; a reload moves new leases to the new instance at once', async (t) => {
  const { r, leases, edge: edgeOf, main: mainOf, told } = registry();
  r.set({ name: 'm', state: ModelState.LOADING, spec, reason: '' });
  t.is(r.routeOf('m'), null, 'loading: no route');
  r.set(ready(1));
  const edge = edgeOf(); // started once the first slot's segment exists
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
  edge.release(second.slot, second.tag);

  // The old instance drains only once every thread's leases on it are given back: the main thread's rooms hold in
  // the same slot, in its own row (the last).
  const main = mainOf();
  t.true(main.acquire(second.slot, second.tag));
  t.is(leases.heldHere(second.slot), 1, 'in the main thread\'s row');
  const drained = r.drained(instanceKey('m', 1));
  t.false(await settled(drained), 'the edge still holds a lease on it');
  edge.release(/** @type {any} */ (first).slot, /** @type {any} */ (first).tag);
  t.false(await settled(drained), 'nothing polls: the edge\'s last release on the closed slot must say so');
  r.released(); // what the edge's 'lastRelease' message does on the main thread
  t.true(await settled(drained));
  t.deepEqual(r.pending(), new Map([['m', 1]]), 'the main thread\'s lease counts as in flight');
  main.release(second.slot, second.tag);

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

test('the main thread\'s requests alone: drained waits for the last release on the closed slot, which says so itself', async (t) => {
  const leases = Leases.create(0); // no edge threads: the main thread's row alone
  const r = new ModelRegistry(leases);
  r.set(ready(1));
  const route = /** @type {import('../../../dist/shared/channels/edge.js').EdgeRoute} */ (r.routeOf('m'));
  let lastOut = 0;
  const main = new Leases(leases.shape, 0, null, () => {
    lastOut++;
    r.released();
  });
  t.true(main.acquire(route.slot, route.tag));
  t.true(main.acquire(route.slot, route.tag));
  r.set({ name: 'm', state: ModelState.UNLOADING, spec, instance: instanceKey('m', 1), reason: 'unloading' });
  t.is(r.routeOf('m'), null, 'unloading: no route');
  t.false(main.acquire(route.slot, route.tag), 'unloading: no new lease on the old route');
  const drained = r.drained(instanceKey('m', 1));
  main.release(route.slot, route.tag);
  t.false(await settled(drained));
  main.release(route.slot, route.tag);
  t.true(lastOut >= 1, 'the last release said so');
  t.true(await settled(drained));
  t.deepEqual(r.pending(), new Map());
});

test('instances beyond one segment of slots each get a slot of their own, and leases there work', (t) => {
  /** @type {SharedArrayBuffer[]} */
  const grown = [];
  const leases = Leases.create(1, (segment) => grown.push(segment));
  const r = new ModelRegistry(leases);
  const count = SEGMENT_SLOTS + 3;
  for (let i = 0; i < count; i++) r.set({ name: `m${i}`, state: ModelState.READY, spec: modelSpec({ name: `m${i}` }), instance: instanceKey(`m${i}`, 1), reason: '' });
  t.is(grown.length, 2, 'a second segment was added');
  const routes = r.routes();
  t.is(routes.length, count, 'every model has a route');
  t.is(new Set(routes.map((x) => x.slot)).size, count, 'each its own slot');
  const edge = new Leases(leases.shape, 0);
  const last = /** @type {import('../../../dist/shared/channels/edge.js').EdgeRoute} */ (r.routeOf(`m${count - 1}`));
  t.true(edge.acquire(last.slot, last.tag));
  const main = new Leases(leases.shape, 1);
  t.true(main.acquire(last.slot, last.tag));
  t.deepEqual(r.pending(), new Map([[`m${count - 1}`, 2]]));
  main.release(last.slot, last.tag);
  edge.release(last.slot, last.tag);
});
