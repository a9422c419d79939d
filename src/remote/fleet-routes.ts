/**
 * A gateway's routes in `pooled` mode: which nodes each model's requests go to, so that the fleet's
 * memory is pooled (routing/fleet-placement.ts says how models are placed and why).
 *
 * After every health check (gateway-server.ts, halfway through each wall-clock window of
 * `health_seconds`) `update` is given the nodes as they answered ModelControlStatus: each one's
 * weight budget and devices, and per model its weight bytes, and over the node's last whole window
 * its load and the bytes resident as it ended (node/load-windows.ts). A model's load is the sum of
 * its loads over the nodes. Every gateway that reads within one window is given the same numbers,
 * and placement follows from those and the node set alone, so gateways place alike.
 *
 * A model placed on a node that does not hold its weights yet is made resident there first
 * (PrefetchModel); its requests keep going where they went until that is done, then switch. A model
 * whose nodes are all gone switches at once, and between checks (a new model, a node just lost) it
 * goes to the first node of its ranking among those that serve it: the same node from every
 * gateway, so a burst of first requests loads it once.
 *
 * Calm: a model stays where this gateway placed it while that holds (#holding: the reports lag a
 * move by a window, an idle model is not moved, and a gateway that placed it apart from the others
 * follows where most of its traffic runs), else where it ran most over the last window; replicas
 * are given back with hysteresis (fleet-placement.ts).
 *
 * Nodes are known by the name they report (node_name), not their address: a node rescheduled at a
 * new address ranks where it ranked and keeps its models. A node whose status reads fail stays in
 * service on its last report for a bounded age (node-status.ts); past it, its loads no longer count
 * but it stays placed by its name and memory, its models on it.
 */
import type { Logger } from 'pino';
import { Counter, Gauge, type Registry } from 'prom-client';
import { needsOwnNodes, placeFleet, Rankings, type FleetNode, type FleetOptions, type FleetPlacement, type HomeModels } from '../routing/fleet-placement.js';
import { FleetCatalog } from './fleet-catalog.js';
import { splitShares, type SplitModel } from '../routing/fleet-shares.js';
import { carriesItsParts, FleetReports, mostLoadFirst, runsElsewhere, type ReportedModel } from './fleet-reports.js';
import { PlacedRoutes } from './placed-routes.js';
import type { NodeReport } from './status-report.js';

/** A node as the routes see it (a RemoteNode, or a stand-in in the unit tests). */
export interface FleetMember {
  readonly address: string;
  /** What placement keys on: the node_name it reports, else its address. */
  readonly name: string;
  readonly up: boolean;
  readonly draining: boolean;
  /** The models it serves ready. */
  readonly models: readonly string[];
  /**
   * Each of those models' weight bytes on one device, read with the list (absent, or a model
   * missing: unknown). Every model's, idle ones included: the homes are bounded by them
   * (routing/fleet-homes.ts). Nodes of one repository share one map, as they share the list.
   */
  readonly modelBytes?: ReadonlyMap<string, number>;
  /** What it reported at its last check; null when down, not asked yet, or too long ago to place by. */
  readonly report: NodeReport | null;
  /**
   * What it reported last, however old, while up (absent: as `report`). A node that serves but whose
   * status reads have failed for longer than a report is kept stays placed by it: its name, memory
   * and devices, none of its loads or residency.
   */
  readonly lastReport?: NodeReport | null;
  /**
   * Grows whenever its report changes (NodeStatus: a versioned read that changed nothing leaves it).
   * Absent: every check's report counts as new, and placement runs at every check.
   */
  readonly reportSerial?: number;
  prefetch(model: string, timeoutMs: number): Promise<void>;
}

export interface FleetRoutesOptions {
  fleet: FleetOptions;
  /** How long a node gets to make a model resident before its requests switch anyway. */
  prefetchTimeoutMs: number;
  /**
   * Checks a model that moved stays where it went (pinned: placement moves it only a node of it
   * gone or joining, or its node far past its share); default DEFAULT_MIN_MOVE_CHECKS, 0 none.
   */
  minMoveChecks?: number;
  logger: Logger;
  /** The gateway's metrics registry: placements, moves, prefetches, hit ratios, balance. */
  registry?: Registry;
  /**
   * Two addresses report one node name (a node rescheduled while its old address still answers):
   * the newer process serves, and the gateway drains `older` as if discovery had lost it.
   */
  onSuperseded?: (older: FleetMember, newer: FleetMember) => void;
  /** The routes it writes (the placement thread's keep what changed, for the main thread's copy); default its own. */
  routes?: PlacedRoutes;
}

