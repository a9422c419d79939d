// The union of the members' model lists a pooled gateway places (remote/fleet-catalog.ts): counted
// per member, so that a list replaced by one of the same models changes nothing, and a model leaves
// only with the last member serving it.
import test from 'ava';
import { FleetCatalog } from '../../../dist/remote/fleet-catalog.js';

test('the catalog is every member\'s models once, sorted, each with its index', (t) => {
  const catalog = new FleetCatalog();
  const { added, removed } = catalog.update(new Map([['b', ['m3', 'm1']], ['a', ['m2', 'm1']]]));
  t.deepEqual(catalog.names, ['m1', 'm2', 'm3'], 'sorted, whatever order the members came in');
  t.deepEqual([...catalog.order], [['m1', 0], ['m2', 1], ['m3', 2]]);
  t.deepEqual(added.sort(), ['m1', 'm2', 'm3']);
  t.deepEqual(removed, []);
});

test('a member\'s list replaced by one of the same models (its index read anew) adds and removes nothing', (t) => {
  const catalog = new FleetCatalog();
  catalog.update(new Map([['a', ['m1', 'm2']], ['b', ['m2', 'm3']]]));
  const names = catalog.names;
  const change = catalog.update(new Map([['a', ['m2', 'm1']], ['b', ['m2', 'm3']]]));
  t.deepEqual(change, { added: [], removed: [] });
  t.is(catalog.names, names, 'the same list: nothing was sorted again');
});

test('a model leaves with the last member that serves it; one list shared by members is counted for each', (t) => {
  const catalog = new FleetCatalog();
  const shared = ['m1', 'm2'];
  catalog.update(new Map([['a', shared], ['b', shared], ['c', ['m3']]]));
  t.deepEqual(catalog.update(new Map([['b', shared], ['c', ['m3']]])), { added: [], removed: [] }, 'b still serves a\'s models');
  t.deepEqual(catalog.update(new Map([['b', shared]])), { added: [], removed: ['m3'] });
  t.deepEqual(catalog.update(new Map([['b', ['m1', 'm4']]])), { added: ['m4'], removed: ['m2'] });
  t.deepEqual(catalog.names, ['m1', 'm4']);
  t.deepEqual(catalog.update(new Map()), { added: [], removed: ['m1', 'm4'] });
  t.deepEqual(catalog.names, []);
});
