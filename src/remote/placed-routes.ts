/**
 * Where a pooled gateway sends each model's requests: the routes placement chose (model -> node
 * names), the name each node address reports, and the nodes' rankings for a model with no route
 * yet. The placement thread (remote/placement/) owns the one that FleetRoutes writes; the main
 * thread, which forwards requests, keeps a copy fed with what changed (`changes` there, `apply`
 * here), so the requests' thread never reads a status report nor places a model, and both answer
 * `route` and `holds` with this same code. A model on several nodes may have shares (one per node,
 * routing/fleet-shares.ts): `pick` then sends its requests to each node in proportion.
 */
import { Rankings, type FleetNode } from '../routing/fleet-placement.js';
import { WeightedTurns, type Candidate, type Router } from '../routing/routing.js';

/** What changed since the last `changes()`: posted from the placement thread to the main thread. */
export interface RoutesChange {
  /** Models whose routes were set, with their nodes now. */
  set: [model: string, nodes: string[]][];
  /** Models that lost their routes (no node serves them any more). */
  deleted: string[];
  /** Models whose shares were set (null: split evenly again), each beside its routes' nodes. */
  shares?: [model: string, shares: number[] | null][];
  /** Every node address and the name it reports, when that changed. */
  names?: [address: string, name: string][];
  /** The nodes rankings are made from, when they changed. */
  rankings?: FleetNode[];
}

/** What changed since the last `changes()`: the models set (null: deleted), and whether names or rankings did. */
interface Pending {
  set: Map<string, string[] | null>;
  shares: Map<string, number[] | null>;
  names: boolean;
  rankings: boolean;
}

export class PlacedRoutes {
  /** Model -> the nodes (names) its requests go to now. */
  readonly #routes = new Map<string, string[]>();
  /** Model -> its share of requests per node of its routes (absent: split evenly). */
  readonly #shares = new Map<string, number[]>();
  /** The turns `pick` takes by the shares (the main thread's copy picks; the placement thread's does not). */
  readonly #turns = new WeightedTurns();
  /** Address -> the name placement knows it by. */
  #names = new Map<string, string>();
  #rankings = new Rankings([]);
  /** What changed since the last `changes()`, when kept (the placement thread's copy). */
  readonly #pending: Pending | null;
  readonly #onChange?: () => void;

  /** `onChange`: the routes changed (called at each change; the placement thread posts them at the end of the turn). */
  constructor(options: { keepChanges?: boolean; onChange?: () => void } = {}) {
    this.#pending = options.keepChanges ? { set: new Map(), shares: new Map(), names: false, rankings: false } : null;
    this.#onChange = options.onChange;
  }

  get routes(): ReadonlyMap<string, readonly string[]> {
    return this.#routes;
  }

  get rankings(): Rankings {
    return this.#rankings;
  }

  set rankings(rankings: Rankings) {
    this.#rankings = rankings;
    this.#changed((p) => { p.rankings = true; });
  }

  /** The name the node at `address` reports (its address while it has reported none). */
  nameOf(address: string): string {
    return this.#names.get(address) ?? address;
  }

  setNames(names: ReadonlyMap<string, string>): void {
    const same = names.size === this.#names.size && [...names].every(([a, n]) => this.#names.get(a) === n);
    if (same) return;
    this.#names = new Map(names);
    this.#changed((p) => { p.names = true; });
  }

  /** Route `model` to `nodes`; its shares, which were of the nodes before, go (split evenly until set again). */
  set(model: string, nodes: string[]): void {
    this.#routes.set(model, nodes);
    this.#turns.forget(model);
    this.#changed((p) => p.set.set(model, nodes));
    this.setShares(model, null);
  }

