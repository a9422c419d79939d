// A pooled gateway places on a thread of its own (src/remote/placement/): on a real fleet (two
// nodes, one gateway), the placement thread ends in the middle of traffic (a fault hook,
// STOWAGE_FAULT_PLACEMENT_EXIT); requests keep their routes with no failure, the gateway says so,
// and a new placement thread places every model again at the next check.
import { existsSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import test from 'ava';
import { drive, placements, sleep, startFleet, until, zipfPicks } from '../helpers/fleet.js';
import { startServer, tempDir } from '../helpers/server.js';

test('a placement thread that ends loses no request: routes stay, and a new thread places every model at the next check', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const { catalog, nodes } = await startFleet(temp.dir, { count: 8, sizes: [32, 64, 4], nodes: 2, budgetShare: 1 });
  t.teardown(() => Promise.all(nodes.map((n) => n.server.stop())));
  const exitFile = path.join(temp.dir, 'placement-exit');
  const gateway = await startServer({
    gateway: { endpoints: nodes.map((n) => n.server.address), health_seconds: 0.25, scheduling: { mode: 'pooled' } },
  }, { env: { STOWAGE_FAULT_PLACEMENT_EXIT: exitFile } });
  t.teardown(() => gateway.stop());
  await until(async () => (await placements(gateway.adminPort)).size === catalog.length, 10_000, 'every model is placed');
  // What each node serves came from the placement thread's index reads; readiness counts them.
  const ready = await (await fetch(`http://127.0.0.1:${gateway.adminPort}/readyz`)).json();
  t.deepEqual(ready.nodes.map((/** @type {{ up: boolean, models: number }} */ n) => [n.up, n.models]), nodes.map(() => [true, catalog.length]));

  let running = true;
  /** @type {string[]} */
  const errors = [];
  const load = drive([gateway], zipfPicks(catalog, 100_000, 5), { clients: 4, running: () => running, onError: (model, err) => errors.push(`${model}: ${err.details ?? err}`) });
  await sleep(500);
  writeFileSync(exitFile, '');
  await until(async () => gateway.logs.some((l) => l.msg?.startsWith('the placement thread ended')), 5_000, 'the gateway logs the placement thread\'s end');
  t.false(existsSync(exitFile), 'the thread took the fault');
  // A new thread at the next check: every model placed again, on the fleet's nodes (where each runs
  // under this traffic, which is not where the first check put it before any ran).
  await until(async () => (await placements(gateway.adminPort)).size === catalog.length, 10_000, 'every model is placed again');
  for (const [model, on] of await placements(gateway.adminPort)) t.true(on.length > 0 && on.every((n) => n === 'node-0' || n === 'node-1'), `${model} on ${on}`);
  await sleep(500);
  running = false;
  const during = await load;
  t.log(`${during.ok} requests across the placement thread's end, ${during.failed} failed`);
  t.deepEqual(errors, [], 'no request failed');
  t.deepEqual(during.wrong, []);
  t.true(during.ok > 50);
  const ended = gateway.logs.filter((l) => l.msg?.startsWith('the placement thread ended'));
  t.is(ended.length, 1);
  t.is(ended[0].code, 3);
});
