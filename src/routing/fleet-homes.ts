/**
 * Each model's home in a pooled fleet, bounded: where an idle model goes, where a light one runs
 * unless its weights are elsewhere, and what a heavy one tries first (routing/fleet-placement.ts).
 *
 * Rendezvous hashing alone spreads the catalog evenly by count, not by bytes. In a fleet whose
 * catalog fills its memory, the nodes that drew more bytes of home models than their budget holds
 * evicted and loaded weights all day while others had room (bench/fleet-sim.js, 64 x 10,000: the
 * busiest eight nodes 1,100-2,000 weight loads in 180 s against a median of ~510; a node's loads
 * followed its home models' bytes over its budget, 1.02-1.21x on the busiest sixteen). So each
 * model's home is the first node of its ranking whose homes stay within (1 + HOME_BYTES_SLACK) of
 * its share of the catalog's bytes (by weight budget, as the ranking weighs it) and within
 * (1 + HOME_COUNT_SLACK) of its share of the catalog's count. The count matters as much: bounded
 * in bytes alone, the nodes that drew small models took the overflow and, with it, more light
 * models' load than the rest (the simulator's busiest node over the mean: up to 1.22 in a 5 s
 * window). A model no node has room for goes to the node with the most room for bytes.
 *
 * Models are taken in name order (the catalog's), so every gateway given the same catalog, bytes
 * and nodes finds the same homes. Most models keep their hashed first node; a node joining or
 * leaving, or a model added, changes the homes it takes or gives and some of those whose first
 * choice was full (a node leaving moved 2.8% of the simulator's catalog instead of 1.6%).
 */
/** How far over its share of the catalog's bytes a node's homes may go. */
export const HOME_BYTES_SLACK = 0.02;
/** How far over its share of the catalog's count. */
export const HOME_COUNT_SLACK = 0.05;

/**
 * The catalog homes are bounded by: every model's name (sorted) and its weight bytes (absent or 0:
 * unknown, counted by count alone).
 */
export interface HomeCatalog {
  names: readonly string[];
  bytes: ReadonlyMap<string, number>;
}

/**
 * Each model's home among `nodes`: `weights` each node's (its share of the catalog), `scores(name)`
 * each node's rendezvous score for the model (higher ranks first; ties by id). `kept`: homes to
 * keep where they are among `nodes` (the whole fleet's, for the nodes but those given over to a
 * model): only the models whose home is not among them are placed anew, as hashing would, so that
 * a model's home is the same in both wherever it can be (placement reads both).
 */
export function boundedHomes<Node extends { id: string }>(catalog: HomeCatalog, nodes: readonly Node[], weights: readonly number[], scores: (name: string) => Float64Array, kept?: ReadonlyMap<string, { id: string }>): Map<string, Node> {
  const homes = new Map<string, Node>();
  if (nodes.length === 0) return homes;
  let totalBytes = 0;
  for (const name of catalog.names) totalBytes += catalog.bytes.get(name) ?? 0;
  const totalWeight = weights.reduce((s, w) => s + w, 0);
  const bytesCap = weights.map((w) => (1 + HOME_BYTES_SLACK) * totalBytes * (w / totalWeight));
  // At least one model a node, or a catalog smaller than the fleet would fit nowhere.
  const countCap = weights.map((w) => Math.max(1, (1 + HOME_COUNT_SLACK) * catalog.names.length * (w / totalWeight)));
  const bytes = new Float64Array(nodes.length);
  const count = new Float64Array(nodes.length);
  const tried = new Uint8Array(nodes.length);
  const index = new Map(nodes.map((n, i) => [n.id, i]));
  const keptAt = (name: string) => index.get(kept?.get(name)?.id ?? '') ?? -1;
  if (kept) {
    for (const name of catalog.names) {
      const at = keptAt(name);
      if (at < 0) continue;
      bytes[at] += catalog.bytes.get(name) ?? 0;
      count[at] += 1;
      homes.set(name, nodes[at]);
    }
  }
  /** Whether node i ranks before node j for scores s. */
  const before = (s: Float64Array, i: number, j: number) => s[i] > s[j] || (s[i] === s[j] && nodes[i].id < nodes[j].id);
  for (const name of catalog.names) {
    if (kept && keptAt(name) >= 0) continue;
    const b = catalog.bytes.get(name) ?? 0;
    const s = scores(name);
    // The ranking walked best first, one node at a time: most models take their first node, so a
    // whole sort per model (10,000 x 64 nodes at every membership change) is not paid.
    tried.fill(0);
    let at = -1;
    for (let k = 0; k < nodes.length && at < 0; k++) {
      let best = -1;
      for (let i = 0; i < nodes.length; i++) if (!tried[i] && (best < 0 || before(s, i, best))) best = i;
      tried[best] = 1;
      if (bytes[best] + b <= bytesCap[best] + 1e-6 && count[best] + 1 <= countCap[best] + 1e-9) at = best;
    }
    // No room on any node (a model over every share, or the bounds filled): the most room for
    // bytes, in ranking order on ties.
    if (at < 0) {
      const room = (i: number) => bytes[i] / (bytesCap[i] || 1);
      for (let i = 0; i < nodes.length; i++) if (at < 0 || room(i) < room(at) - 1e-12 || (Math.abs(room(i) - room(at)) <= 1e-12 && before(s, i, at))) at = i;
    }
    bytes[at] += b;
    count[at] += 1;
    homes.set(name, nodes[at]);
  }
  return homes;
}