  delete(model: string): void {
    if (!this.#routes.delete(model)) return;
    this.#turns.forget(model);
    this.#changed((p) => p.set.set(model, null));
    this.setShares(model, null);
  }

  /** `model`'s share of requests per node of its routes, in their order (null: evenly); kept while it is routed. */
  setShares(model: string, shares: number[] | null): void {
    const was = this.#shares.get(model);
    if (shares === null ? was === undefined : was !== undefined && sameShares(was, shares)) return;
    if (shares === null) this.#shares.delete(model);
    else if (this.#routes.get(model)?.length === shares.length) this.#shares.set(model, shares);
    else return;
    this.#changed((p) => p.shares.set(model, shares));
  }

  /** `model`'s shares, beside its routes' nodes (undefined: split evenly). */
  sharesOf(model: string): readonly number[] | undefined {
    return this.#shares.get(model);
  }

  /** Every model split by shares now, with its shares. */
  get shares(): ReadonlyMap<string, readonly number[]> {
    return this.#shares;
  }

  /** What changed since the last call (null: nothing), and forget it. Only with `keepChanges`. */
  changes(): RoutesChange | null {
    const p = this.#pending;
    if (!p || (p.set.size === 0 && p.shares.size === 0 && !p.names && !p.rankings)) return null;
    const change: RoutesChange = { set: [], deleted: [] };
    for (const [model, nodes] of p.set) {
      if (nodes) change.set.push([model, nodes]);
      else change.deleted.push(model);
    }
    if (p.shares.size > 0) change.shares = [...p.shares];
    p.shares.clear();
    if (p.names) change.names = [...this.#names];
    if (p.rankings) change.rankings = [...this.#rankings.nodes];
    p.set.clear();
    p.names = false;
    p.rankings = false;
    return change;
  }

  /** Forget every route, name and ranking (a new placement thread's first routes replace them). */
  clear(): void {
    this.#routes.clear();
    this.#shares.clear();
    this.#names.clear();
    this.#rankings = new Rankings([]);
  }

  /** Take in what another copy's `changes()` gave. */
  apply(change: RoutesChange): void {
    for (const [model, nodes] of change.set) this.set(model, nodes);
    for (const model of change.deleted) this.delete(model);
    // After the routes: a model's shares are of the nodes it is routed to now.
    for (const [model, shares] of change.shares ?? []) this.setShares(model, shares);
    if (change.names) this.#names = new Map(change.names);
    if (change.rankings) this.#rankings = new Rankings(change.rankings);
  }

  /**
   * Whether the node at `address` is one of those `model`'s requests go to now; true for every node
   * while the model has no route yet.
   */
  holds(model: string, address: string): boolean {
    const routed = this.#routes.get(model);
    return !routed || routed.includes(this.nameOf(address));
  }

  /**
   * Of the nodes that serve `model` (and have not failed this request), those its requests go to:
   * its routed nodes, else the first of its ranking among them (the same node from every gateway,
   * so a burst of first requests loads it once).
   */
  route<T extends { address: string }>(model: string, candidates: readonly T[]): T[] {
    const routed = this.#routes.get(model);
    if (routed) {
      const on = candidates.filter((c) => routed.includes(this.nameOf(c.address)));
      if (on.length > 0) return on;
    }
    const among = new Set(candidates.map((c) => this.nameOf(c.address)));
    const first = this.#rankings.first(model, among);
    const chosen = candidates.find((c) => this.nameOf(c.address) === first?.id);
    return chosen ? [chosen] : [...candidates];
  }

  /**
   * The node of `candidates` that takes `model`'s next request: among those `route` gives, by the
   * model's shares where it has them (each node in proportion), else the router's choice.
   */
  pick<T extends { address: string } & Candidate>(model: string, candidates: readonly T[], router: Router): T {
    const on = this.route(model, candidates);
    const shares = on.length > 1 ? this.#shares.get(model) : undefined;
    if (!shares) return router.pick(on);
    const routed = this.#routes.get(model)!;
    const names = on.map((c) => this.nameOf(c.address));
    const weights = names.map((name) => shares[routed.indexOf(name)] ?? 0);
    // None of its routed nodes among the candidates (route fell back to its ranking): no shares apply.
    if (!weights.some((w) => w > 0)) return router.pick(on);
    return on[this.#turns.pick(model, names, weights)];
  }

  #changed(record: (p: Pending) => void): void {
    if (this.#pending) record(this.#pending);
    this.#onChange?.();
  }
}

function sameShares(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}
