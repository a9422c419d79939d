/**
 * A pooled gateway's placement thread: every check's status reads, their decoding, the index reads
 * and the placement of every model run here, so that the thread forwarding requests never waits
 * behind them (at 64 nodes x 10,000 models a check took 200 ms of the main thread's CPU and held
 * its loop up to 200 ms; bench/gateway-checks.js). The main thread keeps health (ServerReady
 * probes), discovery and the requests; it tells this thread which nodes are up and draining, and
 * gets back the routes that changed, the models each node serves, and nodes to drain
 * (channel.ts). Its metrics (placement, report ages, status failures) are in this
 * thread's registry; the main thread's /metrics asks for them.
 */
import { existsSync, rmSync } from 'node:fs';
import { parentPort, workerData } from 'node:worker_threads';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { FromPlacement, PlacementStart, ToPlacement } from './channel.js';
import { createLogger } from '../../shared/log.js';
import { loadControlClient, loadInferenceClient } from '../../protocol/proto.js';
import { FleetRoutes } from '../fleet-routes.js';
import { NodeStatus, type IndexRead, type NodeStatusOptions } from '../node-status.js';
import { PlacedRoutes } from '../placed-routes.js';

const start = workerData as PlacementStart;
const port = parentPort!;
const logger = createLogger(start.logLevel).child({ thread: 'placement' });
const post = (msg: FromPlacement) => port.postMessage(msg);

const inference = loadInferenceClient().service;
const control = loadControlClient().service;
/** Repository digest -> the models list read under it, shared by the nodes that report it (NodeStatusOptions'). */
const indexLists = new Map<string, IndexRead>();
/** Repository digest -> its read under way, which the other nodes of that digest wait for (NodeStatusOptions'). */
const indexReads = new Map<string, Promise<IndexRead | null>>();
const statusOptions: NodeStatusOptions = {
  windowBytes: start.windowBytes,
  // Loads over the nodes' windows of one health interval: every gateway asking within one gets the same.
  // Versioned: only what changed since the report it holds (the whole report at first).
  encodeStatusRequest: (since) => control.ModelControlStatus.requestSerialize({ name: '', window_seconds: start.windowSeconds, active_only: true, versioned: true, since_version: String(since) }),
  windowMs: start.windowSeconds * 1000,
  encodeIndexRequest: () => inference.RepositoryIndex.requestSerialize({ repository_name: '', ready: true }),
  // Every model's weight bytes, read with the index (the homes are bounded by them): from the
  // node's snapshot, no window.
  encodeBytesRequest: () => control.ModelControlStatus.requestSerialize({ name: '', window_seconds: 0, fresh: false, active_only: false, versioned: false }),
  encodePrefetch: (model) => control.PrefetchModel.requestSerialize({ name: model }),
  reportMaxAgeMs: start.reportMaxAgeMs,
  indexLists,
  indexReads,
};

/**
 * Address -> the digest of the list last sent for it, as the main thread holds them (handle.ts keeps
 * a digest's list while an address has it): a node whose digest another address has is sent as the
 * digest alone.
 */
const sentDigests = new Map<string, string>();

/** Tell the main thread what `n` serves: its digest alone when the main thread holds that list already. */
function postServed(n: NodeStatus): void {
  const digest = n.indexDigest;
  const held = digest !== '' && [...sentDigests].some(([address, d]) => d === digest && address !== n.address);
  sentDigests.set(n.address, digest);
  post({ type: 'served', address: n.address, digest, models: held ? null : [...n.models] });
}

/** RepositoryIndex reads in flight at once (see `place`). */
const INDEX_READS_AT_ONCE = 8;

/** Address -> the node, for every node of the last check. */
const nodes = new Map<string, NodeStatus>();
const registry = new Registry();

// What changed in the routes goes to the main thread at the end of the turn it changed in: a
// check's placement as one message, a prefetch's switch on its own.
let flushing = false;
const flush = () => {
  flushing = false;
  const change = routes.changes();
  if (change) post({ type: 'routes', change });
};
const routes = new PlacedRoutes({
  keepChanges: true,
  onChange: () => {
    if (flushing) return;
    flushing = true;
    setImmediate(flush);
  },
});
const fleet = new FleetRoutes({
  fleet: start.fleet,
  prefetchTimeoutMs: start.prefetchTimeoutMs,
  minMoveChecks: start.minMoveChecks,
  logger,
  registry,
  routes,
  onSuperseded: (older, newer) => post({ type: 'superseded', older: older.address, newer: newer.address }),
});

