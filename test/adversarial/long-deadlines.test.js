// Waits longer than a Node timer holds (2^31−1 ms, about 24.8 days), which would otherwise fire at
// once: a queue bound written as "never" in the node file, a client deadline weeks away (gRPC's own
// timer in grpc-js included), and a REST request under that queue bound, on the main thread and
// through edge threads. A bound past what a timer can hold is refused at start-up, saying why.
import test from 'ava';
import { DIGITS, digits, heldout } from '../helpers/digits.js';
import { dataAs, makeRepository, startServer, tempDir } from '../helpers/server.js';
import { MAX_TIMER_SECONDS } from '../../dist/shared/timers.js';

const DAY_MS = 86_400_000;

for (const edges of [0, 2]) {
  test(`edge_threads ${edges}: a queue bound of ${MAX_TIMER_SECONDS} s and deadlines of 25 and 60 days serve every request`, async (t) => {
    const temp = tempDir();
    t.teardown(temp.cleanup);
    const repo = makeRepository(temp.dir, { digits: DIGITS });
    const server = await startServer({ model_repo: repo, global: { scheduler: { dispatch_timeout_seconds: MAX_TIMER_SECONDS }, endpoints: { edge_threads: edges } } }, { root: temp.dir });
    t.teardown(() => server.stop());
    const labels = async (/** @type {number | undefined} */ timeoutMs) => {
      const { outputs } = await server.client.infer('digits', [digits(0, 2)], { outputs: ['label'], timeoutMs });
      return [...dataAs(outputs[0], BigInt64Array)].map(Number);
    };
    const expected = heldout.labels.slice(0, 2);
    t.deepEqual(await labels(undefined), expected, 'gRPC without a deadline');
    t.deepEqual(await labels(25 * DAY_MS), expected, 'gRPC, a deadline 25 days away');
    t.deepEqual(await labels(60 * DAY_MS), expected, 'gRPC, a deadline 60 days away');
    const res = await fetch(`${server.rest}/v2/models/digits/infer`, {
      method: 'POST',
      body: JSON.stringify({ inputs: [{ name: 'image', datatype: 'FP32', shape: [1, 8, 8], data: heldout.images[0] }], outputs: [{ name: 'label' }] }),
    });
    t.is(res.status, 200, await res.clone().text());
    t.deepEqual((await res.json()).outputs[0].data, [heldout.labels[0]]);
  });
}

test('a queue bound past what a timer holds stops start-up, naming the key and the limit', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const repo = makeRepository(temp.dir, { digits: DIGITS });
  const err = await t.throwsAsync(startServer({ model_repo: repo, global: { scheduler: { dispatch_timeout_seconds: MAX_TIMER_SECONDS + 1 } } }, { root: temp.dir }));
  t.regex(err?.message ?? '', new RegExp(`global\\.scheduler\\.dispatch_timeout_seconds: ${MAX_TIMER_SECONDS + 1} must be <= ${MAX_TIMER_SECONDS} \\(seconds: about 24\\.8 days, the longest a timer can wait\\)`));
});
