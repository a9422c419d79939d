/**
 * What one check's reports say of each model of a pooled gateway's catalog, summed over the nodes
 * (remote/fleet-routes.ts places from it): its bytes, load, request rate and the best node's
 * capacity, in arrays by the model's index in the catalog, kept from check to check; and where it is
 * resident and where it ran, kept as (model, node) pairs until a model is asked for in full.
 *
 * At 64 nodes x 10,000 models a check reads ~20,000-30,000 rows. An object per model that ran, made
 * at every check whose inputs changed, was most of what placing cost the gateway (bench/gateway-checks.js,
 * a node's restart; docs/performance.md): most of a catalog runs too little to be placed from its
 * reports, so the caller asks for the rest in full (`models`) and reads the arrays for those.
 */
import type { FleetModel } from '../routing/fleet-placement.js';
import type { MeasuredNode } from '../routing/fleet-shares.js';
import type { FleetCatalog } from './fleet-catalog.js';
import type { NodeReport } from './status-report.js';

/** What a member of the fleet (fleet-routes.ts FleetMember) gives the reports: its name and its report. */
interface ReportingMember {
  readonly name: string;
  readonly report: NodeReport | null;
}

/** A model as one check reads it from the reports: `serving` with each node's load beside it (`servingLoad`). */
export type ReportedModel = FleetModel & { resident: string[] | undefined; serving: string[] | undefined; servingLoad: number[] | undefined };

export class FleetReports {
  /** Per model of the catalog (by its index): the largest footprint a node reports (weights and sessions). */
  bytes = new Float64Array(0);
  /** Its load, device-seconds per second, summed over the nodes. */
  load = new Float64Array(0);
  /** Its requests per second, summed over the nodes. */
  rate = new Float64Array(0);
  /** The rows per second the best node answers of it at full batches (one running larger batches learned more). */
  capacity = new Float64Array(0);
  /** The indexes of the models that ran (a load or a rate on some node), in the catalog's order. */
  ran: Int32Array = new Int32Array(0);
  /** The fleet's load: the models', then that of those outside the catalog, in that order. */
  totalLoad = 0;
  /**
   * Per member (in the members' order): its devices' busy time over the window, every model's
   * executions and waits for weights summed (a node thrashing its weight cache is busy with copies
   * its models' loads do not show); NaN without a report.
   */
  #nodeLoad: number[] = [];
  /** 1 once a row says a model ran. */
  #ranMark = new Uint8Array(0);
  /** Loads of models a node reports that no index read READY: in the fair share, not placed. */
  #outside = new Map<string, number>();
  /** (model index, member index) pairs in the members' order: where each is resident, where it ran (its load there). */
  #resident: number[] = [];
  #serving: number[] = [];
  #servingLoad: number[] = [];
  #members: readonly ReportingMember[] = [];
  #names: readonly string[] = [];

