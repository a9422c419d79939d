// lpt_packing's packer: heaviest first, balancing compute and weight bytes, replicas on distinct
// devices, sticky to where a model is.
import test from 'ava';
import { pack } from '../../../dist/routing/placement.js';

const devices = (/** @type {number} */ n, budget = 0) => Array.from({ length: n }, (_, id) => ({ id, budget }));
const spread = (/** @type {import('../../../dist/routing/placement.js').Placement} */ placement) => {
  const loads = [...placement.load.values()];
  return Math.max(...loads) / Math.min(...loads);
};

test('each model goes on one device and the compute loads end up within a few percent', (t) => {
  const items = Array.from({ length: 20 }, (_, i) => ({ model: `m${i}`, load: 1 + (i * 7) % 11, bytes: 100, replicas: 1 }));
  const p = pack(items, devices(4));
  t.true([...p.devices.values()].every((ids) => ids.length === 1));
  t.true(spread(p) < 1.1, `loads ${[...p.load.values()]}`);
});

test('without measurements, weight bytes are balanced against each device\'s budget', (t) => {
  const items = [400, 300, 300, 200, 200, 100, 100, 100].map((bytes, i) => ({ model: `m${i}`, load: 0, bytes, replicas: 1 }));
  const p = pack(items, [{ id: 0, budget: 1000 }, { id: 1, budget: 1000 }]);
  const bytes = [...p.bytes.values()];
  t.is(bytes[0] + bytes[1], 1700);
  t.true(Math.max(...bytes) / Math.min(...bytes) <= 1.15, `bytes ${bytes}`);
  t.deepEqual(p.oversubscribed, []);
});

test('replicas land on distinct devices and share the model\'s load; all means every device', (t) => {
  const p = pack([
    { model: 'hot', load: 8, bytes: 10, replicas: 2 },
    { model: 'everywhere', load: 1, bytes: 10, replicas: 99 },
    { model: 'a', load: 4, bytes: 10, replicas: 1 },
    { model: 'b', load: 4, bytes: 10, replicas: 1 },
  ], devices(3));
  t.is(new Set(p.devices.get('hot')).size, 2);
  t.deepEqual([...p.devices.get('everywhere') ?? []].sort(), [0, 1, 2]);
});

test('a device whose placed weights exceed its budget is reported', (t) => {
  const p = pack([{ model: 'a', load: 1, bytes: 700, replicas: 2 }, { model: 'b', load: 1, bytes: 700, replicas: 2 }], devices(2, 1000));
  t.deepEqual(p.oversubscribed.map((o) => [o.device, o.bytes, o.budget]), [[0, 1400, 1000], [1, 1400, 1000]]);
});

test('a model stays on its device unless another is clearly better', (t) => {
  const items = [{ model: 'a', load: 5, bytes: 1, replicas: 1, current: [1] }, { model: 'b', load: 5.2, bytes: 1, replicas: 1, current: [0] }];
  const p = pack(items, devices(2));
  t.deepEqual(p.devices.get('a'), [1]);
  t.deepEqual(p.devices.get('b'), [0]);
});
