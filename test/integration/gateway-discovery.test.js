// A gateway-only process that finds its nodes by DNS, as behind a Kubernetes headless Service:
// nodes on several loopback addresses (one port, as pods share one), a DNS server the test
// controls, and a bounded load through the gateway while nodes join, leave and DNS stops
// answering. No request may fail: a node that leaves DNS takes no new requests and finishes
// those in flight before the gateway drops it, and only then is it stopped.
import net from 'node:net';
import path from 'node:path';
import test from 'ava';
import { startDnsServer } from '../helpers/dns-server.js';
import { ROOT, scrapeMetrics, startServer } from '../helpers/server.js';
import { grpcError } from '../helpers/errors.js';
import { awaitableCount } from '../helpers/checks.js';

const NAME = 'stowage-nodes.test.svc';
const HOSTS = ['127.0.0.2', '127.0.0.3', '127.0.0.4'];

/**
 * A port free on every one of `hosts`.
 * @param {string[]} hosts
 */
async function freePortOn(hosts) {
  for (let attempt = 0; attempt < 20; attempt++) {
    const first = net.createServer();
    await new Promise((resolve) => first.listen(0, hosts[0], () => resolve(undefined)));
    const { port } = /** @type {net.AddressInfo} */ (first.address());
    const others = await Promise.all(hosts.slice(1).map((host) => /** @type {Promise<net.Server | null>} */ (new Promise((resolve) => {
      const s = net.createServer();
      s.once('error', () => resolve(null));
      s.listen(port, host, () => resolve(s));
    }))));
    for (const s of [first, ...others]) s?.close();
    if (others.every(Boolean)) return port;
  }
  throw new Error('no port free on every loopback address');
}

const image = { name: 'image', datatype: /** @type {const} */ ('FP32'), shape: [1, 8, 8], data: new Float32Array(64) };

/**
 * Inferences the node answered, from its own statistics.
 * @param {import('../helpers/server.js').Server} node
 */
async function answered(node) {
  const stats = await node.client.call('ModelStatistics', { name: 'digits' });
  return Number(stats.model_stats[0]?.inference_count ?? 0);
}

/**
 * Polls a node's statistics until `condition` holds (a count no event announces), at most `timeoutMs`.
 * @param {() => Promise<boolean>} condition
 * @param {string} what
 */
