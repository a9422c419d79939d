// Health apart from placement, on a real pooled fleet (two nodes, one gateway): a node whose status
// reads are delayed 2 s (past the gateway's 1 s probe timeout) keeps serving with no failed
// request; placement goes on with its last report for report_max_age_seconds, then stops counting
// the loads it reported but keeps it placed (a node that serves is not emptied because its status
// cannot be read: before 2026-11-29 it left placement, and every model homed on it moved away and
// back); once its status reads answer again its loads count again. The delay is injected on the node itself
// (STOWAGE_FAULT_STATUS_DELAY_FILE), so the gateway sees a real slow call.
import { rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import test from 'ava';
import { drive, placements, sleep, startFleet, until, zipfPicks } from '../helpers/fleet.js';
import { scrapeMetrics, startServer, tempDir } from '../helpers/server.js';

test('a node whose status reads are delayed 2 s keeps serving: placement holds its last report for a bounded age, then its loads no longer count; it stays placed, and in traffic', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const delayFile = path.join(temp.dir, 'status-delay');
  const { catalog, nodes } = await startFleet(temp.dir, { count: 12, sizes: [32, 64, 4], nodes: 2, budgetShare: 1, env: (i) => (i === 1 ? { STOWAGE_FAULT_STATUS_DELAY_FILE: delayFile } : /** @type {Record<string, string>} */ ({})) });
  t.teardown(() => Promise.all(nodes.map((n) => n.server.stop())));
  const slow = nodes[1];
  const gateway = await startServer({
    gateway: {
      endpoints: nodes.map((n) => n.server.address),
      health_seconds: 0.25,
      scheduling: { mode: 'pooled', pooled: { report_max_age_seconds: 3 } },
    },
  });
  t.teardown(() => gateway.stop());
  const metric = async (/** @type {string} */ key) => (await scrapeMetrics(gateway.adminPort))[key];
  const up = () => metric(`stowage_gateway_node_up{node="${slow.server.address}"}`);
  const on = async (/** @type {string} */ name) => [...(await placements(gateway.adminPort)).entries()].filter(([, at]) => at.includes(name)).map(([m]) => m);

  await until(async () => (await placements(gateway.adminPort)).size === catalog.length, 10_000, 'every model is placed');
  const held = await on('node-1');
  t.true(held.length > 0, 'rendezvous hashing gave node-1 some of the 12 models');

  let running = true;
  /** @type {string[]} */
  const errors = [];
  const load = drive([gateway], zipfPicks(catalog, 100_000, 3), { clients: 4, running: () => running, onError: (model, err) => errors.push(`${model}: ${err.details ?? err}`) });

  // Status reads of node-1 now take 2 s: each one the gateway makes times out after 1 s.
  writeFileSync(delayFile, '2000');
  const since = Date.now();
  await until(async () => (await metric(`stowage_gateway_node_status_failures{node="${slow.server.address}"}`)) >= 1, 5_000, 'a status read of node-1 fails');
  t.is(await up(), 1, 'a failed status read leaves the node up');
  if (Date.now() - since < 2_000) t.true((await on('node-1')).length > 0, 'within report_max_age_seconds placement goes on with its last report');

  // Past the bound its report is too old to place by (the loads it reported no longer count:
  // test/unit/remote/fleet-routes.test.js), but it stays placed by its last word and takes traffic.
  await until(async () => /** @type {number} */ ((await metric(`stowage_gateway_node_report_age_seconds{node="${slow.server.address}"}`)) ?? 0) >= 3.3, 8_000, 'node-1\'s report past its age');
  for (let k = 0; k < 4; k++) {
    t.true((await on('node-1')).length > 0, 'node-1 stays placed');
    await sleep(250);
  }
  t.is(await up(), 1, 'and stays up: health is the ServerReady probe and the health Watch alone');

  // Status reads answer again: placed by its fresh reports.
  rmSync(delayFile);
  await until(async () => (await metric(`stowage_gateway_node_report_age_seconds{node="${slow.server.address}"}`) ?? 99) < 1, 10_000, 'node-1 reports again');
  t.true((await on('node-1')).length > 0);
  await sleep(500);
  running = false;
  const during = await load;
  t.log(`${during.ok} requests while node-1's status reads were slow and after, ${during.failed} failed`);
  t.deepEqual(errors, [], 'no request failed');
  t.deepEqual(during.wrong, []);
  t.true(during.ok > 50);
  const failedReads = gateway.logs.filter((l) => l.msg?.startsWith('status read failed'));
  t.log(failedReads.map((l) => `${l.node} at report age ${l.reportAgeMs} ms`));
  t.deepEqual([...new Set(failedReads.map((l) => l.node))], [slow.server.address], 'the gateway says which node\'s status reads fail');
  t.falsy(gateway.logs.find((l) => l.msg === 'node down: it does not answer'), 'never marked down');
});
