/**
 * Routing policies: which of several candidates (device actors in a node, or
 * remote nodes in a gateway-only process) serves the next request. Pure: the
 * callers keep the counts and apply the choice; the node's device pool
 * (node/devices.ts) and gateway-only forwarding (remote/proxy-service.ts) share them.
 *
 * - `round_robin`: every candidate in turn;
 * - `least_outstanding`: the candidate with the fewest calls in flight, ties taken in turn (at low
 *   load every candidate has none in flight, and the first of the list would take everything);
 * - fill (`lpt_packing`'s replicas): keep filling the open replica until it
 *   holds a full batch in flight, then open another (`fill_rr`: the next in
 *   turn; `fill_least`: the least busy);
 * - weighted turns (`pooled`'s shares, routing/fleet-shares.ts): each candidate
 *   in proportion to its weight, evenly interleaved.
 */

import type { FillPolicy, GatewayMode } from '../shared/config-schema.js';

/**
 * The modes that route without placement (lpt_packing places models, then fills their replicas;
 * a gateway's pooled mode places them across nodes, then routes least_outstanding among those).
 */
export type RoutingMode = Exclude<GatewayMode, 'lpt_packing' | 'pooled'>;

export interface Candidate {
  /** Calls in flight on it, of any model. */
  readonly inflight: number;
}

/** round_robin or least_outstanding over whatever candidates each call offers. */
export class Router {
  readonly mode: RoutingMode;
  #next = 0;

  constructor(mode: RoutingMode) {
    this.mode = mode;
  }

  pick<T extends Candidate>(candidates: readonly T[]): T {
    if (candidates.length === 0) throw new Error('Router.pick needs at least one candidate');
    const from = this.#next % candidates.length;
    this.#next = (this.#next + 1) % Number.MAX_SAFE_INTEGER;
    let chosen = candidates[from];
    if (this.mode === 'least_outstanding') {
      // The fewest in flight; among equals, the first from this call's turn on.
      for (let k = 1; k < candidates.length; k++) {
        const c = candidates[(from + k) % candidates.length];
        if (c.inflight < chosen.inflight) chosen = c;
      }
    }
    return chosen;
  }
}

export interface FillState {
  /** The replica being filled (index into the replicas). */
  open: number;
}

/**
 * Fill routing over one model's replicas: `mine(i)` is how many of this model's requests replica
 * i has in flight, `capacity` how many make a full batch there. Returns the replica's index and
 * moves `state.open` when a new replica opens.
 */
export function fill(replicas: readonly Candidate[], mine: (i: number) => number, capacity: number, policy: FillPolicy, state: FillState): number {
  if (replicas.length === 1) return 0;
  if (mine(state.open) < capacity) return state.open;
  const open = replicas.map((_, i) => i).filter((i) => mine(i) < capacity);
  if (open.length === 0) {
    // Every replica's batch is full: the one with the fewest of this model's requests.
    return replicas.map((_, i) => i).reduce((a, b) => (mine(b) < mine(a) ? b : a));
  }
  let chosen = open[0];
  if (policy === 'fill_least') {
    for (const i of open) if (replicas[i].inflight < replicas[chosen].inflight) chosen = i;
  } else {
    // The next replica after the open one, in turn.
    chosen = open.find((i) => i > state.open) ?? open[0];
  }
  state.open = chosen;
  return chosen;
}

/**
 * Smooth weighted round robin (nginx's upstream balancing): each pick adds every candidate's weight
 * to its credit and takes the one with the most, which then pays the weights' sum. Over any run of
 * picks each candidate's count stays within one of its share, and picks of one candidate are spread
 * out, not bunched (weights 3:1 give a a b a, not a a a b). Deterministic, so no random draw per
 * request; credits kept per key (a model), by candidate name.
 */
export class WeightedTurns {
  readonly #credits = new Map<string, Map<string, number>>();

  /** Of `names` (weights beside them, at least one above 0), the index of the next to take a request for `key`. */
  pick(key: string, names: readonly string[], weights: readonly number[]): number {
    let credits = this.#credits.get(key);
    if (!credits) this.#credits.set(key, (credits = new Map()));
    let best = -1;
    let total = 0;
    for (let i = 0; i < names.length; i++) {
      const w = weights[i];
      total += w;
      const c = (credits.get(names[i]) ?? 0) + w;
      credits.set(names[i], c);
      if (best < 0 || c > credits.get(names[best])!) best = i;
    }
    credits.set(names[best], credits.get(names[best])! - total);
    return best;
  }

  /** Forget `key`'s credits (its model's nodes or shares changed, or it is gone). */
  forget(key: string): void {
    this.#credits.delete(key);
  }
}
