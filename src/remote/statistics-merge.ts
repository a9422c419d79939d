/**
 * ModelStatistics from several nodes as one: counts and nanoseconds add up
 * (uint64s travel as decimal strings, so they are added as BigInts),
 * batch_stats add up per batch size, last_inference is the latest, and one
 * entry per model and version comes out, as from a single server.
 */

type Stats = Record<string, unknown>;

const isCount = (v: unknown): v is string => typeof v === 'string' && /^\d+$/.test(v);

function sum(a: unknown, b: unknown, key: string): unknown {
  if (a === undefined || a === null) return b;
  if (b === undefined || b === null) return a;
  if (key === 'name' || key === 'version') return a;
  if (key === 'last_inference') return BigInt(a as string) >= BigInt(b as string) ? a : b;
  if (isCount(a) && isCount(b)) return String(BigInt(a) + BigInt(b));
  if (key === 'batch_stats' && Array.isArray(a) && Array.isArray(b)) {
    const bySize = new Map<string, Stats>();
    for (const s of [...a, ...b] as Stats[]) {
      const size = String(s.batch_size);
      const seen = bySize.get(size);
      bySize.set(size, seen ? (sum(seen, s, '') as Stats) : s);
    }
    return [...bySize.values()].sort((x, y) => Number(x.batch_size) - Number(y.batch_size));
  }
  if (Array.isArray(a) && Array.isArray(b)) return [...a, ...b];
  if (typeof a === 'object' && typeof b === 'object') {
    const out: Stats = {};
    for (const k of new Set([...Object.keys(a as Stats), ...Object.keys(b as Stats)])) {
      out[k] = k === 'batch_size' ? (a as Stats)[k] ?? (b as Stats)[k] : sum((a as Stats)[k], (b as Stats)[k], k);
    }
    return out;
  }
  return a;
}

/** One entry per model and version, each the sum of every node's entry for it. */
export function mergeStatistics(entries: readonly Stats[]): Stats[] {
  const merged = new Map<string, Stats>();
  for (const e of entries) {
    const key = `${e.name}\u0000${e.version}`;
    const seen = merged.get(key);
    merged.set(key, seen ? (sum(seen, e, '') as Stats) : e);
  }
  return [...merged.values()];
}
