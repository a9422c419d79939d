/**
 * Where each model lives across the nodes of a fleet (a gateway-only process in front of several
 * Stowage nodes): a few nodes per model, so that its weights stay resident where its requests go
 * and the fleet's memory is pooled instead of every node caching the whole catalog's traffic.
 *
 * Rendezvous (highest-random-weight) hashing with bounded loads:
 *
 * - Every model ranks every node by a hash of the two names, weighted by the node's weight budget
 *   (a node with twice the memory wins twice as often). The ranking depends on nothing else, so
 *   every gateway ranks alike, and a node joining or leaving changes the first choice of only the
 *   models it wins or held (about 1/N of them). Where the gateway knows the catalog's bytes, each
 *   model's first node (its home) is bounded instead: the first node of its ranking whose homes
 *   stay within their share of the catalog's bytes and count (fleet-homes.ts), so that no node is
 *   the home of more weights than its memory holds.
 * - The light models (everything but the heavy ones below, the unmeasured included) go where their
 *   weights are resident (as the nodes report), else to their ranking's first node, unbounded:
 *   each weighs too little to unbalance a node, hashing spreads them evenly, and a model nobody
 *   holds or has asked for goes to the same one node from every gateway, so a burst of first
 *   requests for it loads it once. Their load is counted on their nodes first.
 * - The heavy models (one replica's load at least HEAVY_SHARE of a device's fair share, as many as
 *   the fleet's memory holds) are placed heaviest first, in two passes. First each stays where its
 *   weights are resident (held nowhere: on its ranking's first node) within (1 + epsilon +
 *   stickiness) of that node's fair share of all the load and of the heavy models' bytes: moving a
 *   model costs a cold load, a node joining or leaving (every fair share moving by 1/N) should move
 *   what it must, not every model near a bound, and a model that must move cannot push out one
 *   that stays; a model that moved lately (`pinned`, the caller's minimum age) stays up to (1 +
 *   epsilon + 3 stickiness). Then the replicas still wanted go to the next nodes of their ranking within
 *   (1 + epsilon); where none fits, the least full node takes it. Placing again from the residency
 *   a placement left gives that placement back.
 * - A model's replica count follows its load: one node per `replicaLoad` of one device's compute
 *   (a model needing 1.6 devices at 0.8 gets two), and never more than a fifth of a node's bounded
 *   share per replica (REPLICA_PART), so that the bound can hold and the gateway's shares have
 *   models on several nodes to even the nodes' loads with (routing/fleet-shares.ts), or half where
 *   the heavy models' copies would take over HEAVY_MEMORY of the fleet's memory; at most every
 *   node. It gives a replica back only once its load is clearly below (REPLICA_HYSTERESIS).
 * - A model whose requests need more than a whole device at full batches (its request rate over
 *   what one device answers of it at full batches, from the costs its nodes learned) is given nodes
 *   of its own first, one per GIVEN_OVER_USE of a device's capacity, and the rest is placed on the
 *   other nodes. Its replica count then follows its requests against capacity, not its measured
 *   device time: a replica runs smaller batches the more replicas there are, so its device time
 *   grew with its own replica count until it took the whole fleet (bench/fleet-sim.js --hot 10).
 * - "Where its weights are" is first where it ran over the last window (every gateway's traffic,
 *   as the nodes report it), then where its weights are resident: residency alone flickers as
 *   LRU caches evict and as a move leaves the weights on both nodes for a while.
 *
 * Loads are what the nodes report (compute seconds per second, from their statistics), which two
 * gateways read at slightly different moments: each is rounded to a grid of quarter octaves first
 * (`quantizeLoad`), so that the small differences between two readings of the same traffic rarely
 * change a model's replica count or its order. Pure: the gateway feeds it what the nodes report
 * and routes by the result; `bench/fleet-sim.js` drives it with simulated nodes.
 */

import { boundedHomes, type HomeCatalog } from './fleet-homes.js';

/** A node of the fleet as placement sees it. */
export interface FleetNode {
  /** Its address: what the ranking hashes, so every gateway names it alike. */
  id: string;
  /** Its weight budget in bytes (its share of the fleet's memory; 0 counts as the mean). */
  budgetBytes: number;
  /** Devices it runs on (its share of the fleet's compute); 1 when unknown. */
  devices?: number;
}

