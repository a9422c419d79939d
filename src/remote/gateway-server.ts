/**
 * A gateway-only process: no devices and no repository of its own, it fronts
 * the Stowage nodes that `gateway.endpoints` lists (host:port of their gRPC
 * ports) and those `gateway.discovery` finds by DNS (discovery.ts: nodes that
 * appear are added, nodes that disappear take no new requests, finish those
 * in flight and are dropped). It learns what each node serves from its
 * RepositoryIndex, checks every node every `gateway.health_seconds` (a node
 * that does not answer is down and gets no requests; one that answers again
 * is back), forwards the KServe surface (proxy-service.ts), and serves on its
 * admin port /healthz, /readyz (ready while any node is up, with each node's
 * state) and /metrics: its own, and every `gateway.metrics_endpoints` node's
 * (and every discovered node's, with `discovery.metrics_port`) with a `node` label.
 *
 * With `scheduling.mode: pooled` each health check also reads every node's ModelControlStatus,
 * and fleet-routes.ts places each model on a few nodes from it, so the fleet's memory is pooled:
 * on the placement thread (remote/placement/), which hands this thread only the routes that change
 * and what each node serves. Health and placement are apart: only the health probe (ServerReady)
 * decides whether a node takes traffic; a status read that fails or is slow leaves placement on
 * the node's last report for `report_max_age_seconds`, and the RepositoryIndex is read again only
 * when the node's digest changes. Two addresses reporting one node name: the older process drains.
 * The nodes report each model's load over wall-clock windows of `health_seconds`, the same
 * numbers to every gateway that reads within one window, and the checks run halfway through each:
 * gateways fed the same nodes place alike.
 */
import type http from 'node:http';
import type { Logger } from 'pino';
import { collectDefaultMetrics, Counter, Gauge, Registry } from 'prom-client';
import { PlacementThread } from './placement/handle.js';
import { closeAdmin, createAdminServer, listen } from '../admin/http.js';
import type { NodeConfig } from '../shared/config-schema.js';
import { Admission, admissionMetrics } from '../shared/admission.js';
import { GrpcEdge } from '../protocol/edge.js';
import { loadInferenceClient } from '../protocol/proto.js';
import { startOrStop } from '../shared/lifecycle.js';
import { PACKAGE_VERSION } from '../shared/version.js';
import { mergeMetrics } from './metrics-merge.js';
import { proxyDefinition, proxyService } from './proxy-service.js';
import { DnsDiscovery } from './discovery.js';
import { RemoteNode } from './remote-node.js';
import { service as healthDefinition } from 'grpc-health-check';

/** How long a node gets to answer a health check or a metrics scrape. */
const PROBE_TIMEOUT_MS = 1000;
/** Pooled: how long a node gets to answer a RepositoryIndex read (PlacementStart.indexTimeoutMs). */
const INDEX_TIMEOUT_MS = 10_000;

export class StowageGateway {
  readonly ports = { grpc: 0, admin: 0 };
  /** The live list: discovery adds and removes nodes in place, and the proxy reads it per request. */
  readonly nodes: RemoteNode[] = [];
  #config: NodeConfig;
  #logger: Logger;
  #registry = new Registry();
  readonly #edge: GrpcEdge;
  #admin?: http.Server;
  #timer?: NodeJS.Timeout;
  /** Pooled: the placement thread, and through it where each model's requests go. */
  #placement?: PlacementThread;
  #stopping = false;
  #discovery?: DnsDiscovery;
  /** Nodes being drained after discovery lost them, until they are dropped. */
  readonly #draining = new Set<Promise<void>>();

