// The CI share of the fuzzer (bench/fuzz.js runs the long one): a few thousand mutated
// ModelInfer messages, unary and on streams, against a real node and a gateway-only process in
// front of it. Zero findings: every call gets a client status (no INTERNAL, no UNKNOWN, no hang),
// streams end with an answer for everything they must answer, and after every batch a known
// request still answers correctly. The seed is fixed so a failure replays.
import test from 'ava';
import { fuzz, fuzzRepository } from '../../bench/fuzz.js';
import { fuzzRest } from '../../bench/fuzz-rest.js';
import { startServer, tempDir } from '../helpers/server.js';

const CASES = 3000;
const SEED = 20261124;

test('3000 mutated requests to a node and to a gateway-only process: every answer a client status, nothing lost, both still serve', async (t) => {
  t.timeout(600_000);
  const temp = tempDir('stowage-fuzz-test-');
  t.teardown(() => temp.cleanup());
  const node = await startServer({ model_repo: fuzzRepository(temp.dir) }, { root: temp.dir });
  t.teardown(() => node.stop());
  const gateway = await startServer({ gateway: { endpoints: [node.address] } });
  t.teardown(() => gateway.stop());

  for (const [target, address] of [['node', node.address], ['gateway', gateway.address]]) {
    const result = await fuzz({ address, cases: CASES / 2, seed: SEED, deadlineMs: 60_000 });
    t.log(`${target}: ${result.cases} cases (${result.wireDamaged} damaged on the wire) in ${result.seconds.toFixed(1)} s: ${JSON.stringify(result.statuses)}`);
    t.is(result.cases, CASES / 2, `${target}: every case was sent`);
    t.deepEqual(result.findings, [], `${target}: findings`);
    // The mutations reach every layer: some requests still compute, most are refused by name.
    t.true(result.statuses.OK > 0, `${target}: some mutated requests still succeed`);
    t.true(result.statuses.INVALID_ARGUMENT > CASES / 8, `${target}: most are refused as invalid`);
    t.true(result.wireDamaged > 0, `${target}: some cases were damaged on the wire`);
  }
  t.is(node.child.exitCode, null, 'the node is alive');
  t.is(gateway.child.exitCode, null, 'the gateway is alive');
});

test('3000 mutated REST bodies, JSON and binary, compressed or not: no 500, no connection broken, the node still serves', async (t) => {
  t.timeout(600_000);
  const temp = tempDir('stowage-fuzz-rest-');
  t.teardown(() => temp.cleanup());
  const node = await startServer({ model_repo: fuzzRepository(temp.dir) }, { root: temp.dir });
  t.teardown(() => node.stop());
  const result = await fuzzRest({ url: /** @type {string} */ (node.rest), cases: 3000, seed: SEED, deadlineMs: 60_000 });
  t.log(`rest: ${result.cases} cases (${result.damaged} damaged) in ${result.seconds.toFixed(1)} s: ${JSON.stringify(result.statuses)}`);
  t.is(result.cases, 3000);
  t.deepEqual(result.findings, []);
  t.true((result.statuses[200] ?? 0) > 0, 'some mutated bodies still compute');
  t.true((result.statuses[400] ?? 0) > 3000 / 4, 'most are refused as invalid');
  t.is(node.child.exitCode, null, 'the node is alive');
});
