/**
 * The versioned report a node gives pooled gateways (ModelControlStatus with `versioned`;
 * proto/control.proto): its active models' rows, published once per window, each remembering the
 * version it last changed at, so that a gateway that names the version it holds gets only what
 * changed since. At 64 nodes of ~300 active models each, reading every row at every check was most
 * of a pooled gateway's CPU per check (bench/gateway-checks.js); a model whose row did not change
 * (resident and idle, or running at the same figures) is not sent again.
 *
 * A row changes when its key does (the fields placement reads: the caller says which), so two
 * rows alike in those are one version, whatever else differs. Versions start at the process's
 * start time in milliseconds and grow by one per publish that changed something: another process's
 * versions (one restarted at the same address) are below this one's first, and answered in full.
 */

export interface VersionedAnswer<Row> {
  version: number;
  /** true: `rows` are only those changed since the version asked about, `gone` the names that left. */
  changesOnly: boolean;
  rows: Row[];
  gone: string[];
}

/**
 * Names that left the report kept at most: past it the oldest are forgotten and a gateway whose
 * version is older than them is answered in full (one 10,000-model report's worth).
 */
const MAX_GONE = 10_000;

export class ReportVersions<Row> {
  #version: number;
  /** Versions below this are answered in full: the names that left before it are forgotten. */
  #floor: number;
  readonly #rows = new Map<string, { row: Row; key: string; version: number }>();
  /** Name -> the version it left at, oldest first. */
  readonly #gone = new Map<string, number>();

  constructor(firstVersion: number) {
    this.#version = firstVersion;
    this.#floor = firstVersion;
  }

  get version(): number {
    return this.#version;
  }

  /**
   * The report now is `rows` (name -> row): a row whose key differs from the one published, or new,
   * takes the next version, and so does a name no longer there. Nothing changed: the version stays.
   */
  publish(rows: ReadonlyMap<string, Row>, keyOf: (row: Row) => string): void {
    const next = this.#version + 1;
    let changed = false;
    for (const [name, row] of rows) {
      const key = keyOf(row);
      const was = this.#rows.get(name);
      // The same figures: the row as published stays, so a whole answer and a change agree.
      if (was?.key === key) continue;
      this.#rows.set(name, { row, key, version: next });
      this.#gone.delete(name);
      changed = true;
    }
    for (const name of this.#rows.keys()) {
      if (rows.has(name)) continue;
      this.#rows.delete(name);
      this.#gone.set(name, next);
      changed = true;
    }
    if (changed) this.#version = next;
    for (const [name, version] of this.#gone) {
      if (this.#gone.size <= MAX_GONE) break;
      this.#gone.delete(name);
      this.#floor = version;
    }
  }

  /** The report since `since` (a version an earlier answer gave), or whole when it cannot say what changed since. */
  answer(since: number): VersionedAnswer<Row> {
    if (!(since >= this.#floor && since <= this.#version)) {
      return { version: this.#version, changesOnly: false, rows: [...this.#rows.values()].map((r) => r.row), gone: [] };
    }
    const rows: Row[] = [];
    for (const r of this.#rows.values()) if (r.version > since) rows.push(r.row);
    const gone: string[] = [];
    for (const [name, version] of this.#gone) if (version > since) gone.push(name);
    return { version: this.#version, changesOnly: true, rows, gone };
  }
}
