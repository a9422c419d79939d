/**
 * Prometheus text from several processes as one exposition: the gateway's own
 * families, and each node's with a `node="host:port"` label on every sample.
 * A family that several sources export (process_cpu_seconds_total, say) is
 * written once, HELP and TYPE first, with every source's samples under it, as
 * the text format requires.
 */

interface Family {
  help?: string;
  type?: string;
  samples: string[];
}

/** Add `node="..."` to a sample line's labels. */
function labelled(sample: string, node: string): string {
  const label = `node="${node.replace(/["\\]/g, '\\$&')}"`;
  const brace = sample.indexOf('{');
  const space = sample.indexOf(' ');
  if (brace >= 0 && brace < space) {
    const close = sample.indexOf('}', brace);
    const inner = sample.slice(brace + 1, close);
    return `${sample.slice(0, brace + 1)}${inner ? `${inner},` : ''}${label}${sample.slice(close)}`;
  }
  return `${sample.slice(0, space)}{${label}}${sample.slice(space)}`;
}

/** Merge expositions: `sources` in order, each with the node it came from (null: this process, unlabelled). */
export function mergeMetrics(sources: readonly { node: string | null; text: string }[]): string {
  const families = new Map<string, Family>();
  const family = (name: string) => {
    let f = families.get(name);
    if (!f) families.set(name, (f = { samples: [] }));
    return f;
  };
  for (const { node, text } of sources) {
    let current: Family | undefined;
    for (const line of text.split('\n')) {
      if (line === '') continue;
      const meta = /^# (HELP|TYPE) (\S+) (.*)$/.exec(line);
      if (meta) {
        current = family(meta[2]);
        if (meta[1] === 'HELP') current.help ??= meta[3];
        else current.type ??= meta[3];
        continue;
      }
      if (line.startsWith('#')) continue;
      // Samples belong to the family declared above them (histogram _bucket/_sum/_count included).
      const name = /^[^{\s]+/.exec(line)?.[0] ?? line;
      (current ?? family(name)).samples.push(node ? labelled(line, node) : line);
    }
  }
  const out: string[] = [];
  for (const [name, f] of families) {
    if (f.help !== undefined) out.push(`# HELP ${name} ${f.help}`);
    if (f.type !== undefined) out.push(`# TYPE ${name} ${f.type}`);
    out.push(...f.samples);
  }
  return `${out.join('\n')}\n`;
}