  private constructor(config: NodeConfig, logger: Logger) {
    this.#config = config;
    this.#logger = logger;
    const gw = config.gateway;
    for (const address of gw.endpoints) this.nodes.push(this.#node(address));
    const admission = new Admission(config.global.endpoints.max_concurrent_requests, config.global.endpoints.max_inflight_bytes);
    admissionMetrics(admission, this.#registry);
    this.#edge = new GrpcEdge(config.global.endpoints, logger, admission);
    const nodes = this.nodes;
    new Gauge({
      name: 'stowage_gateway_node_up', help: 'Whether the node answers (1) or is down (0)', labelNames: ['node'], registers: [this.#registry],
      collect() {
        this.reset(); // a dropped node leaves the metric
        for (const n of nodes) this.set({ node: n.address }, n.up ? 1 : 0);
      },
    });
    new Gauge({
      name: 'stowage_gateway_node_inflight', help: 'RPCs forwarded to the node and not yet answered', labelNames: ['node'], registers: [this.#registry],
      collect() {
        this.reset();
        for (const n of nodes) this.set({ node: n.address }, n.inflight);
      },
    });
    collectDefaultMetrics({ register: this.#registry });
  }

  #node(address: string): RemoteNode {
    const gw = this.#config.gateway;
    const definition = loadInferenceClient().service;
    return new RemoteNode(address, {
      maxStreams: gw.max_concurrent_streams,
      windowBytes: this.#config.global.endpoints.http2_window_bytes,
      encodeIndexRequest: () => definition.RepositoryIndex.requestSerialize({ repository_name: '', ready: true }),
      ...(gw.scheduling.mode === 'pooled' ? {
        ready: {
          encodeReadyRequest: () => definition.ServerReady.requestSerialize({}),
          decodeReady: (bytes: Buffer) => definition.ServerReady.responseDeserialize(bytes) as { ready: boolean },
          encodeWatchRequest: () => healthDefinition.Watch.requestSerialize({ service: '' }),
          decodeWatch: (bytes: Buffer) => healthDefinition.Watch.responseDeserialize(bytes) as { status: string },
          intervalMs: gw.health_seconds * 1000,
          timeoutMs: PROBE_TIMEOUT_MS,
        },
      } : {}),
    });
  }

  /** Discovery found `added` and lost `removed`: new nodes are asked what they serve at once; lost ones drain. */
  #discovered(added: readonly string[], removed: readonly string[]): void {
    for (const address of added) {
      // Also a static endpoint, or already known; one draining after it left DNS is replaced by a new one.
      if (this.nodes.some((n) => n.address === address && !n.draining)) continue;
      const node = this.#node(address);
      this.nodes.push(node);
      this.#logger.info({ node: address }, 'node discovered');
      void node.probe(PROBE_TIMEOUT_MS).then(() => {
        if (node.up) this.#logger.info({ node: address, models: node.models.length }, 'node up');
      });
    }
    for (const address of removed) {
      if (this.#config.gateway.endpoints.includes(address)) continue; // static endpoints stay
      this.#retire(address, 'gone from DNS');
    }
  }

  /** The node at `address` takes no new requests, finishes those in flight, and is dropped. */
  #retire(address: string, why: string): void {
    const node = this.nodes.find((n) => n.address === address && !n.draining);
    if (!node) return;
    this.#logger.info({ node: address, inflight: node.inflight, why }, 'draining node');
    const drained = node.drain(this.#config.gateway.request_timeout_seconds * 1000).then(() => {
      this.nodes.splice(this.nodes.indexOf(node), 1);
      this.#draining.delete(drained);
      this.#logger.info({ node: address }, 'node dropped');
    });
    this.#draining.add(drained);
  }

  /** The cap on inference RPCs in flight, and how many are. */
  get admission(): Admission {
    return this.#edge.admission;
  }

  static start(config: NodeConfig, logger: Logger): Promise<StowageGateway> {
    return startOrStop(new StowageGateway(config, logger), (gateway) => gateway.#start());
  }

  async #start(): Promise<void> {
    const { endpoints } = this.#config.global;
    const gw = this.#config.gateway;
    this.#admin = createAdminServer({
      // Each node's count of models, not their names: at 64 nodes of 10,000 models the names were a
      // 7 MB answer made on the thread that forwards requests at every probe. The names: RepositoryIndex.
      readiness: () => ({ ready: !this.#stopping && this.nodes.some((n) => n.up), nodes: this.nodes.map((n) => ({ node: n.address, up: n.up, models: n.models.length })) }),
      metrics: async () => ({ contentType: this.#registry.contentType, text: await this.#metrics() }),
    });
    this.ports.admin = await listen(this.#admin, endpoints.host, endpoints.admin_port);
    const { discovery } = gw;
    if (discovery.dns_name) {
      this.#discovery = new DnsDiscovery({
        dnsName: discovery.dns_name,
        port: discovery.port,
        intervalMs: discovery.interval_seconds * 1000,
        resolver: discovery.resolver,
        logger: this.#logger,
        onChange: (added, removed) => this.#discovered(added, removed),
      });
      await this.#discovery.start();
    }
    if (gw.scheduling.mode === 'pooled') {
      const { epsilon, stickiness, replica_load: replicaLoad, report_max_age_seconds: maxAge } = gw.scheduling.pooled;
      this.#placement = await PlacementThread.start({
        logLevel: this.#logger.level,
        fleet: { epsilon, stickiness, replicaLoad },
        prefetchTimeoutMs: gw.request_timeout_seconds * 1000,
        windowSeconds: gw.health_seconds,
        reportMaxAgeMs: maxAge * 1000,
        minMoveChecks: this.#minMoveChecks,
        readTimeoutMs: PROBE_TIMEOUT_MS,
        indexTimeoutMs: INDEX_TIMEOUT_MS,
        windowBytes: endpoints.http2_window_bytes,
      }, {
        logger: this.#logger,
        onServed: (address, models) => this.nodes.find((n) => n.address === address && !n.draining)?.setModels(models),
        onSuperseded: (older) => this.#retire(older, 'another address reports its node name, from a newer process'),
      });
    }
    await this.#checkNodes();
    this.#scheduleChecks(gw.health_seconds * 1000);

    const definition = loadInferenceClient().service;
    const edge = this.#edge;
    edge.addService(proxyDefinition(definition), proxyService({
      edge,
      nodes: this.nodes,
      mode: gw.scheduling.mode === 'round_robin' ? 'round_robin' : 'least_outstanding',
      fleet: this.#placement?.routes,
      definition,
      logger: this.#logger,
      version: PACKAGE_VERSION,
      requestTimeoutMs: gw.request_timeout_seconds * 1000,
      healthTimeoutMs: PROBE_TIMEOUT_MS,
      retries: new Counter({
        name: 'stowage_gateway_retries_total', help: 'Requests sent on to a second node, by reason: holder_full (the first was full: queue or admission), node_failed', labelNames: ['reason'], registers: [this.#registry],
      }),
    }));
    this.ports.grpc = await edge.start();
    this.#logger.info({
      grpc: `${endpoints.host}:${this.ports.grpc}`,
      admin: `${endpoints.host}:${this.ports.admin}`,
      gateway: 'gateway-only',
      nodes: this.nodes.map((n) => ({ node: n.address, up: n.up, models: n.models.length })),
      discovery: gw.discovery.dns_name || undefined,
      // Pooled: the settings as placement took them (the minimum age in checks: what it counts by).
      pooled: this.#placement ? { ...gw.scheduling.pooled, health_seconds: gw.health_seconds, min_move_checks: this.#minMoveChecks } : undefined,
    }, 'serving');
  }

  /**
   * Check every node each `intervalMs`; pooled, halfway through each wall-clock window of that
   * length, the windows the nodes report loads over (node/load-windows.ts): every gateway then
   * reads the same window, whatever their clocks' small differences. A check still running when
   * the next is due makes that one wait for the window after.
   */
  #scheduleChecks(intervalMs: number): void {
    const next = () => {
      if (this.#stopping) return;
      const wait = this.#placement ? (intervalMs * 1.5 - (Date.now() % intervalMs)) % intervalMs || intervalMs : intervalMs;
      this.#timer = setTimeout(() => void this.#checkNodes().finally(next), wait);
      this.#timer.unref();
    };
    next();
  }

  /**
   * Ask every node whether it answers (and, not pooled, what it serves); log the ones that went down
   * or came back. Pooled, the placement thread reads their status meanwhile, then places the models.
   */
  async #checkNodes(): Promise<void> {
    const placement = this.#placement;
    const reading = placement?.read(this.nodes.map((n) => n.address));
    await Promise.all(this.nodes.map(async (n) => {
      if (!(await n.probe(PROBE_TIMEOUT_MS))) return;
      // A count: the names, 10,000 a node, were most of a large fleet's start-up.
      if (n.up) this.#logger.info({ node: n.address, models: n.models.length }, 'node up');
      else this.#logger.warn({ node: n.address }, 'node down: it does not answer');
    }));
    if (!placement) return;
    await reading;
    await placement.place(this.nodes.map((n) => ({ address: n.address, up: n.up, draining: n.draining })));
  }

