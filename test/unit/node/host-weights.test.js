// The process's host copies of weights: one buffer per distinct tensor, kept while any loaded
// model version holds it.
import test from 'ava';
import { HostWeights } from '../../../dist/node/host-weights.js';
import { instanceKey } from '../../../dist/shared/model-spec.js';

const v1 = instanceKey('v1', 1);
const v2 = instanceKey('v2', 1);

test('a tensor stays while any instance holds it; devices reporting the same holdings change nothing', (t) => {
  const host = new HostWeights();
  const backbone = new SharedArrayBuffer(100);
  host.update({ created: { backbone, head1: new SharedArrayBuffer(10) }, holdings: [{ instance: v1, keys: ['backbone', 'head1'] }] });
  host.update({ created: {}, holdings: [{ instance: v1, keys: ['backbone', 'head1'] }] }); // the second device
  t.is(host.bytes, 110);
  host.update({ created: { head2: new SharedArrayBuffer(10) }, holdings: [{ instance: v2, keys: ['backbone', 'head2'] }] });
  t.is(host.offer().backbone, backbone, 'offered to the next load, not copied');
  host.release(v1);
  t.is(host.bytes, 110, 'head1 gone, the backbone kept for v2');
  host.update({ created: {}, holdings: [{ instance: v2, keys: [] }] }); // v2 unpinned
  t.is(host.bytes, 0);
  t.is(host.tensors, 0);
});

test('a buffer created twice for one key (two devices at once) is held once', (t) => {
  const host = new HostWeights();
  const first = new SharedArrayBuffer(8);
  host.update({ created: { k: first }, holdings: [{ instance: instanceKey('a', 1), keys: ['k'] }] });
  host.update({ created: { k: new SharedArrayBuffer(8) }, holdings: [{ instance: instanceKey('b', 1), keys: ['k'] }] });
  t.is(host.offer().k, first);
  t.is(host.bytes, 8);
});