async function until(condition, what, timeoutMs = 20_000) {
  const started = Date.now();
  while (!(await condition())) {
    if (Date.now() - started > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

test('nodes found by DNS join and leave under load with no failed request; a silent DNS keeps the nodes it found', async (t) => {
  const dns = await startDnsServer();
  t.teardown(() => dns.close());
  const port = await freePortOn(HOSTS);
  let adminPort = await freePortOn(HOSTS);
  while (adminPort === port) adminPort = await freePortOn(HOSTS);
  const startNode = async (/** @type {string} */ host) => {
    const node = await startServer({
      model_repo: path.join(ROOT, 'bundles'), models_include: ['digits'],
      global: { endpoints: { host } },
    }, { env: { INFERENCE_SERVER_ENDPOINTS_GRPC_PORT: String(port), INFERENCE_SERVER_ENDPOINTS_ADMIN_PORT: String(adminPort) } });
    t.teardown(() => node.stop());
    return node;
  };
  const [a, b] = await Promise.all([startNode(HOSTS[0]), startNode(HOSTS[1])]);
  dns.set(NAME, [HOSTS[0]]);

  const gateway = await startServer({
    gateway: {
      health_seconds: 0.5,
      discovery: { dns_name: NAME, port, interval_seconds: 0.2, resolver: dns.address, metrics_port: adminPort },
    },
  });
  t.teardown(() => gateway.stop());
  t.regex(gateway.entry.discovery, /stowage-nodes/);
  t.deepEqual(gateway.entry.nodes.map((/** @type {{ node: string }} */ n) => n.node), [`${HOSTS[0]}:${port}`]);

  // A bounded load: four clients in a loop until told to stop (at most 60 s).
  let stopping = false;
  const ok = awaitableCount();
  /** @type {string[]} */
  const failures = [];
  const started = Date.now();
  const load = Promise.all([0, 1, 2, 3].map(async () => {
    while (!stopping && Date.now() - started < 60_000) {
      try {
        await gateway.client.infer('digits', [image], { outputs: ['label'] });
        ok.add();
      } catch (err) {
        const failure = /** @type {import('@grpc/grpc-js').ServiceError} */ (err);
        failures.push(`${failure.code} ${failure.details}`);
      }
    }
  }));
  await ok.reached(50);

  // B appears in DNS: the gateway adds it and sends it requests.
  dns.set(NAME, [HOSTS[0], HOSTS[1]]);
  await gateway.waitForLog((e) => e.msg === 'node up' && e.node === `${HOSTS[1]}:${port}`);
  await until(async () => (await answered(b)) > 20, 'B to take requests');
  // The gateway's /metrics includes each discovered node's, from its admin port (discovery.metrics_port).
  // A node's scrape that takes over the gateway's 1 s probe timeout is left out of that one answer (a
  // loaded CI machine, the node under this test's load): scraped again until both are in.
  const served = (/** @type {string} */ host) => new RegExp(`nv_inference_request_success\\{[^}]*model="digits"[^}]*node="${host.replaceAll('.', '\\.')}:${adminPort}"`);
  let merged = '';
  await until(async () => {
    merged = await (await fetch(`http://127.0.0.1:${gateway.adminPort}/metrics`)).text();
    return HOSTS.slice(0, 2).every((host) => served(host).test(merged));
  }, 'the gateway\'s /metrics to include both nodes\' own');
  for (const host of [HOSTS[0], HOSTS[1]]) t.regex(merged, served(host));

  // A leaves DNS: it is drained and dropped, then stopped; B answers everything.
  dns.set(NAME, [HOSTS[1]]);
  await gateway.waitForLog((e) => e.msg === 'node dropped' && e.node === `${HOSTS[0]}:${port}`);
  const aAnswered = await answered(a);
  await a.stop();
  await ok.reached(ok.value + 50); // answers from B alone
  t.true(aAnswered > 0);

  // DNS stops answering: the gateway keeps B and goes on serving.
  dns.pause();
  await gateway.waitForLog((e) => e.msg?.startsWith('node discovery: DNS does not answer') ?? false);
  await ok.reached(ok.value + 50); // answers while DNS is silent
  dns.resume();
  await gateway.waitForLog((e) => e.msg === 'node discovery: DNS answers again');

  // A name with no address left (a headless Service with no ready pod): B drains and the gateway is not ready.
  stopping = true;
  await load;
  dns.set(NAME, []);
  await gateway.waitForLog((e) => e.msg === 'node dropped' && e.node === `${HOSTS[1]}:${port}`);
  t.false((await gateway.client.call('ServerReady', {})).ready);
  const metrics = await scrapeMetrics(gateway.adminPort);
  t.deepEqual(Object.keys(metrics).filter((k) => k.startsWith('stowage_gateway_node_up')), [], 'dropped nodes leave the metrics');

  t.deepEqual(failures, []);
  t.true(ok.value > 150, `${ok.value} answered`);
});

test('discovery is configured from the node file or the environment, and makes the process a gateway', async (t) => {
  const dns = await startDnsServer();
  t.teardown(() => dns.close());
  dns.set('empty.test', []);
  const gateway = await startServer({}, {
    env: {
      INFERENCE_SERVER_GATEWAY_DISCOVERY_DNS_NAME: 'empty.test',
      INFERENCE_SERVER_GATEWAY_DISCOVERY_RESOLVER: dns.address,
      INFERENCE_SERVER_GATEWAY_DISCOVERY_PORT: '9001',
    },
  });
  t.teardown(() => gateway.stop());
  t.is(gateway.entry.gateway, 'gateway-only');
  t.is(gateway.entry.discovery, 'empty.test');
  const down = await grpcError(t, gateway.client.infer('digits', [image]));
  t.is(down.code, 14);
  t.regex(down.details, /no node is up/);
});