/** A model as placement sees it. */
export interface FleetModel {
  name: string;
  /** Bytes of its weights on a device. */
  bytes: number;
  /** Measured compute, in device-seconds per second over the whole fleet (0: none measured). */
  load: number;
  /** The nodes whose devices hold its weights now, as they report it (absent: none). */
  resident?: readonly string[];
  /** Requests (rows) per second that came for it over the last window, the whole fleet (0 or absent: none measured). */
  rate?: number;
  /**
   * Rows per second one device answers of it at full batches, from the costs its nodes learned (the best node's;
   * 0 or absent: unknown). With `rate`, whether it needs nodes of its own.
   */
  capacity?: number;
  /**
   * The nodes it ran on over the last window, as they report it: where its requests went, whatever
   * gateway sent them. Its first anchor (before `resident`, which an LRU's evictions and a move's
   * overlap make flicker) and its replica count now, for the hysteresis.
   */
  serving?: readonly string[];
  /**
   * The nodes it stays on unless the bounds move it: where the caller placed it last, while that
   * still holds (remote/fleet-routes.ts decides). Before `serving` and `resident`, which lag a move
   * by a window and would send a model that just moved back where it came from.
   */
  current?: readonly string[];
  /**
   * Moved too recently to move again (the caller's minimum age): heavy, it stays on `current` up to
   * (1 + epsilon + 3 stickiness) of a node's share, not (1 + epsilon + stickiness); light, it is not
   * shed. A replica may still be added, or given back.
   */
  pinned?: boolean;
  /**
   * Its routes switched lately or are switching (the caller's): the reports still show its traffic
   * from before, split between the nodes it left and those it gained, so it is given no fewer nodes
   * of its own than it holds. (Read low at the window after it was given 12 nodes, the hot model of
   * bench/fleet-sim.js --hot 10 was given 3, then 11, 4, 12 and 8, each change moving ~1,000 models.)
   */
  settling?: boolean;
  /**
   * The replicas the caller gave it last, where that placement no longer holds (`current` absent):
   * its replica count's hysteresis starts from them. `serving` lists every node it ran on, nodes it
   * left and another gateway's apart included: counted from it, a model whose placement lapsed kept
   * a replica more than it had, a node gained for nothing (bench/fleet-sim.js: most quiet replica adds).
   */
  placedReplicas?: number;
  /** Given nodes of its own at the caller's last placement: while `settling`, it keeps them however low it reads. */
  givenOver?: boolean;
}

export interface FleetOptions {
  /** No node takes more than (1 + epsilon) of its fair share of load or hot bytes, where placement can help it. */
  epsilon: number;
  /** A node that holds a model's weights keeps it up to (1 + epsilon + stickiness) of its share. */
  stickiness: number;
  /** A replica per this much of one device's compute a model needs (its load divided by it, rounded up). */
  replicaLoad: number;
  /**
   * A replica's load at most as a share of a node's bounded share, where memory allows (default REPLICA_PART); not
   * in the node file: a test's scenario made for coarser replicas gives it.
   */
  replicaPart?: number;
}

/**
 * A model is heavy, and placed within the bounds, when its load is at least this share of a device's
 * fair share (one replica's, before 2026-12-01: with replicas of a third of a node's share, a model
 * of 0.4 on two nodes was light and unbounded, and a placement's busiest node rose past its bound).
 * At 2% (before 2026-11-29) thousands of small models were bounded, and noise in their measured
 * loads pushed them from node to node (bench/fleet-sim.js: 69-93% of the catalog moved a minute);
 * at 20% fewer move and every node is as even (docs/performance.md).
 */
const HEAVY_SHARE = 0.2;

/**
 * The heavy models' bytes are spread in proportion to the nodes' budgets once they take more than
 * this share of the fleet's memory; below it, each node may hold up to this share of its own
 * budget of them, the rest left to the light models' working set.
 */
const HEAVY_MEMORY = 0.5;

/**
 * The bounds measured best by bench/fleet-sim.js (64 nodes, a catalog 64x one node's budget, 3
 * gateways; docs/performance.md): the busiest node within 1.25x the mean and a membership change
 * moving under 2/N of the models, at a hit rate within 2 points of an oracle's partition. Stickiness
 * 0.15 since 2026-12-03 (was 0.1): once the shares counted each model where it is routed
 * (fleet-shares.ts), the worst quiet 5 s windows were as good as at 0.1 over 38 seeds and the quiet
 * moves at or under 0.5% of the catalog a minute on every one (0.3-0.6% at 0.1).
 */
export const DEFAULT_FLEET_OPTIONS: FleetOptions = { epsilon: 0.1, stickiness: 0.15, replicaLoad: 0.5 };

/**
 * Models placed at home, the first node of their ranking among the nodes the models share (not given
 * over to one: FleetPlacement `shared`), given apart from `models` so that a caller need not make
 * an object for each: those that ran too little for a window's counts to say where they run
 * (remote/fleet-routes.ts; at 64 nodes x 10,000 models most of a catalog). Each is light, wants one
 * replica, is not pinned and needs no node of its own (`needsOwnNodes` false). placeFleet adds its
 * load to its home as it would for the model given in full with `current` its home, and lists it in
 * `nodes` only where it placed it elsewhere (shed from a node past its bound). By name, as `models`
 * are: loads are added in one order of the two together, so that the sums are the same.
 */
export interface HomeModels {
  readonly names: readonly string[];
  /** Each one's measured load, device-seconds per second over the fleet (0: none). */
  readonly loads: ArrayLike<number>;
  /** Those at `indexes` (into `names`) in full (placement sets `current`): where a sum would not place them alike. */
  full(indexes: readonly number[]): FleetModel[];
}

export interface FleetPlacement {
  /**
   * Model -> its nodes, the first its ranking's best that fit. Every model given in `models` is
   * here; one given as a HomeModels only where it is not at home (shed).
   */
  nodes: Map<string, string[]>;
  /** Per node: the load and the hot bytes placed on it. */
  load: Map<string, number>;
  bytes: Map<string, number>;
  /** The models placed within the bounds (heavy); the rest were placed where they are, unbounded. */
  heavy: ReadonlySet<string>;
  /** The models given nodes of their own (each of those nodes serves it alone of the measured models). */
  givenOver: ReadonlySet<string>;
  /**
   * The rankings of the nodes the other models share (all but those given over): an idle model, and
   * a home model, goes to its first node there. (On its first node of all, an idle model whose
   * first node was given over went there and back at every check it ran a little: bench/fleet-sim.js
   * --hot 10, 4x the catalog a minute.)
   */
  shared: Rankings;
}

