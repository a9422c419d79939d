// A pooled gateway's routes (remote/placed-routes.ts) with shares: a model's requests picked in
// proportion to its shares on the main thread's copy as on the placement thread's, the shares carried
// in the changes posted between them, dropped when its nodes change, and ignored where the routed
// nodes are not among the candidates.
import test from 'ava';
import { PlacedRoutes } from '../../../dist/remote/placed-routes.js';
import { Router } from '../../../dist/routing/routing.js';

const candidates = [{ address: '10.0.0.1:8001', inflight: 0 }, { address: '10.0.0.2:8001', inflight: 5 }, { address: '10.0.0.3:8001', inflight: 0 }];
const names = new Map([['10.0.0.1:8001', 'n1'], ['10.0.0.2:8001', 'n2'], ['10.0.0.3:8001', 'n3']]);
/** How many of `count` picks of `model` each node name took. */
function tally(/** @type {PlacedRoutes} */ routes, /** @type {string} */ model, count = 400, among = candidates) {
  const router = new Router('least_outstanding');
  const taken = new Map();
  for (let i = 0; i < count; i++) {
    const name = routes.nameOf(routes.pick(model, among, router).address);
    taken.set(name, (taken.get(name) ?? 0) + 1);
  }
  return Object.fromEntries([...taken].sort());
}

test('a model\'s requests follow its shares, on the copy fed the changes as on the original', (t) => {
  const routes = new PlacedRoutes({ keepChanges: true });
  routes.setNames(names);
  routes.set('m', ['n1', 'n2']);
  t.deepEqual(tally(routes, 'm'), { n1: 400 }, 'no shares: the least outstanding of its nodes (n2 has 5 in flight)');
  routes.setShares('m', [0.25, 0.75]);
  t.deepEqual(tally(routes, 'm'), { n1: 100, n2: 300 }, 'by its shares, whatever is in flight');
  const copy = new PlacedRoutes();
  copy.apply(/** @type {NonNullable<ReturnType<PlacedRoutes['changes']>>} */ (routes.changes()));
  t.deepEqual(copy.sharesOf('m'), [0.25, 0.75]);
  t.deepEqual(tally(copy, 'm'), { n1: 100, n2: 300 });
  t.is(routes.changes(), null, 'nothing changed since');
  routes.setShares('m', [0.25, 0.75]);
  t.is(routes.changes(), null, 'the same shares again: no change');
});

test('new nodes drop the shares, shares of another length are not taken, and routed nodes gone fall back to the router', (t) => {
  const routes = new PlacedRoutes({ keepChanges: true });
  routes.setNames(names);
  routes.set('m', ['n1', 'n2']);
  routes.setShares('m', [0.5, 0.5]);
  routes.changes();
  routes.set('m', ['n2', 'n3']);
  t.is(routes.sharesOf('m'), undefined, 'shares were of the nodes before');
  const change = routes.changes();
  t.deepEqual(change?.shares, [['m', null]]);
  routes.setShares('m', [1]);
  t.is(routes.sharesOf('m'), undefined, 'one share for two nodes: not taken');
  routes.setShares('m', [0.9, 0.1]);
  // Of the candidates, only n1 (not routed): route falls back to it, and no share applies.
  t.deepEqual(tally(routes, 'm', 10, [candidates[0]]), { n1: 10 });
  routes.delete('m');
  t.is(routes.sharesOf('m'), undefined);
  t.deepEqual(routes.changes()?.shares, [['m', null]]);
});
