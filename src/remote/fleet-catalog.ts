/**
 * The models a pooled gateway's members serve, as one list: the union of the members' lists, kept
 * by counting how many lists name each model, so that a member whose list changed (a node
 * restarted and its index read anew, a node joining or leaving) costs its own list, not every
 * member's: at 64 nodes x 10,000 models, rebuilding the union read 640,000 names at every such
 * check (bench/gateway-checks.js, a node's restart). Nodes of one repository share one list object
 * (node-status.ts keeps a list per digest), which is counted once per member all the same.
 *
 * Sorted by name, so that every gateway lists the catalog alike whatever order its members came in
 * (placement adds the models' loads in this order).
 */
export class FleetCatalog {
  /** Member name -> the list of it counted. */
  readonly #counted = new Map<string, readonly string[]>();
  /** Model -> how many counted lists name it. */
  readonly #counts = new Map<string, number>();
  #names: readonly string[] = [];
  #order: ReadonlyMap<string, number> = new Map();

  /** Every model some member serves, sorted. */
  get names(): readonly string[] {
    return this.#names;
  }

  /** Each model's index in `names`. */
  get order(): ReadonlyMap<string, number> {
    return this.#order;
  }

  /**
   * Count the members' lists (member name -> its list) in place of those counted before: what is
   * new to the catalog and what left it.
   */
  update(lists: ReadonlyMap<string, readonly string[]>): { added: string[]; removed: string[] } {
    const touched = new Set<string>();
    for (const [member, list] of this.#counted) {
      if (lists.get(member) === list) continue;
      this.#count(list, -1, touched);
      this.#counted.delete(member);
    }
    for (const [member, list] of lists) {
      if (this.#counted.has(member)) continue;
      this.#count(list, 1, touched);
      this.#counted.set(member, list);
    }
    const added: string[] = [];
    const removed: string[] = [];
    for (const name of touched) {
      const serving = (this.#counts.get(name) ?? 0) > 0;
      if (!serving) this.#counts.delete(name);
      if (serving && !this.#order.has(name)) added.push(name);
      else if (!serving && this.#order.has(name)) removed.push(name);
    }
    if (added.length > 0 || removed.length > 0) {
      this.#names = [...this.#counts.keys()].sort();
      this.#order = new Map(this.#names.map((name, i) => [name, i]));
    }
    return { added, removed };
  }

  #count(list: readonly string[], by: 1 | -1, touched: Set<string>): void {
    for (const name of list) {
      this.#counts.set(name, (this.#counts.get(name) ?? 0) + by);
      touched.add(name);
    }
  }
}