/** 32-bit FNV-1a of a string: each name hashed once, then mixed per pair. */
function nameHash(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/** murmur3's 32-bit finaliser: a well-mixed hash of the pair's two name hashes. */
function mix(a: number, b: number): number {
  let h = (a ^ Math.imul(b, 0x9e3779b1)) >>> 0;
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/**
 * The weighted rendezvous score of a (model, node) pair: -weight / ln(u), u uniform in (0, 1) from
 * the pair's hash. The node with the highest score wins the model, each with probability
 * proportional to its weight.
 */
function rendezvousScore(modelHash: number, nodeHash: number, weight: number): number {
  const u = (mix(modelHash, nodeHash) + 0.5) / 4294967296;
  return -weight / Math.log(u);
}

/**
 * `load` on a grid of quarter octaves (0 stays 0): readings of the same traffic a few percent apart
 * round alike, except near a grid line.
 */
export function quantizeLoad(load: number): number {
  if (!(load > 0)) return 0;
  return 2 ** (Math.round(Math.log2(load) * 4) / 4);
}

/**
 * A replica's load at most, as a share of a node's bounded share. At a half (before 2026-12-01) most
 * heavy models had one node, whole lumps that left the busiest node of bench/fleet-sim.js at
 * 1.18-1.22x the mean in its worst quiet 5 s windows; at a third, more of them ran on two or three
 * nodes, and the gateway's shares (routing/fleet-shares.ts) poured their load into the nodes the
 * lumps left low: the worst quiet window at or under 1.15 on 7-8 of 19 seeds. At a quarter (since
 * 2026-12-03) the shares have a lever on more nodes (the most popular model on 27 of 64, not 20):
 * 16 of 19 seeds, 13 of 19 unseen ones, the mean worst window 1.142 against 1.159-1.163, at the same
 * hit rate, cold loads and device time (docs/performance.md). A fifth then: 14 of 19, the most popular
 * model on 32 nodes. (At a quarter without shares, 1.17-1.24.) A fifth since 2026-12-03, later: once
 * the shares counted each model on one node where it is routed (fleet-shares.ts) and stickiness was
 * 0.15, all 38 seeds at or under 1.15 (mean 1.118 and 1.121, against 1.135 and 1.138 at a quarter),
 * quiet moves 0.2-0.4% a minute.
 */
const REPLICA_PART = 1 / 5;

/** A replica's load at most where the finer replicas would take too much memory (placeShared): half a share. */
const COARSE_REPLICA_PART = 1 / 2;

/**
 * A model running on n replicas gives one back only once its load is below (n - 1) replicas'
 * worth by this share: a load near a multiple of `replicaLoad` does not add and drop a node at
 * every check. (Replicas follow load, and load spread over more replicas reads a little higher:
 * colder caches, smaller batches. Without the margin that feedback kept counts moving.)
 */
const REPLICA_HYSTERESIS = 0.25;

/**
 * The replicas a model of `load` (quantized) gets among `nodes` nodes; `current`, the replicas it
 * runs on now, keeps it there until its load is clearly below them (REPLICA_HYSTERESIS).
 */
export function replicasFor(load: number, nodes: number, replicaLoad: number, current = 0): number {
  const want = load > 0 ? Math.ceil(load / replicaLoad - 1e-9) : 1;
  const keep = current > want && load > (current - 1) * replicaLoad * (1 - REPLICA_HYSTERESIS) ? current : want;
  return Math.max(1, Math.min(nodes, keep));
}

/**
 * The nodes' rankings for any model: each node's name hashed and its weight found once, then per
 * model one score per node. A model's first node is remembered: most of a large catalog is placed
 * on it at every check, and a gateway keeps one Rankings while its node set stays the same
 * (`sameNodes`), so a check pays for the models' scores once, not every time.
 */
export class Rankings {
  readonly #nodes: readonly FleetNode[];
  readonly #hashes: number[];
  readonly #weights: number[];
  readonly #firsts = new Map<string, FleetNode>();
  readonly #ranked = new Map<string, readonly FleetNode[]>();
  /** Each node's index by id: a ranking among a few nodes scores only those. */
  readonly #index: Map<string, number>;
  /** The node set it ranks: ids and weights, what `sameNodes` compares. */
  readonly #key: string;
  #without: { key: string; rankings: Rankings } | undefined;
  /** Each model's home where boundHomes gave them (fleet-homes.ts): its first node, ahead of its ranking. */
  #homes: ReadonlyMap<string, FleetNode> | null = null;
  #homeCatalog: HomeCatalog | null = null;

  constructor(nodes: readonly FleetNode[]) {
    this.#nodes = nodes;
    this.#hashes = nodes.map((n) => nameHash(n.id));
    const meanBudget = nodes.reduce((s, n) => s + n.budgetBytes, 0) / Math.max(1, nodes.length);
    this.#weights = nodes.map((n) => (n.budgetBytes > 0 ? n.budgetBytes : meanBudget) || 1);
    this.#key = nodes.map((n, i) => `${n.id}=${this.#weights[i]}`).join(',');
    this.#index = new Map(nodes.map((n, i) => [n.id, i]));
  }

  /** The nodes it ranks, as given (what another thread builds the same Rankings from). */
  get nodes(): readonly FleetNode[] {
    return this.#nodes;
  }

  /**
   * The rankings of the nodes but `ids`: kept while the same ids are asked for (the nodes given over
   * to a model change rarely), so that its first nodes are remembered as this one's are.
   */
  excluding(ids: ReadonlySet<string>): Rankings {
    if (ids.size === 0) return this;
    const key = [...ids].sort().join(',');
    if (this.#without?.key !== key) {
      const rankings = new Rankings(this.#nodes.filter((n) => !ids.has(n.id)));
      // The homes not on those nodes kept: a model's home is the same in both (fleet-homes.ts).
      if (this.#homeCatalog) rankings.boundHomes(this.#homeCatalog, this.#homes ?? undefined);
      this.#without = { key, rankings };
    }
    return this.#without.rankings;
  }

  /**
   * Bound the homes of `catalog`'s models by their bytes and count (fleet-homes.ts): from now on a
   * model's first node, and the head of its ranking, is its home. A model outside the catalog keeps
   * its hashed first node.
   */
  boundHomes(catalog: HomeCatalog, kept?: ReadonlyMap<string, FleetNode>): void {
    this.#homeCatalog = catalog;
    const scores = new Float64Array(this.#nodes.length);
    this.#homes = boundedHomes(catalog, this.#nodes, this.#weights, (name) => this.#scoresOf(name, scores), kept);
    this.#firsts.clear();
    this.#ranked.clear();
    this.#without = undefined;
  }

  /** The catalog its homes were bounded by (null: hashed homes). */
  get homeCatalog(): HomeCatalog | null {
    return this.#homeCatalog;
  }

  /** Each node's rendezvous score for `model`, written into `into` (one per node, in the nodes' order). */
  #scoresOf(model: string, into: Float64Array): Float64Array {
    const m = nameHash(model);
    for (let i = 0; i < into.length; i++) into[i] = rendezvousScore(m, this.#hashes[i], this.#weights[i]);
    return into;
  }

  /** Whether `nodes` would rank every model as this does (the same ids and weights, in any order of equal ids). */
  sameNodes(nodes: readonly FleetNode[]): boolean {
    return new Rankings(nodes).#key === this.#key;
  }

  /**
   * Every node ranked for `model`, best first (ties, which a 32-bit hash makes rare, by name), its
   * home first where homes are bounded (boundHomes). Remembered, as its first node is: the heavy
   * models' rankings are read at every check.
   */
  of(model: string): readonly FleetNode[] {
    let ranked = this.#ranked.get(model);
    if (!ranked) {
      const scores = this.#scoresOf(model, new Float64Array(this.#nodes.length));
      const hashed = this.#nodes.map((_, i) => i)
        .sort((a, b) => scores[b] - scores[a] || (this.#nodes[a].id < this.#nodes[b].id ? -1 : 1))
        .map((i) => this.#nodes[i]);
      const home = this.#homes?.get(model);
      ranked = home && home !== hashed[0] ? [home, ...hashed.filter((n) => n !== home)] : hashed;
      this.#ranked.set(model, ranked);
    }
    return ranked;
  }

  /**
   * The first node of `model`'s ranking (its home: bounded where boundHomes gave homes); with
   * `among`, the first of those nodes (ids) in its hashed ranking.
   */
  first(model: string, among?: Iterable<string>): FleetNode {
    if (!among) {
      let first = this.#firsts.get(model);
      if (!first) this.#firsts.set(model, (first = this.#homes?.get(model) ?? this.#firstAmong(model)));
      return first;
    }
    return this.#firstAmong(model, among);
  }

  #firstAmong(model: string, among?: Iterable<string>): FleetNode {
    const m = nameHash(model);
    let best = -1;
    let bestScore = -Infinity;
    const consider = (i: number) => {
      const score = rendezvousScore(m, this.#hashes[i], this.#weights[i]);
      if (best < 0 || score > bestScore || (score === bestScore && this.#nodes[i].id < this.#nodes[best].id)) {
        best = i;
        bestScore = score;
      }
    };
    // Among a few nodes (where a model's weights are: one or two of 64), only those are scored:
    // most of a catalog is placed this way at every check.
    if (among) {
      for (const id of among) {
        const i = this.#index.get(id);
        if (i !== undefined) consider(i);
      }
    } else for (let i = 0; i < this.#nodes.length; i++) consider(i);
    return this.#nodes[Math.max(0, best)];
  }
}

/**
 * `rankings`: the nodes' Rankings from an earlier call with the same nodes (Rankings.sameNodes),
 * to reuse what it remembers.
 */
export function placeFleet(models: readonly FleetModel[], nodes: readonly FleetNode[], options: FleetOptions = DEFAULT_FLEET_OPTIONS, rankings = new Rankings(nodes), home?: HomeModels): FleetPlacement {
  const given = giveOver(models, nodes, rankings);
  if (given.size === 0) return placeShared(models, nodes, options, rankings, home && homeOn(home, rankings));
  // The given-over models' nodes are theirs; everything else shares the rest, bounded by the rest's
  // load. (Sharing them too, each counting as what its model leaves of it, kept their idle models'
  // memory for the catalog but moved the light models on and off them at every check: bench/fleet-sim.js
  // --hot 10, 122% of the catalog a minute.)
  const taken = new Set([...given.values()].flatMap((g) => g.nodes));
  const shared = rankings.excluding(taken);
  const rest = placeShared(models.filter((m) => !given.has(m.name)), nodes.filter((n) => !taken.has(n.id)), options, shared, home && homeOn(home, shared));
  for (const [name, g] of given) {
    rest.nodes.set(name, g.nodes);
    for (const id of g.nodes) {
      rest.load.set(id, (rest.load.get(id) ?? 0) + g.load / g.nodes.length);
      rest.bytes.set(id, (rest.bytes.get(id) ?? 0) + g.bytes);
    }
  }
  return { ...rest, givenOver: new Set(given.keys()) };
}

/** The models of a HomeModels, each with its home among the nodes `rankings` ranks and its load quantized. */
interface AtHome {
  names: readonly string[];
  nodes: string[];
  q: Float64Array;
  source: HomeModels;
}

function homeOn(home: HomeModels, rankings: Rankings): AtHome {
  const q = new Float64Array(home.names.length);
  for (let i = 0; i < q.length; i++) q[i] = quantizeLoad(home.loads[i]);
  return { names: home.names, nodes: home.names.map((name) => rankings.first(name).id), q, source: home };
}

/** Two lists of models, each by name, as one by name. */
function byName(a: readonly FleetModel[], b: readonly FleetModel[]): FleetModel[] {
  if (b.length === 0) return [...a];
  const merged: FleetModel[] = [];
  let j = 0;
  for (const m of a) {
    while (j < b.length && b[j].name < m.name) merged.push(b[j++]);
    merged.push(m);
  }
  while (j < b.length) merged.push(b[j++]);
  return merged;
}

/**
 * Whether placing the home models as a sum gives what placing each in full would: each light (under
 * the heavy share) and wanting one replica. Else (a fleet whose loads are nearly all outside its
 * catalog, a tiny `replicaLoad`) they are placed in full.
 */
function homeHolds(home: AtHome, plan: LoadPlan, nodes: number): boolean {
  let most = 0;
  for (const q of home.q) most = Math.max(most, q);
  return most < HEAVY_SHARE * plan.fairPerDevice && replicasFor(most, nodes, plan.perReplica, 1) === 1;
}

/** Every model bounded among `nodes`: the light ones where they are, the heavy ones within the bounds. */
function placeShared(models: readonly FleetModel[], nodes: readonly FleetNode[], options: FleetOptions, rankings: Rankings, home?: AtHome): FleetPlacement {
  const p: Packing = { placed: new Map(), load: new Map(nodes.map((n) => [n.id, 0])), bytes: new Map(nodes.map((n) => [n.id, 0])), rankings, live: new Set(nodes.map((n) => n.id)) };
  if (nodes.length === 0) return { nodes: p.placed, load: p.load, bytes: p.bytes, heavy: new Set(), givenOver: new Set(), shared: rankings };
  let plan = planLoads(models, nodes, options, home?.q);
  if (home && !homeHolds(home, plan, nodes.length)) {
    const full = home.source.full(home.names.map((_, i) => i));
    full.forEach((m, i) => (m.current = [home!.nodes[i]]));
    models = byName(models, full);
    home = undefined;
    plan = planLoads(models, nodes, options);
  }
  let { heavy, heavyBytes } = heavyModels(plan);
  // Replicas finer than half a share are bought with memory: only while the heavy models' copies
  // take at most HEAVY_MEMORY of the fleet's (a small fleet whose catalog fills its memory lost
  // hit rate to them: bench/fleet.js, 87-88% against 90-93%).
  if (heavyBytes > HEAVY_MEMORY * plan.totalBudget) {
    plan = planLoads(models, nodes, options, home?.q, COARSE_REPLICA_PART);
    ({ heavy, heavyBytes } = heavyModels(plan));
  }
  const heavyNames = new Set(heavy.map((x) => x.m.name));
  placeLight(p, models, plan, heavyNames, home);
  shedLight(p, plan, nodes, options, home);
  placeHeavy(p, heavy, heavyBytes, plan, nodes, options);
  return { nodes: p.placed, load: p.load, bytes: p.bytes, heavy: heavyNames, givenOver: new Set(), shared: rankings };
}

/**
 * A model is given nodes of its own once its requests need more than this many whole devices at
 * full batches: below it, it shares nodes with the rest, its replicas following its device time.
 */
const GIVE_OVER_AT = 1;

/**
 * Of a device's capacity for a given-over model (its rows per second at full batches), the share
 * each of its nodes is given: below 1, so that a replica keeps a little room for the bursts of a
 * Poisson stream and its batches stay short of full; a model needing 10.5 devices gets 12 nodes.
 */
const GIVEN_OVER_USE = 0.9;

/**
 * A given-over model on n nodes gives one back only once it needs (n - 1) nodes' worth less this
 * share: its measured rate and capacity wander by a percent or so between windows.
 */
const GIVEN_OVER_HYSTERESIS = 0.02;

/** At most this share of the fleet's nodes is given over, the rest left for the catalog. */
const GIVEN_OVER_MAX_SHARE = 0.5;

/**
 * The models that need nodes of their own, most needing first, and those nodes: where it is now
 * (its anchor's nodes, in ranking order), then the rest of its ranking; none shared between two.
 * Every gateway fed the same reports gives the same nodes, as rankings and anchors are alike.
 */
function giveOver(models: readonly FleetModel[], nodes: readonly FleetNode[], rankings: Rankings): Map<string, { nodes: string[]; load: number; bytes: number }> {
  const given = new Map<string, { nodes: string[]; load: number; bytes: number }>();
  const needing = models.map((m) => ({ m, needs: devicesNeeded(m) })).filter((x) => x.needs > GIVE_OVER_AT || (x.m.settling && x.m.givenOver));
  if (needing.length === 0) return given;
  needing.sort((a, b) => b.needs - a.needs || (a.m.name < b.m.name ? -1 : 1));
  const live = new Set(nodes.map((n) => n.id));
  const taken = new Set<string>();
  let left = Math.floor(nodes.length * GIVEN_OVER_MAX_SHARE);
  for (const { m, needs } of needing) {
    const anchor = anchorOf(m, live).nodes;
    const want = Math.max(givenOverNodes(needs, anchor.length), m.settling ? anchor.length : 0);
    if (want > left) continue;
    const ranked = rankings.of(m.name).filter((n) => !taken.has(n.id));
    const held = new Set(anchor);
    const chosen = [...ranked.filter((n) => held.has(n.id)), ...ranked.filter((n) => !held.has(n.id))].slice(0, want).map((n) => n.id);
    if (chosen.length < want) continue;
    for (const id of chosen) taken.add(id);
    left -= want;
    // In ranking order, as every gateway lists them.
    given.set(m.name, { nodes: ranked.filter((n) => chosen.includes(n.id)).map((n) => n.id), load: quantizeLoad(m.load), bytes: m.bytes });
  }
  return given;
}

/** The devices a model's requests need at full batches: its rate over what one device answers of it (0: unknown). */
function devicesNeeded(m: Pick<FleetModel, 'rate' | 'capacity'>): number {
  return m.rate && m.capacity ? m.rate / m.capacity : 0;
}

/** Whether a model is given nodes of its own (a HomeModels holds none). */
export function needsOwnNodes(m: Pick<FleetModel, 'rate' | 'capacity'>): boolean {
  return devicesNeeded(m) > GIVE_OVER_AT;
}

/** The nodes a model needing `needs` devices at full batches is given, when it is on `current` now. */
export function givenOverNodes(needs: number, current: number): number {
  const want = Math.ceil(needs / GIVEN_OVER_USE - 1e-9);
  return current > want && needs > (current - 1) * GIVEN_OVER_USE * (1 - GIVEN_OVER_HYSTERESIS) ? current : want;
}

/**
 * Where a model is now: where it was placed last while that holds, else where it ran over the last
 * window (in the order given: most load first), else where its weights are.
 */
function anchorOf(m: FleetModel, live: ReadonlySet<string>): { nodes: readonly string[]; from: 'current' | 'serving' | 'resident' } {
  const current = liveOf(m.current, live);
  if (current.length > 0) return { nodes: current, from: 'current' };
  const serving = liveOf(m.serving, live);
  if (serving.length > 0) return { nodes: serving, from: 'serving' };
  return { nodes: liveOf(m.resident, live), from: 'resident' };
}

const NONE: readonly string[] = [];

/** The live ones of `ids`: `ids` itself when all are (as at most checks), without a copy per model. */
function liveOf(ids: readonly string[] | undefined, live: ReadonlySet<string>): readonly string[] {
  if (!ids || ids.length === 0) return NONE;
  for (const id of ids) if (!live.has(id)) return ids.filter((x) => live.has(x));
  return ids;
}

/** A placement being made: where each model goes, each node's load and heavy bytes so far. */
interface Packing {
  placed: Map<string, string[]>;
  load: Map<string, number>;
  bytes: Map<string, number>;
  rankings: Rankings;
  live: ReadonlySet<string>;
}

/** The measured models and what the bounds are made of. */
interface LoadPlan {
  /** The models with a load, heaviest first, their loads quantized. */
  measured: { m: FleetModel; q: number }[];
  quantized: Map<string, number>;
  replicas: Map<string, number>;
  devices: number[];
  totalDevices: number;
  totalLoad: number;
  fairPerDevice: number;
  /** A replica's load at most. */
  perReplica: number;
  budgets: number[];
  totalBudget: number;
}

/** `homeLoads`: the home models' quantized loads (HomeModels), in the fair shares with the models'. */
function planLoads(models: readonly FleetModel[], nodes: readonly FleetNode[], options: FleetOptions, homeLoads?: Float64Array, part = options.replicaPart ?? REPLICA_PART): LoadPlan {
  const measured = models.map((m) => ({ m, q: quantizeLoad(m.load) })).filter((x) => x.q > 0);
  measured.sort((a, b) => b.q - a.q || b.m.bytes - a.m.bytes || (a.m.name < b.m.name ? -1 : 1));
  // Each node's fair share: of the load by its devices, of the heavy models' bytes by its budget.
  const devices = nodes.map((n) => n.devices ?? 1);
  const totalDevices = devices.reduce((s, d) => s + d, 0);
  const totalLoad = sumLargestFirst(measured, homeLoads);
  const fairPerDevice = totalLoad / totalDevices;
  // A replica's load at most: `replicaLoad`, and `part` of the bounded share of the node with the
  // fewest devices; on the quarter-octave grid, as loads are, so that a node joining or leaving
  // rarely changes a replica count.
  const perReplica = Math.min(options.replicaLoad, quantizeLoad((1 + options.epsilon) * fairPerDevice * Math.min(...devices) * part)) || options.replicaLoad;
  const meanBudget = nodes.reduce((s, n) => s + n.budgetBytes, 0) / nodes.length;
  const budgets = nodes.map((n) => (n.budgetBytes > 0 ? n.budgetBytes : meanBudget) || 1);
  return {
    measured,
    quantized: new Map(measured.map((x) => [x.m.name, x.q])),
    replicas: new Map(measured.map((x) => [x.m.name, replicasFor(x.q, nodes.length, perReplica, x.m.current?.length || x.m.placedReplicas || x.m.serving?.length || 0)])),
    devices,
    totalDevices,
    totalLoad,
    fairPerDevice,
    perReplica,
    budgets,
    totalBudget: budgets.reduce((s, b) => s + b, 0),
  };
}

/**
 * The measured models' loads (heaviest first) and the home models', summed largest first as if they
 * were one list: the same sum, to the last bit, whichever way a caller gave them.
 */
function sumLargestFirst(measured: LoadPlan['measured'], homeLoads: Float64Array | undefined): number {
  if (!homeLoads || homeLoads.length === 0) return measured.reduce((s, x) => s + x.q, 0);
  const all = new Float64Array(measured.length + homeLoads.length);
  measured.forEach((x, i) => (all[i] = x.q));
  // copy: ~10,000 numbers a check, to sort them with the measured ones (no comparator: a typed array's own sort).
  all.set(homeLoads, measured.length);
  all.sort();
  let sum = 0;
  for (let i = all.length - 1; i >= 0; i--) sum += all[i];
  return sum;
}

/**
 * The heavy models: those whose load is worth bounding (at least HEAVY_SHARE of a device's fair
 * share, whatever their replicas: a model split in thirds is still one lump of load to place), as
 * many as the fleet's memory holds once per replica. The many light ones
 * each weigh too little to unbalance a node, hashing spreads them evenly, and bounding them would
 * move many of them for nothing whenever the bounds move a little (a node joining or leaving
 * changes every fair share by 1/N).
 */
function heavyModels(plan: LoadPlan): { heavy: LoadPlan['measured']; heavyBytes: number } {
  const heavy: LoadPlan['measured'] = [];
  let heavyBytes = 0;
  for (const x of plan.measured) {
    const n = plan.replicas.get(x.m.name)!;
    if (x.q < HEAVY_SHARE * plan.fairPerDevice || heavyBytes + x.m.bytes * n > plan.totalBudget) break;
    heavy.push(x);
    heavyBytes += x.m.bytes * n;
  }
  return { heavy, heavyBytes };
}

/**
 * The light models first, unbounded: the nodes holding them (in ranking order), then their
 * ranking's first. Their load is on the nodes before the heavy ones are bounded against it.
 */
function placeLight(p: Packing, models: readonly FleetModel[], plan: LoadPlan, isHeavy: ReadonlySet<string>, home?: AtHome): void {
  // The home models' loads on their nodes, in one order of both lists by name (the sums the same).
  let h = 0;
  const homeBefore = (name?: string) => {
    for (; home && h < home.names.length && (name === undefined || home.names[h] < name); h++) {
      if (home.q[h] > 0) p.load.set(home.nodes[h], p.load.get(home.nodes[h])! + home.q[h]);
    }
  };
  for (const m of models) {
    homeBefore(m.name);
    if (isHeavy.has(m.name)) continue;
    // Most of a catalog has no load measured: one replica, nothing to add to its node's load.
    const q = plan.quantized.get(m.name) ?? 0;
    const want = q > 0 ? (plan.replicas.get(m.name) ?? 1) : 1;
    const { nodes: held, from } = anchorOf(m, p.live);
    const ordered = from !== 'resident';
    let chosen: string[];
    // Where it is, in the anchor's order (its current nodes, or most load first); where its weights
    // are, in ranking order; then the rest of its ranking.
    if (ordered && held.length >= want) chosen = held.slice(0, want);
    else if (want === 1) chosen = [p.rankings.first(m.name, held.length > 0 ? held : undefined).id];
    else {
      const ranked = p.rankings.of(m.name);
      const first = ordered ? held : ranked.filter((n) => held.includes(n.id)).map((n) => n.id);
      chosen = [...first, ...ranked.filter((n) => !held.includes(n.id)).map((n) => n.id)].slice(0, want);
    }
    if (q > 0) for (const id of chosen) p.load.set(id, p.load.get(id)! + q / chosen.length);
    p.placed.set(m.name, chosen);
  }
  homeBefore();
}

/**
 * A node the light models alone take past (1 + epsilon + stickiness) of its fair share of the load
 * gives its busiest single-replica light models, one at a time, to the next node of each one's
 * ranking with room, until it is back under: light models stay where they are (their anchor) and
 * one node could gather too many of them (bench/fleet-sim.js, seed 12: a node at 1.8x the mean).
 * Only loads decide it, so every gateway fed the same reports sheds the same models.
 */
function shedLight(p: Packing, plan: LoadPlan, nodes: readonly FleetNode[], options: FleetOptions, home?: AtHome): void {
  const cap = new Map(nodes.map((n, i) => [n.id, (1 + options.epsilon + options.stickiness) * plan.totalLoad * (plan.devices[i] / plan.totalDevices)]));
  const over = nodes.filter((n) => p.load.get(n.id)! > cap.get(n.id)! + 1e-12);
  if (over.length === 0) return;
  const byNode = new Map<string, { name: string; q: number }[]>(over.map((n) => [n.id, []]));
  const pinned = new Set(plan.measured.filter((x) => x.m.pinned).map((x) => x.m.name));
  for (const [name, on] of p.placed) {
    const q = plan.quantized.get(name) ?? 0;
    if (on.length === 1 && q > 0 && !pinned.has(name)) byNode.get(on[0])?.push({ name, q });
  }
  // The home models are light, single and never pinned: each may be shed as well.
  for (let h = 0; home && h < home.names.length; h++) if (home.q[h] > 0) byNode.get(home.nodes[h])?.push({ name: home.names[h], q: home.q[h] });
  for (const n of over) {
    const light = byNode.get(n.id)!.sort((a, b) => b.q - a.q || (a.name < b.name ? -1 : 1));
    for (const { name, q } of light) {
      if (p.load.get(n.id)! <= cap.get(n.id)! + 1e-12) break;
      const to = p.rankings.of(name).find((r) => r.id !== n.id && p.load.get(r.id)! + q <= cap.get(r.id)! + 1e-12);
      if (!to) continue;
      p.load.set(n.id, p.load.get(n.id)! - q);
      p.load.set(to.id, p.load.get(to.id)! + q);
      p.placed.set(name, [to.id]);
    }
  }
}

/**
 * The heavy ones, heaviest first, within (1 + epsilon) of each node's share of all the load and
 * of the heavy models' bytes: first where their weights are, then the rest of their rankings.
 */
function placeHeavy(p: Packing, heavy: LoadPlan['measured'], heavyBytes: number, plan: LoadPlan, nodes: readonly FleetNode[], options: FleetOptions): void {
  const { load, bytes } = p;
  const loadCap = new Map(nodes.map((n, i) => [n.id, (1 + options.epsilon) * plan.totalLoad * (plan.devices[i] / plan.totalDevices)]));
  // Bytes bound a node's share of the memory the heavy models take, but never below its share of
  // HEAVY_MEMORY of the fleet's: a few heavy models in a large fleet's memory (the simulator: ~100 MB
  // a node of 20 GB budgets) made a bound smaller than one model, so none fitted anywhere and the
  // hottest models went to the least full node, a different one at every check.
  const heavyMemory = Math.max(heavyBytes, HEAVY_MEMORY * plan.totalBudget);
  const bytesCap = new Map(nodes.map((n, i) => [n.id, (1 + options.epsilon) * heavyMemory * (plan.budgets[i] / plan.totalBudget)]));
  // A node's fullness, the larger of its two shares: where an overflow goes.
  const fullness = (id: string) => Math.max(load.get(id)! / (loadCap.get(id)! || 1), bytes.get(id)! / (bytesCap.get(id)! || 1));
  const fits = (id: string, share: number, modelBytes: number, slack: number) =>
    load.get(id)! + share <= loadCap.get(id)! * slack + 1e-12 && bytes.get(id)! + modelBytes <= bytesCap.get(id)! * slack + 1e-9;
  const sticky = (1 + options.epsilon + options.stickiness) / (1 + options.epsilon);
  // A model that moved lately (pinned) stays up to (1 + epsilon + 3 stickiness): only a large gain moves it again.
  const pinnedSlack = (1 + options.epsilon + 3 * options.stickiness) / (1 + options.epsilon);
  const take = (id: string, share: number, modelBytes: number) => {
    load.set(id, load.get(id)! + share);
    bytes.set(id, bytes.get(id)! + modelBytes);
  };
  // First every heavy model where its weights are (or, held nowhere, on its ranking's first node:
  // its home), within the looser bound, heaviest first: bounds that move a little move nothing, and
  // a model that must move (its node gone) cannot push out one that stays. Home before the other
  // nodes holding it, as a first placement made them (home first, the rest after), so that placing
  // again from the residency a placement left gives that placement back; and only where its
  // weights are, not home as well, or a model placed off its home because home was full would go
  // back and forth between the two.
  const chosenOf = new Map<string, string[]>(heavy.map(({ m }) => [m.name, []]));
  for (const atHome of [true, false]) {
    for (const { m, q } of heavy) {
      const want = plan.replicas.get(m.name)!;
      const share = q / want;
      const chosen = chosenOf.get(m.name)!;
      const ranked = p.rankings.of(m.name);
      const anchor = anchorOf(m, p.live);
      const held = new Set(anchor.nodes);
      // Placed already: its current nodes, in one pass. Else home first, then where it ran or its weights are.
      const candidates = anchor.from === 'current' ? (atHome ? anchor.nodes.map((id) => ranked.find((n) => n.id === id)!) : [])
        : atHome ? [ranked[0]].filter((n) => held.size === 0 || held.has(n.id)) : ranked.filter((n) => n !== ranked[0] && held.has(n.id));
      for (const n of candidates) {
        if (chosen.length < want && fits(n.id, share, m.bytes, m.pinned && anchor.from === 'current' ? pinnedSlack : sticky)) {
          chosen.push(n.id);
          take(n.id, share, m.bytes);
        }
      }
    }
  }
  // Then the replicas still wanted: the rest of each ranking, within the bound; where too few fit,
  // the least full of the others, in ranking order on ties.
  for (const { m, q } of heavy) {
    const want = plan.replicas.get(m.name)!;
    const share = q / want;
    const chosen = chosenOf.get(m.name)!;
    const ranked = p.rankings.of(m.name);
    for (const n of ranked) {
      if (chosen.length < want && !chosen.includes(n.id) && fits(n.id, share, m.bytes, 1)) {
        chosen.push(n.id);
        take(n.id, share, m.bytes);
      }
    }
    while (chosen.length < want) {
      const rest = ranked.filter((n) => !chosen.includes(n.id));
      const least = rest.reduce((best, n) => (fullness(n.id) < fullness(best.id) - 1e-12 ? n : best)).id;
      chosen.push(least);
      take(least, share, m.bytes);
    }
    // In ranking order, as every gateway lists them.
    p.placed.set(m.name, ranked.filter((n) => chosen.includes(n.id)).map((n) => n.id));
  }
}