/**
 * Checks after a placement changes before the nodes' reports show its traffic: the first whole window
 * after the routes switch is read two checks on (checks run halfway through each window).
 */
const REPORT_LAG_CHECKS = 2;

/**
 * Checks after a model moves before it may move again, without gateway.scheduling.pooled.min_move_age_seconds
 * (30 s at checks every 2 s). In the simulator (bench/fleet-sim.js, the popularity fixed) the heavy
 * models crossing a bound or a replica threshold moved 2.9-3.8% of the catalog a minute without it
 * and 0.2-0.6% with it, the busiest node's quiet 5 s windows a few percent higher (docs/performance.md).
 */
export const DEFAULT_MIN_MOVE_CHECKS = 15;

/** A node keeps a model while it carries at least this share of its part of the model's load. */
const HOLD_SHARE = 0.5;

/** Checks a model's hit and miss counts stay after its node last reported them (~10 minutes at health_seconds 2). */
const COUNTS_KEPT_CHECKS = 300;

/** A model runs enough for its window's counts to say where it runs from this share of a device's fair share. */
const DOMINANCE_MIN_SHARE = 0.02;

/** Idle, or running too little (under DOMINANCE_MIN_SHARE of a device's `fair` share) to say where it runs. */
function runsTooLittle(load: number, fair: number): boolean {
  return !(load > 0) || load < DOMINANCE_MIN_SHARE * fair;
}

/**
 * What placement knows a member by: its report while fresh, else its last however old (a node that
 * serves while its status reads fail stays placed; its name, memory and devices are still its own).
 */
function known(n: FleetMember): NodeReport | null {
  return n.report ?? n.lastReport ?? null;
}

/** Of two members reporting one name, the one whose process started last (ties: the higher address). */
function newerOf(a: FleetMember, b: FleetMember): FleetMember {
  const [sa, sb] = [known(a)!.startedMs, known(b)!.startedMs];
  if (sa !== sb) return sa > sb ? a : b;
  return a.address > b.address ? a : b;
}

export class FleetRoutes {
  readonly #o: FleetRoutesOptions;
  /** Model -> the nodes (names) its requests go to now; each node's name; the rankings. */
  readonly #routes: PlacedRoutes;
  /** Model -> the node set being prefetched for it (joined by ','), until its requests switch. */
  readonly #switching = new Map<string, string>();
  #placement: FleetPlacement | null = null;
  /** Every model the members serve (fleet-catalog.ts). */
  readonly #catalog = new FleetCatalog();
  /** What the last check's reports say of each model (its load over the fleet, the devices its requests need). */
  readonly #reports = new FleetReports();
  /**
   * The models placed off home at the last placement, or placed from the reports (null before the
   * first), by their indexes in the catalog's `names` of then: the rest were at home, and stay there
   * while they stay idle or run too little to be placed one by one.
   */
  #lastAway: { names: readonly string[]; at: Int32Array } | null = null;
  /** The rankings the models shared the nodes by at the last placement (FleetPlacement `shared`). */
  #lastShared: Rankings | null = null;
  /** The latest placement with every model in it, idle ones included; made when asked for. */
  #fullPlacement: FleetPlacement | null = null;
  #members: FleetMember[] = [];
  /**
   * Node name -> its process's start and each model's weight-cache hits and misses as it last
   * reported them, and the check that last saw them: an active_only report leaves out a model once
   * it is idle and evicted, and its counts since the node started must not leave the hit ratio with
   * it at once. Kept for COUNTS_KEPT_CHECKS after (a node of a large catalog reports most models at
   * some point of a day). A node's report read again unchanged (the same serial) is not gone over:
   * `seen` is the check that last saw that report, the last sight of every model it names (`inReport`).
   */
  readonly #counts = new Map<string, NodeCounts>();
  /** Model -> the nodes placement put it on, and the check at which its routes last switched (or it was placed). */
  readonly #placed = new Map<string, { nodes: string[]; check: number; moved: boolean }>();
  #checks = 0;
  /** The members' byte maps the homes were last bounded by (#boundHomes). */
  #homeBytes: ReadonlySet<ReadonlyMap<string, number>> = new Set();
  /** The nodes placed at the last check, to tell one joining. */
  #live: ReadonlySet<string> = new Set();
  /** What the last placement was made from, and whether placing again from the same would give it back. */
  #inputs: MemberInputs[] = [];
  #settled = false;
  /** Checks that placed nothing anew: their inputs were the last placement's, and it was settled. */
  #unchanged = 0;
  /** The check at which the hit and miss counts of models no longer reported were last swept. */
  #countsSwept = 0;
  /** The last check at which a model's placement changed or its routes switched. */
  #lastChange = 0;
  readonly #moves?: Counter;
  #moved = 0;
  readonly #prefetches?: Counter;

