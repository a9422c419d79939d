// A calm fleet costs its pooled gateway little (issue 64): on a real fleet (two nodes, one gateway),
// once traffic stops the nodes' versioned status reports say nothing changed, and the gateway's
// checks leave the placement standing (stowage_gateway_placement_unchanged_checks_total grows, the
// routes stay as they were); traffic again places again, and nothing fails throughout.
import test from 'ava';
import { drive, placements, sleep, startFleet, until, zipfPicks } from '../helpers/fleet.js';
import { scrapeMetrics, startServer, tempDir } from '../helpers/server.js';

const UNCHANGED = 'stowage_gateway_placement_unchanged_checks_total';
const PLACED = 'stowage_gateway_placement_seconds_count';

test('once traffic stops, the nodes report nothing new and the gateway\'s checks leave the placement standing', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const { catalog, nodes } = await startFleet(temp.dir, { count: 8, sizes: [32, 64, 4], nodes: 2, budgetShare: 1 });
  t.teardown(() => Promise.all(nodes.map((n) => n.server.stop())));
  const gateway = await startServer({ gateway: { endpoints: nodes.map((n) => n.server.address), health_seconds: 0.25, scheduling: { mode: 'pooled', pooled: { min_move_age_seconds: 1.1 } } } });
  t.teardown(() => gateway.stop());
  // The minimum age as placement counts it: in whole checks, at least the age (1.1 s of 0.25 s checks: 5).
  const serving = gateway.logs.find((l) => l.msg === 'serving');
  t.like(serving?.pooled, { min_move_age_seconds: 1.1, health_seconds: 0.25, min_move_checks: 5 });
  await until(async () => (await placements(gateway.adminPort)).size === catalog.length, 10_000, 'every model is placed');

  const run = async (/** @type {number} */ ms) => {
    let running = true;
    const load = drive([gateway], zipfPicks(catalog, 100_000, 3), { clients: 4, running: () => running });
    await sleep(ms);
    running = false;
    return load;
  };
  const first = await run(1500);
  // Calm: the loads fall to nothing within a window, and the rows stay as they are once the devices'
  // status snapshot (up to about a second old) shows the queues empty; after the two checks a move
  // stays young (its reports lag it) the checks place nothing.
  await sleep(2000);
  await until(async () => ((await scrapeMetrics(gateway.adminPort))[UNCHANGED] ?? 0) > 0, 10_000, 'a check leaves the placement standing');
  const before = await scrapeMetrics(gateway.adminPort);
  const placed = await placements(gateway.adminPort);
  await sleep(2000); // eight checks
  const after = await scrapeMetrics(gateway.adminPort);
  const checks = after[PLACED] - before[PLACED];
  const unchanged = after[UNCHANGED] - before[UNCHANGED];
  t.log(`${checks} checks in 2 s of calm, ${unchanged} left the placement standing`);
  t.true(checks >= 4, `${checks} checks`);
  // (Read in full at every check, as before versioned reports, none would: each read made a new report.
  // Three checks spare: a late change in a report, once, places at one check and is young for two.)
  t.true(unchanged >= checks - 3, `${unchanged} of ${checks} checks placed nothing anew`);
  t.deepEqual(await placements(gateway.adminPort), placed, 'the routes stay as they were');

  // Traffic again: the reports change, and checks place again.
  const second = await run(1500);
  const busy = await scrapeMetrics(gateway.adminPort);
  t.true(busy[PLACED] - after[PLACED] - (busy[UNCHANGED] - after[UNCHANGED]) > 0, 'checks under traffic place anew');
  t.is(first.failed + second.failed, 0);
  t.deepEqual([...first.wrong, ...second.wrong], []);
  t.true(first.ok > 20 && second.ok > 20);
});