const placementTime = new Histogram({
  name: 'stowage_gateway_placement_seconds', help: 'Time each check\'s placement took on the gateway\'s placement thread (pooled): the nodes\' reports read and every model placed',
  buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1], registers: [registry],
});
new Counter({
  name: 'stowage_gateway_placement_unchanged_checks_total', help: 'Checks that left the placement as it stood (pooled): nothing it is made from changed since a placement that would give itself back', registers: [registry],
  collect() {
    this.reset();
    this.inc(fleet.unchangedChecks);
  },
});
new Gauge({
  name: 'stowage_gateway_node_report_age_seconds', help: 'How old the node\'s last status report is (pooled): it grows while its status reads fail', labelNames: ['node'], registers: [registry],
  collect() {
    this.reset();
    for (const n of nodes.values()) if (n.reportAgeMs !== null) this.set({ node: n.address }, n.reportAgeMs / 1000);
  },
});
new Gauge({
  name: 'stowage_gateway_node_status_failures', help: 'Status reads of the node that failed or timed out (pooled); the node stays in service', labelNames: ['node'], registers: [registry],
  collect() {
    this.reset();
    for (const n of nodes.values()) this.set({ node: n.address }, n.statusFailures);
  },
});

/**
 * Fault injection, for the test of a placement thread that ends (test/integration/fleet-placement-thread.test.js):
 * when the file STOWAGE_FAULT_PLACEMENT_EXIT names exists as a check places, this thread deletes it
 * and exits. Unset in production (it costs nothing then).
 */
const exitFile = process.env.STOWAGE_FAULT_PLACEMENT_EXIT;

/** The status reads of the check under way. */
let reads: Promise<unknown> = Promise.resolve();

function read(addresses: readonly string[]): void {
  const listed = new Set(addresses);
  for (const [address, n] of nodes) {
    if (listed.has(address)) continue;
    n.close();
    nodes.delete(address);
  }
  for (const address of addresses) if (!nodes.has(address)) nodes.set(address, new NodeStatus(address, statusOptions));
  reads = Promise.all([...nodes.values()].map(async (n) => {
    const failing = n.statusFailing;
    await n.readStatus(start.readTimeoutMs);
    if (!n.up || n.statusFailing === failing) return;
    if (n.statusFailing) logger.warn({ node: n.address, reportAgeMs: n.reportAgeMs }, 'status read failed: the node keeps serving; placement goes on with its last report for report_max_age_seconds, then without its loads');
    else logger.info({ node: n.address }, 'status reads answer again');
  }));
}

async function place(id: number, members: Extract<ToPlacement, { type: 'place' }>['members']): Promise<void> {
  await reads;
  if (exitFile && existsSync(exitFile)) {
    rmSync(exitFile, { force: true });
    process.exit(3);
  }
  const ordered: NodeStatus[] = [];
  for (const m of members) {
    const n = nodes.get(m.address);
    if (!n) continue; // discovered after the check began: read at the next one
    n.up = m.up;
    n.draining = m.draining;
    ordered.push(n);
  }
  // A few at a time: at a gateway's start every node's index is read, and 64 answers of 10,000
  // models arriving at once outran their deadlines while this thread decoded the first ones.
  const queue = [...ordered];
  await Promise.all(Array.from({ length: INDEX_READS_AT_ONCE }, async () => {
    for (let n = queue.shift(); n; n = queue.shift()) {
      if (await n.readIndexIfChanged(start.indexTimeoutMs)) postServed(n);
    }
  }));
  // The lists no node was read under any more.
  const used = new Set([...nodes.values()].map((n) => n.indexDigest));
  for (const digest of indexLists.keys()) if (!used.has(digest)) indexLists.delete(digest);
  const started = performance.now();
  fleet.update(ordered);
  placementTime.observe((performance.now() - started) / 1000);
  flush();
  post({ type: 'placed', id });
}

port.on('message', (msg: ToPlacement) => {
  switch (msg.type) {
    case 'read':
      read(msg.addresses);
      return;
    case 'place':
      place(msg.id, msg.members).catch((err: Error) => {
        logger.error({ err }, 'placement failed: the routes stay as they were');
        post({ type: 'placed', id: msg.id });
      });
      return;
    case 'metrics':
      void registry.metrics().then((text) => post({ type: 'metrics', id: msg.id, text }));
      return;
    case 'stop':
      for (const n of nodes.values()) n.close();
      port.close();
  }
});

post({ type: 'started' });