  constructor(options: FleetRoutesOptions) {
    this.#o = options;
    this.#routes = options.routes ?? new PlacedRoutes();
    if (!options.registry) return;
    const registers = [options.registry];
    const routes = this.#routes.routes;
    const self = this;
    new Gauge({
      name: 'stowage_gateway_model_placement', help: 'The nodes a model\'s requests go to (pooled): 1 per model and node', labelNames: ['model', 'node'], registers,
      collect() {
        this.reset();
        for (const [model, nodes] of routes) for (const node of nodes) this.set({ model, node }, 1);
      },
    });
    new Gauge({
      name: 'stowage_gateway_model_route_share', help: 'The share of a model\'s requests each of its nodes takes, where it is split by shares (pooled; routing/fleet-shares.ts)', labelNames: ['model', 'node'], registers,
      collect() {
        this.reset();
        for (const [model, shares] of self.#routes.shares) self.#routes.routes.get(model)?.forEach((node, i) => this.set({ model, node }, shares[i]));
      },
    });
    new Gauge({
      name: 'stowage_gateway_model_weight_hit_ratio', help: 'Share of a model\'s executions that found its weights on the device, over every node since each started (pooled)', labelNames: ['model'], registers,
      collect() {
        this.reset();
        for (const [model, { hits, misses }] of self.#traffic()) if (hits + misses > 0) this.set({ model }, hits / (hits + misses));
      },
    });
    new Gauge({
      name: 'stowage_gateway_model_load', help: 'A model\'s measured load over the fleet, in device-seconds per second (pooled)', labelNames: ['model'], registers,
      collect() {
        this.reset();
        for (const [model, load] of self.#reports.loads()) this.set({ model }, load);
      },
    });
    new Gauge({
      name: 'stowage_gateway_node_placed_load', help: 'The load placement put on a node, in device-seconds per second (pooled)', labelNames: ['node'], registers,
      collect() {
        this.reset();
        for (const [node, load] of self.#placement?.load ?? []) this.set({ node }, load);
      },
    });
    new Gauge({
      name: 'stowage_gateway_node_weight_budget_bytes', help: 'A node\'s weight budget as it reports it (pooled)', labelNames: ['node'], registers,
      collect() {
        this.reset();
        for (const n of self.#members) if (n.report) this.set({ node: n.name }, n.report.budgetBytes);
      },
    });
    new Gauge({
      name: 'stowage_gateway_node_resident_bytes', help: 'Bytes of weights resident on a node\'s devices as it reports them (pooled)', labelNames: ['node'], registers,
      collect() {
        this.reset();
        for (const n of self.#members) {
          if (n.report) this.set({ node: n.name }, [...n.report.models.values()].reduce((sum, m) => sum + m.residentBytes, 0));
        }
      },
    });
    new Gauge({
      name: 'stowage_gateway_model_needed_devices', help: 'A model\'s requests over what one device answers of it at full batches, summed over the fleet (pooled; above 1 it is given nodes of its own)', labelNames: ['model'], registers,
      collect() {
        this.reset();
        for (const [model, needs] of self.#reports.needs()) this.set({ model }, needs);
      },
    });
    new Gauge({
      name: 'stowage_gateway_placement_imbalance', help: 'The most loaded node\'s placed load over the mean, of the nodes the models share (pooled; 1 is even)', registers,
      collect() {
        this.set(self.#placement ? sharedImbalance(self.#placement) : 1);
      },
    });
    this.#moves = new Counter({ name: 'stowage_gateway_placement_moves_total', help: 'Models placed on a node they were not on (pooled)', registers });
    this.#prefetches = new Counter({ name: 'stowage_gateway_prefetches_total', help: 'PrefetchModel calls to nodes gaining a model, by result (pooled)', labelNames: ['result'], registers });
  }

  /** Model -> the nodes its requests go to now. */
  get routes(): ReadonlyMap<string, readonly string[]> {
    return this.#routes.routes;
  }

  /** PlacedRoutes.holds: whether the node at `address` takes `model`'s requests now. */
  holds(model: string, address: string): boolean {
    return this.#routes.holds(model, address);
  }

  /** Checks that left the placement as it stood, nothing it is made from having changed. */
  get unchangedChecks(): number {
    return this.#unchanged;
  }

  /** Nodes gained by models so far (stowage_gateway_placement_moves_total, without a registry: the simulator). */
  get moves(): number {
    return this.#moved;
  }

  /** The latest placement (what the routes switch to once prefetched); null before the first check. */
  get placement(): FleetPlacement | null {
    const p = this.#placement;
    if (!p) return null;
    // Placement is given only the models that ran; every other model is where #placed holds it.
    return (this.#fullPlacement ??= { ...p, nodes: new Map([...this.#placed].map(([model, { nodes }]) => [model, nodes])) });
  }

  /** PlacedRoutes.route: of the nodes that serve `model`, those its requests go to. */
  route<T extends { address: string }>(model: string, candidates: readonly T[]): T[] {
    return this.#routes.route(model, candidates);
  }

  /** PlacedRoutes.sharesOf: `model`'s share of requests per node of its routes (undefined: evenly). */
  sharesOf(model: string): readonly number[] | undefined {
    return this.#routes.sharesOf(model);
  }

  /** PlacedRoutes.pick: the node that takes `model`'s next request, by its shares where it has them. */
  pick<T extends { address: string; inflight: number }>(model: string, candidates: readonly T[], router: Parameters<PlacedRoutes['pick']>[2]): T {
    return this.#routes.pick(model, candidates, router);
  }

  /**
   * After a health check of every node: loads, placement, and the moves it asks for. At 10,000
   * models a placement takes 12-25 ms with every model running (bench/fleet-routes-check.js,
   * bench/gateway-checks.js; 50-90 ms before the barely running ones were placed as a sum): the
   * gateway runs it on its placement thread, never on the thread that forwards requests.
   */
  update(nodes: readonly FleetMember[]): void {
    // Nothing placement reads changed since a placement that would give itself back: it stands
    // (most checks of a calm fleet change nothing).
    const inputs = nodes.map(inputsOf);
    this.#checks++;
    if (this.#settled && this.#switching.size === 0 && sameInputs(inputs, this.#inputs)) {
      this.#unchanged++;
      return;
    }
    this.#inputs = inputs;
    this.#place(nodes);
  }

  /**
   * Place the models from the members' reports, and switch the routes that change. Only the models
   * that ran enough (#split) are placed from the reports one by one: an idle model goes home (the
   * first node of its ranking among the nodes not given over: FleetPlacement `shared`) whatever they
   * say, one running too little is placed there as a sum, and so each is gone over only when it
   * could have moved: it was away from home at the last check, it joined the catalog, or the node
   * set or the nodes given over changed. At 64 nodes x 10,000 models placing every model took
   * 40-100 ms a check, at every check a report changed (bench/gateway-checks.js: a node's restart
   * made 7 of 26 checks place anew).
   */
  #place(nodes: readonly FleetMember[]): void {
    this.#routes.setNames(new Map(nodes.map((n) => [n.address, n.name])));
    const members = this.#onePerName(nodes);
    this.#members = members;
    this.#keepCounts(members);
    // A node's memory for placement: its weight budget and its session budget where it has one; a
    // model's footprint: its weights and its share of the sessions it runs on, where nodes report them.
    const fleet: FleetNode[] = members.map((n) => {
      const r = known(n)!;
      return { id: n.name, budgetBytes: r.budgetBytes + r.sessionBudgetBytes, devices: Math.max(1, r.devices) };
    });
    const live = new Set(members.map((n) => n.name));
    const joined = new Set<string>();
    const rankings = this.#routes.rankings;
    if (!rankings.sameNodes(fleet)) {
      this.#routes.rankings = new Rankings(fleet);
      for (const id of live) if (!this.#live.has(id)) joined.add(id);
    }
    this.#live = live;
    const { added, removed } = this.#catalog.update(new Map(members.map((n) => [n.name, n.models])));
    // A model no node serves any more: its routes go, and a prefetch for it that ends later switches nothing.
    for (const name of removed) {
      this.#routes.delete(name);
      this.#placed.delete(name);
      this.#switching.delete(name);
    }
    const catalog = this.#catalog;
    const rehomed = this.#boundHomes(members, added.length > 0 || removed.length > 0);
    this.#reports.read(members, catalog);
    const devices = fleet.reduce((sum, n) => sum + (n.devices ?? 1), 0);
    const fair = this.#reports.totalLoad / Math.max(1, devices);
    const { placed: ran, home } = this.#split(fair);
    for (const m of ran) {
      // Most load first: where the gateways send it now leads where a move left traffic behind.
      mostLoadFirst(m);
      const current = this.#holding(m, { live, joined, fair });
      if (current) m.current = current;
    }
    const placement = placeFleet(ran, fleet, this.#o.fleet, this.#routes.rankings, home);
    this.#placement = placement;
    this.#fullPlacement = null;
    // The models that could have moved: every one when the node set or the nodes given over changed,
    // else those placed off their home (the first node of their ranking among the nodes shared) or
    // from the reports, now or at the last check, and those that joined the catalog. Every other
    // model is at home, as it was.
    const away = awayOf(placement, catalog);
    const all = rehomed || this.#routes.rankings !== rankings || this.#lastAway === null || placement.shared !== this.#lastShared;
    this.#lastShared = placement.shared;
    const visit = all ? catalog.names : this.#sinceLastCheck(away, added);
    this.#lastAway = { names: catalog.names, at: away };
    const byName = new Map(members.map((n) => [n.name, n]));
    const reported = new Map(ran.map((m) => [m.name, m]));
    let changed = false;
    let moved = 0;
    for (const model of visit) {
      const target = placement.nodes.get(model) ?? [placement.shared.first(model).id];
      const was = this.#placed.get(model);
      if (!was || !sameNodes(was.nodes, target)) {
        this.#placed.set(model, { nodes: target, check: this.#checks, moved: was !== undefined });
        changed = true;
      }
      const now = this.#routes.routes.get(model);
      // Residency is read from the members only where routes change of a model not placed from the reports.
      const resident = reported.get(model)?.resident ?? (now && sameNodes(now, target) ? NONE : residentOn(model, members));
      moved += this.#switch(model, target, resident, byName) ? 1 : 0;
    }
    this.#share(reported);
    // Placing again from the same inputs gives this back once nothing it placed is young (#holding
    // holds a young model where it is, then weighs its reports) and no routes wait on a prefetch.
    this.#lastChange = changed ? this.#checks : this.#lastChange;
    this.#settled = this.#switching.size === 0 && this.#checks - this.#lastChange >= REPORT_LAG_CHECKS;
    if (moved > 0) {
      const givenOver = Object.fromEntries([...placement.givenOver].map((m) => [m, placement.nodes.get(m)?.length ?? 0]));
      this.#o.logger.info({ moved, prefetching: this.#switching.size, models: catalog.names.length, nodes: members.length, imbalance: sharedImbalance(placement), givenOver }, 'placement changed');
    }
  }

  /**
   * The shares of requests each model routed to several nodes gives each of them (fleet-shares.ts),
   * from this check's reports: those placed from the reports (the rest run too little to matter, and
   * are split evenly). Set at every check placed, as the loads they follow move. The models on one
   * node are given too: each one's load counts where it is routed now (one that moved since the window
   * ran elsewhere in it).
   */
  #share(reported: ReadonlyMap<string, ReportedModel>): void {
    const models: SplitModel[] = [];
    for (const [name, m] of reported) {
      const nodes = this.#routes.routes.get(name);
      if (nodes) models.push({ name, nodes, load: m.load, ranOn: m.serving ?? NONE, ranLoad: m.servingLoad ?? [] });
    }
    const shares = splitShares(models, this.#reports.measuredNodes());
    for (const name of [...this.#routes.shares.keys()]) if (!shares.has(name)) this.#routes.setShares(name, null);
    for (const [name, s] of shares) this.#routes.setShares(name, s);
  }

  /**
   * The models that ran over the window, in the catalog's order, split in two. In full, those placed
   * from the reports. As HomeModels, those that ran too little for the window's counts to say where
   * they run and need no node of their own: placement puts each at home and adds its load there
   * (in the simulator, ~95% of those that ran), so none is made an object or gone over one by one.
   */
  #split(fair: number): { placed: ReportedModel[]; home: HomeModels } {
    const reports = this.#reports;
    const homeAt: number[] = [];
    const placedAt: number[] = [];
    for (const at of reports.ran) {
      const atHome = runsTooLittle(reports.load[at], fair) && !needsOwnNodes({ rate: reports.rate[at], capacity: reports.capacity[at] });
      (atHome ? homeAt : placedAt).push(at);
    }
    const names = this.#catalog.names;
    const home: HomeModels = {
      names: homeAt.map((at) => names[at]),
      loads: homeAt.map((at) => reports.load[at]),
      full: (indexes) => reports.models(indexes.map((i) => homeAt[i])).map((m) => {
        mostLoadFirst(m);
        return m;
      }),
    };
    return { placed: reports.models(placedAt), home };
  }

  /**
   * The models away now or at the last check, and those new to the catalog: those whose place could
   * change, in the catalog's order (marked by index, then read in order: no sort).
   */
  #sinceLastCheck(away: Int32Array, added: readonly string[]): string[] {
    const catalog = this.#catalog;
    const mark = new Uint8Array(catalog.names.length);
    for (const at of away) mark[at] = 1;
    const last = this.#lastAway!;
    for (const at of last.at) {
      // Indexes of the catalog of then: the same while its names are the same list.
      const now = last.names === catalog.names ? at : catalog.order.get(last.names[at]);
      if (now !== undefined) mark[now] = 1;
    }
    for (const name of added) mark[catalog.order.get(name)!] = 1;
    const visit: string[] = [];
    for (let at = 0; at < mark.length; at++) if (mark[at] === 1) visit.push(catalog.names[at]);
    return visit;
  }

  /** One member per name, up and known: of addresses reporting one name, the newest process serves, the rest drain. */
  #onePerName(nodes: readonly FleetMember[]): FleetMember[] {
    const serving = new Map<string, FleetMember>();
    for (const n of nodes) {
      if (!n.up || n.draining || !known(n)) continue;
      const seen = serving.get(n.name);
      if (!seen) {
        serving.set(n.name, n);
        continue;
      }
      const newer = newerOf(seen, n);
      serving.set(n.name, newer);
      this.#o.logger.warn({ node: n.name, serving: newer.address, draining: (newer === n ? seen : n).address }, 'two addresses report one node name: the newer serves');
      this.#o.onSuperseded?.(newer === n ? seen : n, newer);
    }
    return [...serving.values()];
  }

  /**
   * Bound the models' homes by the catalog's bytes (routing/fleet-homes.ts) when the nodes, the
   * catalog or the bytes the members read changed since they were bounded; true when it did. Every
   * gateway reads the same bytes of the same catalog and so finds the same homes. A model two
   * repositories give different bytes counts its largest.
   */
  #boundHomes(members: readonly FleetMember[], catalogChanged: boolean): boolean {
    const maps = [...new Set(members.map((n) => n.modelBytes).filter((b) => b !== undefined))];
    const rankings = this.#routes.rankings;
    const same = rankings.homeCatalog !== null && !catalogChanged && maps.length === this.#homeBytes.size && maps.every((b) => this.#homeBytes.has(b));
    if (same || maps.length === 0) return false;
    this.#homeBytes = new Set(maps);
    const bytes = maps.length === 1 ? maps[0] : largestOf(maps);
    // A node restarted reads its index and bytes anew: the same bytes of the same catalog bound the
    // same homes, so they are not bounded again (at 64 nodes x 10,000 models, ~20 ms a time).
    const held = rankings.homeCatalog;
    if (held && !catalogChanged && sameBytes(held.bytes, bytes)) return false;
    rankings.boundHomes({ names: this.#catalog.names, bytes });
    let known = 0;
    for (const name of this.#catalog.names) if ((bytes.get(name) ?? 0) > 0) known++;
    this.#o.logger.info({ models: this.#catalog.names.length, withBytes: known, nodes: rankings.nodes.length }, 'homes bounded by the models\' bytes');
    return true;
  }

  /**
   * The nodes `m` stays on (placement's `current`), or null to place it from the reports. Idle, or
   * running too little (under DOMINANCE_MIN_SHARE of a device's fair share) for a window's counts to
   * say where the gateways send it: the first node of its ranking. Else where this gateway placed it
   * last, every one of them live, while that holds:
   * - while its routes switch and for REPORT_LAG_CHECKS checks after: the reports still show the
   *   traffic from before (without this a model that had just moved went back);
   * - for minMoveChecks after it moved (not its first placement), pinned: placement moves it only
   *   far past its node's share;
   * - while each of its nodes carries at least HOLD_SHARE of its part of its load (its share there
   *   where its requests are split by shares, else the even split). A gateway that placed it apart
   *   from the others sees its nodes carry only its own part of the traffic, and follows the
   *   reports: where most of it runs (placement reads `serving` most load first), its replicas
   *   counted from those it gave it (`placedReplicas`);
   * - while no other node runs as much as HOLD_SHARE of such a part of its load: a node runs it that
   *   this gateway does not send it to, so another gateway places it there, and both follow the reports.
   * A model that lost a node keeps the rest (or, none left, goes to the first of its ranking).
   * A node joining takes its share as rendezvous hashing gives it: at the check that first sees it,
   * the models it now ranks first for are placed from the reports (where they run or are resident,
   * else on it), the same on every gateway.
   */
  #holding(m: ReportedModel, { live, joined, fair }: { live: ReadonlySet<string>; joined: ReadonlySet<string>; fair: number }): string[] | null {
    // Idle, or too little traffic to tell where it runs: the first node of its ranking, as every
    // gateway places it, a gateway that never placed it included. Kept where its weights were (before
    // 2026-11-29, later), it followed an LRU's evictions and each gateway's reading of them (a read
    // failed, an older report) from node to node: bench/fleet-sim.js, half the quiet moves and most
    // of the gateways' disagreement.
    if (runsTooLittle(m.load, fair)) return [this.#routes.rankings.first(m.name).id];
    const was = this.#placed.get(m.name);
    if (!was) return null;
    // A node of its gone: the rest of them, else the first of its ranking, not where the reports
    // place it: gateways that read other windows at the change would place it apart for good.
    const left = was.nodes.filter((id) => live.has(id));
    if (left.length < was.nodes.length) return left.length > 0 ? left : [this.#routes.rankings.first(m.name).id];
    if (joined.size > 0 && joined.has(this.#routes.rankings.first(m.name).id)) return null;
    // Moved lately: where it went, and pinned there (placement moves it only far past its node's
    // share). Without a minimum age the heavy models near a bound went back and forth as their loads wandered.
    const age = this.#checks - was.check;
    const pinned = was.moved && age < (this.#o.minMoveChecks ?? DEFAULT_MIN_MOVE_CHECKS);
    const settling = this.#switching.has(m.name) || age < REPORT_LAG_CHECKS;
    if (pinned || settling) {
      m.pinned = pinned;
      m.settling = settling;
      m.givenOver = this.#placement?.givenOver.has(m.name) ?? false;
      return was.nodes;
    }
    m.placedReplicas = was.nodes.length;
    const routed = this.#routes.routes.get(m.name);
    const shares = routed && sameNodes(routed, was.nodes) ? this.#routes.sharesOf(m.name) : undefined;
    return carriesItsParts(m, was.nodes, shares, HOLD_SHARE) && !runsElsewhere(m, was.nodes, HOLD_SHARE) ? was.nodes : null;
  }

  /** Route `model` to `target`, once the nodes gaining it hold its weights; true when it gains a node now. */
  #switch(model: string, target: string[], resident: readonly string[], members: ReadonlyMap<string, FleetMember>): boolean {
    const now = this.#routes.routes.get(model);
    if (now && sameNodes(now, target)) {
      this.#switching.delete(model);
      return false;
    }
    const key = target.join(',');
    if (this.#switching.get(model) === key) return false; // prefetching for it already
    const gained = now ? target.filter((id) => !now.includes(id)) : [];
    this.#moves?.inc(gained.length);
    this.#moved += gained.length;
    const cold = gained.filter((id) => !resident.includes(id));
    // First placed, or nothing to bring on, or nowhere else to go meanwhile: switch now.
    if (!now || cold.length === 0 || !now.some((id) => members.has(id))) {
      this.#routes.set(model, target);
      this.#switching.delete(model);
      return gained.length > 0;
    }
    this.#switching.set(model, key);
    void Promise.allSettled(cold.map((id) => members.get(id)!.prefetch(model, this.#o.prefetchTimeoutMs))).then((results) => {
      for (const [i, r] of results.entries()) {
        this.#prefetches?.inc({ result: r.status === 'fulfilled' ? 'ok' : 'failed' });
        if (r.status === 'rejected') this.#o.logger.warn({ model, node: cold[i], err: (r.reason as Error).message }, 'prefetch failed: the model\'s first requests there load it');
      }
      if (this.#switching.get(model) !== key) return; // placed elsewhere meanwhile
      this.#switching.delete(model);
      this.#routes.set(model, target);
      // Its traffic moves now: the reports show it from the next whole window on.
      const placed = this.#placed.get(model);
      if (placed?.nodes.join(',') === key) placed.check = this.#lastChange = this.#checks;
      this.#settled = false;
      this.#o.logger.debug({ model, from: now, to: target }, 'model moved');
    });
    return true;
  }

  #keepCounts(members: readonly FleetMember[]): void {
    const live = new Set(members.map((n) => n.name));
    for (const name of this.#counts.keys()) if (!live.has(name)) this.#counts.delete(name);
    for (const n of members) {
      const report = n.report;
      if (!report) continue; // its counts kept as they were
      let kept = this.#counts.get(n.name);
      if (!kept || kept.startedMs !== report.startedMs) this.#counts.set(n.name, (kept = { startedMs: report.startedMs, serial: undefined, seen: 0, models: new Map() }));
      const serial = n.reportSerial;
      if (serial === undefined || serial !== kept.serial) {
        // The models of the report before were last seen when it was.
        for (const c of kept.models.values()) {
          if (!c.inReport) continue;
          c.inReport = false;
          c.check = kept.seen;
        }
        for (const [model, r] of report.models) kept.models.set(model, { hits: r.hits, misses: r.misses, check: this.#checks, inReport: true });
        kept.serial = serial;
      }
      kept.seen = this.#checks;
    }
    // At most every COUNTS_KEPT_CHECKS checks, not at multiples of it: checks that leave the placement
    // standing do not come here.
    if (this.#checks - this.#countsSwept < COUNTS_KEPT_CHECKS) return;
    this.#countsSwept = this.#checks;
    for (const { models } of this.#counts.values()) {
      for (const [model, c] of models) if (!c.inReport && this.#checks - c.check > COUNTS_KEPT_CHECKS) models.delete(model);
    }
  }

  /** Per model: weight-cache hits and misses summed over the nodes placed on, each as it last reported them. */
  #traffic(): Map<string, { hits: number; misses: number }> {
    const sum = new Map<string, { hits: number; misses: number }>();
    for (const { models } of this.#counts.values()) {
      for (const [model, r] of models) {
        const s = sum.get(model) ?? { hits: 0, misses: 0 };
        s.hits += r.hits;
        s.misses += r.misses;
        sum.set(model, s);
      }
    }
    return sum;
  }
}

/** The busiest node's placed load over the mean, of the nodes the models share (not those given over to one). */
function sharedImbalance(placement: FleetPlacement): number {
  const given = new Set([...placement.givenOver].flatMap((m) => placement.nodes.get(m) ?? []));
  const loads = [...placement.load].filter(([node]) => !given.has(node)).map(([, load]) => load);
  const mean = loads.reduce((s, l) => s + l, 0) / Math.max(1, loads.length);
  return mean > 0 ? Math.max(...loads) / mean : 1;
}

const NONE: readonly string[] = [];

/** A node's weight-cache counts as FleetRoutes keeps them (#counts). */
interface NodeCounts {
  startedMs: number;
  /** The serial of the report last gone over (undefined: a member without serials, gone over at every check). */
  serial: number | undefined;
  /** The last check that saw that report. */
  seen: number;
  /** Model -> its counts, the check that last saw it, and whether that report names it (then last seen at `seen`). */
  models: Map<string, { hits: number; misses: number; check: number; inReport: boolean }>;
}

/** The members whose devices held `model`'s weights as their window ended, in the members' order. */
function residentOn(model: string, members: readonly FleetMember[]): string[] {
  return members.filter((n) => (n.report?.models.get(model)?.windowResidentBytes ?? 0) > 0).map((n) => n.name);
}

/** What placement reads of a member, to tell a check whose inputs are the last placement's. */
interface MemberInputs {
  address: string;
  name: string;
  up: boolean;
  draining: boolean;
  models: readonly string[];
  /** Its report's serial (undefined: not kept, always new); whether it is fresh, old, or none. */
  serial: number | undefined;
  report: 'fresh' | 'old' | 'none';
}

function inputsOf(n: FleetMember): MemberInputs {
  const report = n.report ? 'fresh' : n.lastReport ? 'old' : 'none';
  return { address: n.address, name: n.name, up: n.up, draining: n.draining, models: n.models, serial: n.reportSerial, report };
}

function sameInputs(a: readonly MemberInputs[], b: readonly MemberInputs[]): boolean {
  return a.length === b.length && a.every((x, i) => {
    const y = b[i];
    return x.serial !== undefined && x.serial === y.serial && x.report === y.report && x.address === y.address && x.name === y.name
      && x.up === y.up && x.draining === y.draining && x.models === y.models;
  });
}

function sameNodes(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((id, i) => id === b[i]);
}

/** The catalog indexes of the models `placement` lists (placed from reports, or off home), sorted. */
function awayOf(placement: FleetPlacement, catalog: FleetCatalog): Int32Array {
  const away = new Int32Array(placement.nodes.size);
  let k = 0;
  for (const name of placement.nodes.keys()) {
    const at = catalog.order.get(name);
    if (at !== undefined) away[k++] = at;
  }
  return away.subarray(0, k).sort();
}

/** Each model's largest bytes over several repositories' maps. */
function largestOf(maps: readonly ReadonlyMap<string, number>[]): Map<string, number> {
  const bytes = new Map<string, number>();
  for (const map of maps) for (const [name, b] of map) if (b > (bytes.get(name) ?? 0)) bytes.set(name, b);
  return bytes;
}

function sameBytes(a: ReadonlyMap<string, number>, b: ReadonlyMap<string, number>): boolean {
  if (a === b) return true;
  if (a.size !== b.size) return false;
  for (const [name, bytes] of a) if (b.get(name) !== bytes) return false;
  return true;
}
