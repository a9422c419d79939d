// Stand-in nodes for benchmarking a pooled gateway at a scale this machine cannot run for real (64
// nodes of 10,000 models): each is a gRPC server on 127.0.0.1 answering the calls a pooled gateway
// makes of a node, with the project's own proto files, so the gateway reads real messages over real
// gRPC. What they answer follows a small model of a fleet:
// - a catalog of models of `weightBytes` each, with Zipf(1.0) load over the fleet (device-seconds per
//   second, `fleetLoad` in all), each model's load split evenly over the nodes holding its weights;
// - each node holds at most `capacity` models' weights, least recently prefetched out first;
//   at the start model k is on node k mod nodes;
// - ModelControlStatus with active_only (what a pooled gateway asks) names the models a node holds,
//   with their load and bytes over the window, and a repository digest that changes only when the
//   node restarts; versioned, as a node answers it (src/node/report-versions.ts, published once per
//   window of `windowMs`): only the rows changed since the version the gateway names;
// - `churn`: the share of the catalog, busiest first, whose loads change at every window (each by a
//   factor of 0.8-1.2 drawn per window and model, the same for every reader): a real node's loads
//   move with its traffic, so each of those rows is sent again at every check (0: loads stay put);
//   RepositoryIndex names every model READY, and so does ModelControlStatus without active_only
//   (every model's bytes, read with the index); PrefetchModel makes a model resident;
//   ServerReady is true; ModelInfer answers at once with no outputs (the gateway forwards its bytes);
// - `streams` (the default): the status stream (WatchModelControlStatus: the versioned answer at
//   once, then one per window shortly after its boundary, as src/protocol/status-watch.ts sends it)
//   and the health Watch (SERVING, held open), as a node serves them; false: both UNIMPLEMENTED, a
//   node from before them, read at every check.
// Every node reports one repository digest, as nodes of one repository do (a node's digest hashes
// its models' names and states). A restarted node comes back on its port with a new start time and
// nothing resident; with the same digest (a node restarted on the same repository: its index is not
// read again) or, with `repositoryChanged`, a new one (the gateway reads its whole index and every
// model's bytes again).
import * as grpc from '@grpc/grpc-js';
import { loadControlClient, loadInferenceClient } from '../dist/protocol/proto.js';
import { ReportVersions } from '../dist/node/report-versions.js';
import { msToNextAnswer } from '../dist/protocol/status-watch.js';
import { service as healthService } from 'grpc-health-check';

export class StandInFleet {
  /** `model`'s load over the fleet in window `w`: its own, moved by a factor drawn per window when it churns. */
  loadIn(model, w) {
    const load = /** @type {number} */ (this.loads.get(model));
    const k = /** @type {number} */ (this.rank.get(model));
    if (k >= this.churning) return load;
    let h = Math.imul(w ^ Math.imul(k, 0x9e3779b1), 0x85ebca6b) >>> 0;
    h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35) >>> 0;
    return load * (0.8 + (0.4 * (h ^ (h >>> 16))) / 2 ** 32);
  }

  /**
   * @param {{ nodes: number, models: number, capacity: number, weightBytes: number, fleetLoad: number, churn?: number, windowMs?: number, streams?: boolean }} options
   */
  constructor({ nodes, models, capacity, weightBytes, fleetLoad, churn = 0, windowMs = 2000, streams = true }) {
    this.streams = streams;
    this.weightBytes = weightBytes;
    this.capacity = capacity;
    this.windowMs = windowMs;
    /** Models ranked below this (the busiest) change load at every window. */
    this.churning = Math.round(churn * models);
    /** @type {Map<string, number>} each model's rank by load */
    this.rank = new Map();
    this.catalog = Array.from({ length: models }, (_, k) => `m${String(k).padStart(5, '0')}`);
    const zipf = this.catalog.map((_, k) => 1 / (k + 1));
    const sum = zipf.reduce((a, b) => a + b);
    /** @type {Map<string, number>} each model's load over the fleet */
    this.loads = new Map(this.catalog.map((name, k) => [name, (fleetLoad * zipf[k]) / sum]));
    this.catalog.forEach((name, k) => this.rank.set(name, k));
    /** @type {Map<string, number>} how many nodes hold each model's weights */
    this.holders = new Map();
    /** The catalog's repository digest, as every node reports it until one restarts with another. */
    this.digest = `catalog-of-${models}`;
    this.nodes = Array.from({ length: nodes }, (_, i) => new StandInNode(this, `stand-in-${i}`));
    this.catalog.forEach((name, k) => this.nodes[k % nodes].hold(name));
    /** The RepositoryIndex every node answers (the same catalog everywhere). */
    this.index = { models: this.catalog.map((name) => ({ name, version: '1', state: 'READY', reason: '' })) };
  }

  async start() {
    await Promise.all(this.nodes.map((n) => n.start()));
    return this.nodes.map((n) => n.address);
  }

  async stop() {
    await Promise.all(this.nodes.map((n) => n.stop()));
  }
}

class StandInNode {
  /** @param {StandInFleet} fleet @param {string} name */
  constructor(fleet, name) {
    this.fleet = fleet;
    this.name = name;
    this.startedMs = Date.now();
    this.digest = fleet.digest;
    /** @type {Map<string, true>} resident models, least recently prefetched first */
    this.resident = new Map();
    /** @type {grpc.Server | null} */
    this.server = null;
    this.port = 0;
    this.statusReads = 0;
    this.prefetches = 0;
    this.versions = new ReportVersions(this.startedMs);
    this.publishedWindow = -1;
  }

