// One model's policy on one device: the node file's scheduler.models (the worker's over global's),
// run-time changes over it; warmup and tf32 pass through to the device only when the file sets them.
import test from 'ava';
import { ModelPolicies } from '../../../dist/node/model-policies.js';

test('a policy is the node file\'s, with warmup and tf32 only where the file sets them, and changes over it', (t) => {
  const policies = new ModelPolicies([
    { deviceId: 0, models: { exact: { weight: 2, tf32: false, warmup: false }, plain: { weight: 1 } } },
    { deviceId: 1, models: { exact: { weight: 1, residency: 'device' } } },
  ]);
  t.deepEqual(policies.of(0, 'exact'), { weight: 2, residency: 'system', warmup: false, tf32: false });
  t.deepEqual(policies.of(0, 'plain'), { weight: 1, residency: 'system' }, 'the device\'s runtime settings apply');
  t.deepEqual(policies.of(1, 'exact'), { weight: 1, residency: 'device' });
  t.deepEqual(policies.of(0, 'unknown'), { weight: 1, residency: 'system' });
  policies.change('exact', { weight: 5, maxBatchSize: 4 });
  t.deepEqual(policies.of(0, 'exact'), { weight: 5, maxBatchSize: 4, residency: 'system', warmup: false, tf32: false });
});
