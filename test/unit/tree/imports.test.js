// The floors of src/: every import of every module, read from the source, against the list of
// which folder may import which in docs/architecture.md ("Folders import downwards only"). That
// list is the rule: this test reads it from the page, so the page and the check cannot drift
// apart, and holds the page itself to what the house needs (shared imports nothing of ours,
// protocol, config, routing and bundle only shared, actors neither node nor cli, only main.ts the
// cli). No module may sit on an import circle either, type-only imports included.
import path from 'node:path';
import test from 'ava';
import { filesUnder, readSource, relativeImports } from '../../helpers/source-tree.js';

const SOURCES = filesUnder('src', /\.(ts|mts|mjs)$/).filter((f) => !f.endsWith('.d.ts'));

/** The floor a source file stands on: its folder under src/, or the file itself at the top. */
const floorOf = (/** @type {string} */ file) => {
  const parts = path.relative('src', file).split(path.sep);
  return parts.length === 1 ? parts[0] : parts[0];
};

/**
 * docs/architecture.md's arrows: the block after "Folders import downwards only", one line per
 * floor (or floors, comma-separated) `-> what it may import` ("nothing" for none).
 * @returns {Map<string, Set<string>>}
 */
function floorsOfThePage() {
  const page = readSource('docs/architecture.md');
  const at = page.indexOf('Folders import downwards only');
  if (at < 0) throw new Error('docs/architecture.md has no "Folders import downwards only" list');
  const block = page.slice(at).split('```')[1];
  /** @type {Map<string, Set<string>>} */
  const allowed = new Map();
  for (const line of block.split('\n')) {
    const m = /^\s*([\w.,\s]+?)\s*->\s*([\w.,\s]+?)\s*(\(.*)?$/.exec(line);
    if (!m) continue;
    const targets = m[2].trim() === 'nothing' ? [] : m[2].split(',').map((s) => s.trim());
    for (const floor of m[1].split(',').map((s) => s.trim())) allowed.set(floor, new Set(targets));
  }
  return allowed;
}

const allowed = floorsOfThePage();

test('the page\'s list holds what the house needs: shared at the bottom, the pure floors on shared only, cli imported by main.ts alone', (t) => {
  t.deepEqual([...(allowed.get('shared') ?? ['missing'])], [], 'shared imports nothing of ours');
  for (const floor of ['protocol', 'config', 'routing', 'bundle']) t.deepEqual([...(allowed.get(floor) ?? ['missing'])], ['shared'], `${floor} imports only shared`);
  const actors = allowed.get('actors') ?? new Set(['missing']);
  t.false(actors.has('node') || actors.has('cli') || actors.has('missing'), 'actors import neither node/ nor cli/');
  const intoCli = [...allowed].filter(([floor, targets]) => targets.has('cli') && floor !== 'main.ts').map(([floor]) => floor);
  t.deepEqual(intoCli, [], 'nothing but main.ts imports cli/');
  const floors = new Set(SOURCES.map(floorOf));
  t.deepEqual([...floors].filter((f) => !allowed.has(f)), [], 'every floor of src/ is on the page');
});

test('every import of src/ runs down the page\'s list, and every arrow on the list is used', (t) => {
  const wrong = [];
  /** @type {Set<string>} */
  const used = new Set();
  for (const file of SOURCES) {
    const from = floorOf(file);
    for (const { target, line } of relativeImports(file)) {
      const to = floorOf(target);
      if (to === from) continue;
      used.add(`${from} -> ${to}`);
      if (!allowed.get(from)?.has(to)) wrong.push(`${file}:${line} (${from}) imports ${target} (${to})`);
    }
  }
  t.deepEqual(wrong, [], 'imports against the floors');
  const unused = [...allowed].flatMap(([from, targets]) => [...targets].filter((to) => !used.has(`${from} -> ${to}`)).map((to) => `${from} -> ${to}`));
  t.deepEqual(unused, [], 'arrows on the page that no import uses: take them off, so the page says what is');
});

test('no module of src/ is on an import circle (type-only imports count)', (t) => {
  /** @type {Map<string, string[]>} */
  const graph = new Map(SOURCES.map((f) => [f, relativeImports(f).map((i) => i.target).filter((target) => SOURCES.includes(target))]));
  // Tarjan's strongly connected components: any with more than one module (or a module importing itself) is a circle.
  let index = 0;
  /** @type {Map<string, number>} */
  const order = new Map();
  /** @type {Map<string, number>} */
  const low = new Map();
  /** @type {string[]} */
  const stack = [];
  const onStack = new Set();
  /** @type {string[][]} */
  const circles = [];
  /** @param {string} v */
  const visit = (v) => {
    order.set(v, index);
    low.set(v, index++);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!order.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v) ?? 0, low.get(w) ?? 0));
      } else if (onStack.has(w)) {
        low.set(v, Math.min(low.get(v) ?? 0, order.get(w) ?? 0));
      }
    }
    if (low.get(v) !== order.get(v)) return;
    const component = [];
    let w;
    do {
      w = /** @type {string} */ (stack.pop());
      onStack.delete(w);
      component.push(w);
    } while (w !== v);
    if (component.length > 1 || (graph.get(v) ?? []).includes(v)) circles.push(component.sort());
  };
  for (const v of graph.keys()) if (!order.has(v)) visit(v);
  t.deepEqual(circles, []);
  t.true(SOURCES.length > 100, `read ${SOURCES.length} modules`);
});

/** docs/architecture.md's edge files: the block after "The protocol stays at the edges", one line `edges: a, b`. */
function edgesOfThePage() {
  const page = readSource('docs/architecture.md');
  const at = page.indexOf('The protocol stays at the edges');
  if (at < 0) throw new Error('docs/architecture.md has no "The protocol stays at the edges" list');
  const m = /edges:\s*(.+)/.exec(page.slice(at).split('```')[1]);
  if (!m) throw new Error('the edges block has no "edges:" line');
  return new Set(m[1].split(',').map((s) => path.join('src', s.trim())));
}

test('the protocol is imported in node/ by the page\'s edge files only, and the pipeline reaches none of it', (t) => {
  const edges = edgesOfThePage();
  const intoProtocol = (/** @type {string} */ file) => relativeImports(file).some(({ target }) => floorOf(target) === 'protocol');
  const nodeFiles = SOURCES.filter((f) => floorOf(f) === 'node');
  t.deepEqual(nodeFiles.filter((f) => intoProtocol(f) && !edges.has(f)), [], 'node/ files importing protocol/ that are not edges');
  t.deepEqual([...edges].filter((f) => !nodeFiles.includes(f) || !intoProtocol(f)), [], 'edges on the page that are gone or import no protocol: take them off');
  // Everything the pipeline imports, transitively, type-only imports included.
  // The path itself (shared/request-path.ts) and its rooms, every thread's.
  const reached = new Set(['src/shared/request-path.ts', 'src/actors/rooms/rooms.ts']);
  const queue = [...reached];
  while (queue.length) {
    for (const { target } of relativeImports(/** @type {string} */ (queue.pop()))) {
      if (!reached.has(target) && SOURCES.includes(target)) {
        reached.add(target);
        queue.push(target);
      }
    }
  }
  t.deepEqual([...reached].filter((f) => floorOf(f) === 'protocol' || edges.has(f)), [], 'the pipeline reaches the protocol through these');
  t.true(reached.has('src/shared/data-plane.ts'), 'the pipeline speaks the data plane');
});