  /**
   * Read the members' reports: one pass over every row (Map.forEach, not for...of: a tuple per row
   * made that loop 3-5 times slower). A member kept by its last report, too old to place by, adds
   * nothing.
   */
  read(members: readonly ReportingMember[], catalog: FleetCatalog): void {
    this.#reset(catalog.names.length);
    this.#members = members;
    this.#names = catalog.names;
    const { bytes, load, rate, capacity } = this;
    const mark = this.#ranMark;
    const [resident, serving, servingLoad, outside] = [this.#resident, this.#serving, this.#servingLoad, this.#outside];
    let ran = 0;
    const nodeLoad = this.#nodeLoad;
    members.forEach((n, k) => {
      nodeLoad.push(n.report ? 0 : NaN);
      n.report?.models.forEach((r, name) => {
        nodeLoad[k] += r.windowLoad + (r.windowWeightLoad ?? 0);
        const at = catalog.order.get(name);
        if (at === undefined) {
          if (r.windowLoad > 0) outside.set(name, (outside.get(name) ?? 0) + r.windowLoad);
          return;
        }
        bytes[at] = Math.max(bytes[at], r.weightBytes + r.sessionBytes);
        if (r.windowResidentBytes > 0) resident.push(at, k);
        if (r.windowRate > 0) rate[at] += r.windowRate;
        if (r.windowCapacity > capacity[at]) capacity[at] = r.windowCapacity;
        if (r.windowLoad > 0) {
          load[at] += r.windowLoad;
          serving.push(at, k);
          servingLoad.push(r.windowLoad);
        }
        if ((r.windowLoad > 0 || r.windowRate > 0) && mark[at] === 0) {
          mark[at] = 1;
          ran++;
        }
      });
    });
    this.ran = new Int32Array(ran);
    for (let at = 0, k = 0; k < ran; at++) if (mark[at] === 1) this.ran[k++] = at;
    let total = 0;
    for (const at of this.ran) if (load[at] > 0) total += load[at];
    for (const l of outside.values()) total += l;
    this.totalLoad = total;
  }

  /**
   * The models at `indexes` of the catalog in full, as the last read gives them: where each is
   * resident and where it ran (in the members' order), its rate and capacity where reported.
   */
  models(indexes: ArrayLike<number>): ReportedModel[] {
    // By catalog index in an array: the pairs below are ~20,000 at 64 nodes, a Map's lookups cost twice.
    const byIndex: (ReportedModel | undefined)[] = new Array(this.#names.length);
    const models: ReportedModel[] = [];
    for (let i = 0; i < indexes.length; i++) {
      const at = indexes[i];
      const m: ReportedModel = { name: this.#names[at], bytes: this.bytes[at], load: this.load[at], resident: undefined, serving: undefined, servingLoad: undefined };
      if (this.rate[at] > 0) m.rate = this.rate[at];
      if (this.capacity[at] > 0) m.capacity = this.capacity[at];
      byIndex[at] = m;
      models.push(m);
    }
    const [resident, serving, members] = [this.#resident, this.#serving, this.#members];
    for (let i = 0; i < resident.length; i += 2) {
      const m = byIndex[resident[i]];
      if (m) (m.resident ??= []).push(members[resident[i + 1]].name);
    }
    for (let i = 0; i < serving.length; i += 2) {
      const m = byIndex[serving[i]];
      if (!m) continue;
      (m.serving ??= []).push(members[serving[i + 1]].name);
      (m.servingLoad ??= []).push(this.#servingLoad[i / 2]);
    }
    return models;
  }

  /** Model -> its load over the fleet, of those with one (the catalog's, then those outside it). */
  loads(): Map<string, number> {
    const loads = new Map<string, number>();
    for (const at of this.ran) if (this.load[at] > 0) loads.set(this.#names[at], this.load[at]);
    for (const [name, load] of this.#outside) loads.set(name, load);
    return loads;
  }

  /** Node name -> its measured load over the window and its devices, of the members with a fresh report. */
  measuredNodes(): Map<string, MeasuredNode> {
    const nodes = new Map<string, MeasuredNode>();
    this.#members.forEach((n, k) => {
      if (n.report && !Number.isNaN(this.#nodeLoad[k])) nodes.set(n.name, { load: this.#nodeLoad[k], devices: Math.max(1, n.report.devices) });
    });
    return nodes;
  }

  /** Model -> devices its requests need at full batches (rate over capacity), where its nodes report both. */
  needs(): Map<string, number> {
    const needs = new Map<string, number>();
    for (const at of this.ran) if (this.rate[at] > 0 && this.capacity[at] > 0) needs.set(this.#names[at], this.rate[at] / this.capacity[at]);
    return needs;
  }

  /** Zeroed for a catalog of `size` models. */
  #reset(size: number): void {
    if (this.#ranMark.length !== size) {
      [this.bytes, this.load, this.rate, this.capacity] = [new Float64Array(size), new Float64Array(size), new Float64Array(size), new Float64Array(size)];
      this.#ranMark = new Uint8Array(size);
    } else for (const a of [this.bytes, this.load, this.rate, this.capacity, this.#ranMark]) a.fill(0);
    this.#outside.clear();
    this.#resident.length = 0;
    this.#serving.length = 0;
    this.#servingLoad.length = 0;
    this.#nodeLoad.length = 0;
  }
}

/** `m.serving` (and its loads) ordered most load first, ties by name: in place, as most hold two or three. */
export function mostLoadFirst(m: ReportedModel): void {
  const serving = m.serving;
  const load = m.servingLoad;
  if (!serving || !load) return;
  for (let i = 1; i < serving.length; i++) {
    const id = serving[i];
    const l = load[i];
    let j = i - 1;
    for (; j >= 0 && (load[j] < l || (load[j] === l && serving[j] > id)); j--) {
      serving[j + 1] = serving[j];
      load[j + 1] = load[j];
    }
    serving[j + 1] = id;
    load[j + 1] = l;
  }
}

/** What `m` ran on node `id` over the window (0: nothing). */
export function loadOn(m: ReportedModel, id: string): number {
  const at = m.serving?.indexOf(id) ?? -1;
  return at < 0 ? 0 : m.servingLoad![at];
}

/**
 * Whether every one of `nodes` ran at least `least` of its part of `m`'s load over the window: its
 * share of it where its requests are split by `shares` (one per node, beside `nodes`; they need not
 * sum to 1), else the even split. Against the even split, a node the shares give a tenth of it (the
 * floor, fleet-shares.ts) read as one another gateway had left, and the model was placed again from
 * the reports at check after check (bench/fleet-sim.js: most of the heavy models' quiet moves).
 */
export function carriesItsParts(m: ReportedModel, nodes: readonly string[], shares: readonly number[] | undefined, least: number): boolean {
  const total = shares ? shares.reduce((a, b) => a + b, 0) : nodes.length;
  return nodes.every((id, i) => loadOn(m, id) >= least * m.load * (shares ? shares[i] : 1) / total);
}

/**
 * Whether `m` ran over the window on a node not of `nodes` with at least `least` of a part of its
 * load (the even split over `nodes`): another gateway places it there. Loads alone do not show it
 * where its nodes are saturated: every node then reads busy, its own ones and the others' alike
 * (bench/fleet-sim.js --hot 10 with popularity drifting: three gateways gave the new hot model 12
 * nodes each, 16 between them, and held them apart for good, each node reading 1.0).
 */
export function runsElsewhere(m: ReportedModel, nodes: readonly string[], least: number): boolean {
  const serving = m.serving;
  if (!serving || serving.length === 0) return false;
  const part = least * m.load / nodes.length;
  for (let i = 0; i < serving.length; i++) if (!nodes.includes(serving[i]) && m.servingLoad![i] >= part) return true;
  return false;
}