  /** Pooled: `min_move_age_seconds` as the checks placement counts it in (at least the age, whole checks). */
  get #minMoveChecks(): number {
    const gw = this.#config.gateway;
    return Math.ceil(gw.scheduling.pooled.min_move_age_seconds / gw.health_seconds);
  }

  /** The gateway's metrics and each metrics endpoint's, labelled with the node. */
  async #metrics(): Promise<string> {
    const { metrics_endpoints: fixed, discovery } = this.#config.gateway;
    // A discovered node's admin port is its address with discovery.metrics_port.
    const discovered = discovery.metrics_port > 0
      ? this.nodes.filter((n) => !n.draining && !this.#config.gateway.endpoints.includes(n.address))
        .map((n) => n.address.replace(/:\d+$/, `:${discovery.metrics_port}`))
      : [];
    const remote = await Promise.all([...new Set([...fixed, ...discovered])].map(async (address) => {
      try {
        const res = await fetch(`http://${address}/metrics`, { signal: AbortSignal.timeout(PROBE_TIMEOUT_MS) });
        return { node: address, text: res.ok ? await res.text() : '' };
      } catch {
        return { node: address, text: '' }; // a node that does not answer is left out; stowage_gateway_node_up says so
      }
    }));
    const own = [{ node: null, text: await this.#registry.metrics() }, { node: null, text: (await this.#placement?.metrics()) ?? '' }];
    return mergeMetrics([...own, ...remote]);
  }

  async stop(graceMs = this.#config.global.endpoints.shutdown_grace_seconds * 1000): Promise<void> {
    this.#stopping = true;
    clearTimeout(this.#timer);
    this.#discovery?.stop();
    await this.#edge.stop(graceMs);
    await Promise.all(this.#draining);
    for (const n of this.nodes) n.close();
    await this.#placement?.stop();
    await closeAdmin(this.#admin);
  }
}
