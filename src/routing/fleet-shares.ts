/**
 * How a pooled gateway splits a model's requests between the nodes it is placed on: unevenly, so
 * that the nodes' measured loads come out as even as the models on several nodes can make them.
 *
 * Placement (fleet-placement.ts) puts whole models on nodes, and each node's load is a sum of a few
 * heavy models and many light ones, each on one node: lumpy, so the busiest node of the simulator's
 * 64 stood 1.17-1.22x the mean in its quiet 5 s windows (1.15 asked) however the bounds were set
 * (docs/performance.md). Split evenly, a model on two nodes only halves its lump; split by shares,
 * it is liquid: poured over its nodes to the lowest level, it fills the nodes the lumps left low.
 *
 * Pure, and from the reports alone: every gateway fed the same reports gives the same shares. Each
 * node's load is what it measured over the last window; what the models on several nodes ran there
 * is taken out of it (it moves with their shares) and their loads poured back over their nodes,
 * heaviest first, a few times round (each pour sees the others' levels). A node without a fresh
 * report has no level to fill: its part of each model stays the even split.
 */

/**
 * A model on several nodes, or on one (its load counts there, wherever it ran: see splitShares): its
 * load over the fleet and what it ran on each node last window.
 */
export interface SplitModel {
  name: string;
  /** The nodes its requests go to, in the routes' order. */
  nodes: readonly string[];
  /** Its measured load, device-seconds per second over the whole fleet. */
  load: number;
  /** Where it ran over the last window and its load there, pairwise (nodes it has left included). */
  ranOn: readonly string[];
  ranLoad: readonly number[];
}

/** A node's measured load over the last window and its devices (what one level of load means there). */
export interface MeasuredNode {
  load: number;
  devices: number;
}

/**
 * Of each model's load, the part every node of it keeps whatever the levels: enough that a replica
 * stays warm (its weights resident, its costs learned) for the next check, which may want it.
 */
export const SHARE_FLOOR = 0.1;

/** Rounds of pouring: each model poured again once the others have been (three or four settle it). */
const PASSES = 4;

/** Shares are kept on this grid, so that a few percent of noise in the loads rarely changes them. */
const SHARE_GRID = 256;

/**
 * Each model's shares (one per node of it, in its order, summing to about 1), by name. `nodes`: the nodes
 * with a fresh measured load; a model's part on any other node stays the even split.
 */
export function splitShares(models: readonly SplitModel[], nodes: ReadonlyMap<string, MeasuredNode>): Map<string, number[]> {
  // What every node carries of the models that do not split: its measured load less theirs.
  const level = new Map<string, number>();
  for (const [id, n] of nodes) level.set(id, n.load);
  const splitting = models.filter((m) => m.nodes.length > 1 && m.load > 0).sort((a, b) => b.load - a.load || (a.name < b.name ? -1 : 1));
  for (const m of splitting) takeOffWhereRan(m, level);
  // A model on one node counts where it is routed now, not where it ran (nothing changes where it ran
  // there alone): one moved since the window will load its new node and leave its old one, and the
  // levels poured to should say so. Read from the window, its new node stood low, the split models'
  // shares filled it, then its load arrived too (bench/fleet-sim.js: worst quiet windows of seeds).
  for (const m of models) if (m.nodes.length === 1 && m.load > 0) moveLevel(m, level);
  // Poured: each model's load over its nodes, first evenly, then to the lowest levels.
  const parts = new Map(splitting.map((m) => [m.name, m.nodes.map(() => m.load / m.nodes.length)]));
  for (const m of splitting) m.nodes.forEach((id, i) => level.has(id) && level.set(id, level.get(id)! + parts.get(m.name)![i]));
  for (let pass = 0; pass < PASSES; pass++) {
    for (const m of splitting) {
      const part = parts.get(m.name)!;
      m.nodes.forEach((id, i) => level.has(id) && level.set(id, level.get(id)! - part[i]));
      pour(m, part, level, nodes);
      m.nodes.forEach((id, i) => level.has(id) && level.set(id, level.get(id)! + part[i]));
    }
  }
  const shares = new Map<string, number[]>();
  for (const m of splitting) shares.set(m.name, onGrid(parts.get(m.name)!.map((p) => p / m.load)));
  return shares;
}

/** `m`'s load taken from the levels of the nodes it ran on and put on its one node (no-op where it ran there alone). */
function moveLevel(m: SplitModel, level: Map<string, number>): void {
  const to = m.nodes[0];
  if (m.ranOn.length === 1 && m.ranOn[0] === to) return;
  takeOffWhereRan(m, level);
  if (level.has(to)) level.set(to, level.get(to)! + m.load);
}

/** What `m` ran over the window taken off the levels of the nodes it ran on. */
function takeOffWhereRan(m: SplitModel, level: Map<string, number>): void {
  m.ranOn.forEach((id, i) => level.has(id) && level.set(id, level.get(id)! - m.ranLoad[i]));
}

/**
 * `m`'s load over its nodes (in `part`, in place): the even split on nodes with no level, the floor
 * on every node with one, the rest to the lowest levels per device (water-filling: every node it
 * reaches ends at one level, the others above it).
 */
function pour(m: SplitModel, part: number[], level: ReadonlyMap<string, number>, nodes: ReadonlyMap<string, MeasuredNode>): void {
  const even = m.load / m.nodes.length;
  const floor = SHARE_FLOOR * even;
  const open: { i: number; base: number; devices: number }[] = [];
  let left = m.load;
  m.nodes.forEach((id, i) => {
    const n = nodes.get(id);
    if (!n) {
      part[i] = even;
      left -= even;
      return;
    }
    part[i] = floor;
    left -= floor;
    const devices = Math.max(1, n.devices);
    open.push({ i, base: (level.get(id)! + floor) / devices, devices });
  });
  if (open.length === 0 || left <= 0) return;
  open.sort((a, b) => a.base - b.base);
  // The level h where the nodes under it take exactly what is left: the sum of devices x (h - base)
  // over the k lowest is D h - S, D their devices and S their devices x bases.
  let [d, s, h] = [0, 0, open[0].base];
  for (let k = 0; k < open.length; k++) {
    d += open[k].devices;
    s += open[k].devices * open[k].base;
    h = (left + s) / d;
    if (k + 1 === open.length || h <= open[k + 1].base) break;
  }
  for (const o of open) if (o.base < h) part[o.i] += (h - o.base) * o.devices;
}

/**
 * Shares on a grid of 1/SHARE_GRID, none under one step (every node of a model keeps some of its
 * requests): they sum to 1 within a few steps, and a router takes them as relative weights.
 */
function onGrid(shares: number[]): number[] {
  return shares.map((s) => Math.max(1, Math.round(s * SHARE_GRID)) / SHARE_GRID);
}