  get address() {
    return `127.0.0.1:${this.port}`;
  }

  /** @param {string} model */
  hold(model) {
    if (this.resident.has(model)) {
      this.resident.delete(model);
      this.resident.set(model, true);
      return;
    }
    this.resident.set(model, true);
    const holders = this.fleet.holders;
    holders.set(model, (holders.get(model) ?? 0) + 1);
    while (this.resident.size > this.fleet.capacity) {
      const out = /** @type {string} */ (this.resident.keys().next().value);
      this.resident.delete(out);
      holders.set(out, /** @type {number} */ (holders.get(out)) - 1);
    }
  }

  /** @param {{ versioned?: boolean, since_version?: string }} request */
  status(request) {
    this.statusReads++;
    const { weightBytes, holders, windowMs } = this.fleet;
    const bytes = String(weightBytes);
    const w = Math.floor(Date.now() / windowMs);
    const rows = new Map();
    for (const name of this.resident.keys()) {
      rows.set(name, {
        name, state: 'READY', weight_bytes: bytes, resident_bytes: bytes, window_resident_bytes: bytes,
        window_load: this.fleet.loadIn(name, w) / Math.max(1, holders.get(name) ?? 1),
        weight_hits: '100', weight_misses: '1',
      });
    }
    // Not active_only (what a gateway reads with the index, for every model's bytes): the whole catalog.
    if (!request.active_only) {
      for (const name of this.fleet.catalog) if (!rows.has(name)) rows.set(name, { name, state: 'READY', weight_bytes: bytes });
    }
    let versioned = {};
    let models = [...rows.values()];
    if (request.versioned) {
      // Published once per window, as a node does; a prefetch between windows shows at the next.
      if (w !== this.publishedWindow) {
        this.publishedWindow = w;
        this.versions.publish(rows, (r) => `${r.window_load}|${r.resident_bytes}`);
      }
      const answer = this.versions.answer(Number(request.since_version ?? 0));
      models = answer.rows;
      versioned = { report_version: String(answer.version), changes_only: answer.changesOnly, gone: answer.gone };
    }
    return {
      ...versioned,
      models,
      weight_budget_bytes: String(weightBytes * this.fleet.capacity),
      devices: 1,
      queue_depth: 0,
      node_name: this.name,
      started_unix_ms: String(this.startedMs),
      repository_digest: this.digest,
      window_end_unix_ms: String(w * windowMs),
    };
  }

  async start() {
    const server = new grpc.Server();
    const fleet = this.fleet;
    server.addService(loadInferenceClient().service, {
      ServerReady: (_call, done) => done(null, { ready: true }),
      ServerLive: (_call, done) => done(null, { live: true }),
      RepositoryIndex: (_call, done) => done(null, fleet.index),
      ModelInfer: (call, done) => done(null, { model_name: call.request.model_name, model_version: '1', id: call.request.id, outputs: [] }),
    });
    /** @type {Set<() => void>} each open stream's end, for stop() */
    this.open = new Set();
    if (fleet.streams) server.addService(/** @type {grpc.ServiceDefinition} */ (/** @type {unknown} */ (healthService)), { Watch: (call) => this.#held(call, () => call.write({ status: 'SERVING' })) });
    server.addService(loadControlClient().service, {
      ...(fleet.streams ? { WatchModelControlStatus: (call) => this.#watchStatus(call) } : {}),
      ModelControlStatus: (call, done) => done(null, this.status(call.request)),
      PrefetchModel: (call, done) => {
        this.prefetches++;
        this.hold(call.request.name);
        done(null, { resident_bytes: String(fleet.weightBytes) });
      },
    });
    this.port = await new Promise((resolve, reject) => server.bindAsync(`127.0.0.1:${this.port}`, grpc.ServerCredentials.createInsecure(), (err, port) => (err ? reject(err) : resolve(port))));
    this.server = server;
  }

  /** The status stream: answered now, then shortly after each window's boundary. */
  #watchStatus(call) {
    let since = call.request.since_version;
    let timer;
    const answer = () => {
      const reply = this.status({ ...call.request, since_version: since });
      since = reply.report_version;
      call.write(reply);
      timer = setTimeout(answer, msToNextAnswer(Date.now(), this.fleet.windowMs));
    };
    this.#held(call, answer, () => clearTimeout(timer));
  }

  /** A server stream open until its client cancels it or the stand-in stops; `begin` writes its first answer. */
  #held(call, begin, end = () => {}) {
    const close = () => {
      end();
      this.open.delete(close);
      call.end();
    };
    this.open.add(close);
    call.on('cancelled', () => {
      end();
      this.open.delete(close);
    });
    begin();
  }

  async stop() {
    for (const close of this.open ?? []) close();
    const server = this.server;
    this.server = null;
    if (server) await new Promise((resolve) => server.tryShutdown(() => resolve(undefined)));
  }

  /**
   * Down and back on the same port as a new process: a new start time, nothing resident; a new
   * repository digest when `repositoryChanged` (the same models, read again whole all the same).
   */
  async restart({ repositoryChanged = false } = {}) {
    await this.stop();
    for (const model of this.resident.keys()) this.fleet.holders.set(model, /** @type {number} */ (this.fleet.holders.get(model)) - 1);
    this.resident.clear();
    this.startedMs = Date.now();
    if (repositoryChanged) this.digest = `${this.fleet.digest}-changed-${this.startedMs}`;
    this.versions = new ReportVersions(this.startedMs);
    this.publishedWindow = -1;
    await this.start();
  }
}
