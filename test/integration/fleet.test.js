// A fleet that pools its memory, on one machine: four Stowage nodes serving one repository whose
// weights are four times one node's budget, and two gateway-only processes in `pooled` mode in
// front of them. Zipf traffic through both gateways: every answer is the right model's; both
// gateways place every model on the same nodes and say so in their metrics, with per-model hit
// ratios; far fewer cold loads than a round-robin gateway on the same nodes and traffic; and a node
// killed and restarted under load fails no request, since every model is served by another node.
import { once } from 'node:events';
import test from 'ava';
import { coldLoads, drive, placements, sleep, startFleet, startGateway, until, zipfPicks } from '../helpers/fleet.js';
import { scrapeMetrics, tempDir } from '../helpers/server.js';

const HEALTH_SECONDS = 0.25;
test('four nodes, two pooled gateways: one placement, the right answers, far fewer cold loads than round robin, a node killed and restarted with no failure', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const { catalog, nodes } = await startFleet(temp.dir, { count: 16, sizes: [64, 512, 8], nodes: 4, budgetShare: 1 / 4 });
  /** @type {(() => Promise<void>)[]} */
  const stops = [];
  t.teardown(async () => { await Promise.all(stops.map((s) => s())); });
  for (const n of nodes) stops.push(() => n.server.stop());
  const gateways = await Promise.all([startGateway(nodes, 'pooled', HEALTH_SECONDS), startGateway(nodes, 'pooled', HEALTH_SECONDS)]);
  for (const g of gateways) stops.push(() => g.stop());
  const names = nodes.map((_, i) => `node-${i}`); // placement keys on node names, not addresses

  // Placed from the first check: every model on one node of the four, the same one from both gateways.
  await until(async () => (await placements(gateways[0].adminPort)).size === catalog.length && (await placements(gateways[1].adminPort)).size === catalog.length, 10_000, 'both gateways place every model');
  const first = await placements(gateways[0].adminPort);
  t.deepEqual(await placements(gateways[1].adminPort), first, 'both gateways place alike');
  for (const [, on] of first) t.true(on.length === 1 && names.includes(on[0]));
  // Every model idle: each at its home, bounded by the bytes the nodes read with their index
  // (routing/fleet-homes.ts): 16 models of one size, four homes a node.
  const perNode = names.map((name) => [...first.values()].filter((on) => on[0] === name).length);
  t.deepEqual(perNode, [4, 4, 4, 4], 'four homes a node');
  for (const g of gateways) {
    const bounded = g.logs.find((l) => l.msg === 'homes bounded by the models\' bytes');
    t.like(bounded, { models: 16, withBytes: 16, nodes: 4 }, 'every model\'s bytes read from the nodes');
  }

  // Zipf traffic through both gateways.
  const picks = zipfPicks(catalog, 800, 7);
  const before = await coldLoads(nodes);
  const pooled = await drive(gateways, picks, { clients: 8 });
  const pooledLoads = (await coldLoads(nodes)) - before;
  t.deepEqual(pooled.wrong, [], 'every answer is the right model\'s');
  t.is(pooled.failed, 0);
  t.is(pooled.ok, picks.length);

  // Quiet: both gateways settle on the same placement (the same reports, the same counters).
  /** @type {Map<string, string[]>} */
  let settled = new Map();
  await until(async () => {
    const [a, b] = [await placements(gateways[0].adminPort), await placements(gateways[1].adminPort)];
    settled = a;
    return a.size === catalog.length && JSON.stringify([...a].sort()) === JSON.stringify([...b].sort());
  }, 10_000, 'both gateways agree after the traffic');
  const metrics = await scrapeMetrics(gateways[0].adminPort);
  const hot = picks[0].name; // the most popular model's first pick: it ran
  t.true((metrics[`stowage_gateway_model_weight_hit_ratio{model="${hot}"}`] ?? -1) >= 0, 'per-model hit ratios in the gateway\'s metrics');
  t.true(metrics['stowage_gateway_placement_imbalance'] >= 1);
  t.true(Object.keys(metrics).some((k) => k.startsWith('stowage_gateway_node_weight_budget_bytes{')));
  t.log(`pooled: ${pooled.ok} requests in ${pooled.seconds.toFixed(1)} s, ${pooledLoads} cold loads; placed ${JSON.stringify(Object.fromEntries(settled))}`);

  // Round robin on the same nodes and the same traffic: every node churns the whole catalog.
  const rr = await startGateway(nodes, 'round_robin', HEALTH_SECONDS);
  stops.push(() => rr.stop());
  const rrBefore = await coldLoads(nodes);
  const roundRobin = await drive([rr], picks, { clients: 8 });
  const rrLoads = (await coldLoads(nodes)) - rrBefore;
  t.deepEqual(roundRobin.wrong, []);
  t.is(roundRobin.failed, 0);
  t.log(`round robin: ${roundRobin.ok} requests in ${roundRobin.seconds.toFixed(1)} s, ${rrLoads} cold loads`);
  // Fewer, clearly: the figure itself is bench/fleet.js's to measure (docs/performance.md). Here it came
  // out 0.24x once, 0.39-0.44x alone on 2026-11-28 and 0.50-0.52x beside other load, where the
  // placement's churn (issue 64) costs cold loads; half was too tight a line for a loaded machine.
  t.true(pooledLoads < rrLoads * 0.75, `pooled ${pooledLoads} cold loads, round robin ${rrLoads}`);

  // A node killed and restarted on its port under load through both pooled gateways: no request
  // fails (every model is served by another node), and the restarted node is placed on again.
  let running = true;
  /** @type {string[]} */
  const errors = [];
  const load = drive(gateways, zipfPicks(catalog, 50_000, 11), { clients: 6, running: () => running, onError: (model, err) => errors.push(`${model}: ${err.details ?? err}`) });
  await sleep(500);
  const victim = nodes[1];
  const port = victim.server.address.split(':').pop() ?? '';
  const mark = gateways.map((g) => g.logs.length);
  victim.server.child.kill('SIGKILL');
  await once(victim.server.child, 'exit');
  await until(async () => (await placements(gateways[0].adminPort)).size === catalog.length
    && [...(await placements(gateways[0].adminPort)).values()].every((on) => !on.includes('node-1')), 10_000, 'the killed node\'s models are placed elsewhere');
  await sleep(500); // served from the other nodes for a while
  victim.server = await victim.start({ INFERENCE_SERVER_ENDPOINTS_GRPC_PORT: port });
  for (const [i, g] of gateways.entries()) await g.waitForLog((l) => g.logs.indexOf(l) >= mark[i] && l.msg === 'node up' && l.node === `127.0.0.1:${port}`);
  await until(async () => [...(await placements(gateways[0].adminPort)).values()].some((on) => on.includes('node-1')), 10_000, 'the restarted node is placed on again');
  await sleep(500);
  running = false;
  const during = await load;
  t.log(`during the kill and restart: ${during.ok} requests, ${during.failed} failed`);
  t.deepEqual(errors, [], 'no request failed');
  t.deepEqual(during.wrong, []);
  t.true(during.ok > 100);
});
