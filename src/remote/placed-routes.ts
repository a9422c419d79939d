/**
 * Where a pooled gateway sends each model's requests: the routes placement chose (model -> node
 * names), the name each node address reports, and the nodes' rankings for a model with no route
 * yet. The placement thread (remote/placement/) owns the one that FleetRoutes writes; the main
 * thread, which forwards requests, keeps a copy fed with what changed (`changes` there, `apply`
 * here), so the requests' thread never reads a status report nor places a model, and both answer
 * `route` and `holds` with this same code.
 */
import { Rankings, type FleetNode } from '../routing/fleet-placement.js';

/** What changed since the last `changes()`: posted from the placement thread to the main thread. */
export interface RoutesChange {
  /** Models whose routes were set, with their nodes now. */
  set: [model: string, nodes: string[]][];
  /** Models that lost their routes (no node serves them any more). */
  deleted: string[];
  /** Every node address and the name it reports, when that changed. */
  names?: [address: string, name: string][];
  /** The nodes rankings are made from, when they changed. */
  rankings?: FleetNode[];
}

/** What changed since the last `changes()`: the models set (null: deleted), and whether names or rankings did. */
interface Pending {
  set: Map<string, string[] | null>;
  names: boolean;
  rankings: boolean;
}

export class PlacedRoutes {
  /** Model -> the nodes (names) its requests go to now. */
  readonly #routes = new Map<string, string[]>();
  /** Address -> the name placement knows it by. */
  #names = new Map<string, string>();
  #rankings = new Rankings([]);
  /** What changed since the last `changes()`, when kept (the placement thread's copy). */
  readonly #pending: Pending | null;
  readonly #onChange?: () => void;

  /** `onChange`: the routes changed (called at each change; the placement thread posts them at the end of the turn). */
  constructor(options: { keepChanges?: boolean; onChange?: () => void } = {}) {
    this.#pending = options.keepChanges ? { set: new Map(), names: false, rankings: false } : null;
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

  set(model: string, nodes: string[]): void {
    this.#routes.set(model, nodes);
    this.#changed((p) => p.set.set(model, nodes));
  }

  delete(model: string): void {
    if (!this.#routes.delete(model)) return;
    this.#changed((p) => p.set.set(model, null));
  }

  /** What changed since the last call (null: nothing), and forget it. Only with `keepChanges`. */
  changes(): RoutesChange | null {
    const p = this.#pending;
    if (!p || (p.set.size === 0 && !p.names && !p.rankings)) return null;
    const change: RoutesChange = { set: [], deleted: [] };
    for (const [model, nodes] of p.set) {
      if (nodes) change.set.push([model, nodes]);
      else change.deleted.push(model);
    }
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
    this.#names.clear();
    this.#rankings = new Rankings([]);
  }

  /** Take in what another copy's `changes()` gave. */
  apply(change: RoutesChange): void {
    for (const [model, nodes] of change.set) this.#routes.set(model, nodes);
    for (const model of change.deleted) this.#routes.delete(model);
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

  #changed(record: (p: Pending) => void): void {
    if (this.#pending) record(this.#pending);
    this.#onChange?.();
  }
}
