// The walk of a gRPC request that docs/architecture.md writes down ("A request's walk, file by file"),
// read from the page: what test/unit/tree/request-walk.test.js holds to the imports and
// test/integration/request-walk.test.js to the files a request is measured to run through.
import path from 'node:path';
import { filesUnder, readSource, relativeImports } from './source-tree.js';

export const SOURCES = filesUnder('src', /\.ts$/).filter((f) => !f.endsWith('.d.ts'));
/** Where the walk runs: the edge thread that terminates gRPC, and the device thread it crosses to. */
export const THREADS = ['src/actors/edge/worker.ts', 'src/actors/device/worker.ts'];

/** The section's text: from its heading to the next heading of its level or above. */
export function walkSection() {
  const page = readSource('docs/architecture.md');
  const at = page.indexOf('### A request\'s walk, file by file');
  if (at < 0) throw new Error('docs/architecture.md has no "A request\'s walk, file by file" section');
  const rest = page.slice(at + 4);
  const end = rest.search(/\n#{2,3} /);
  return end < 0 ? rest : rest.slice(0, end);
}

/**
 * The files the walk's numbered steps name, as repository paths: `folder/name.ts` under src/, a bare
 * `name.ts` in the folder of the last file named with its folder (else the one file of that name).
 * @param {string} section
 */
export function walkFiles(section) {
  const steps = section.slice(0, section.indexOf('\nFiles named'));
  /** @type {string[]} */
  const files = [];
  /** @type {string[]} */
  const unresolved = [];
  let folder = 'src';
  for (const [, token] of steps.matchAll(/`([\w/.-]+\.ts)`/g)) {
    let file = token.includes('/') ? path.join('src', token) : path.join(folder, token);
    if (!SOURCES.includes(file)) {
      const named = SOURCES.filter((f) => path.basename(f) === token);
      if (named.length !== 1) {
        unresolved.push(token);
        continue;
      }
      file = named[0];
    }
    if (token.includes('/')) folder = path.dirname(file);
    files.push(file);
  }
  return { files: [...new Set(files)], unresolved };
}

/**
 * Every module reached by imports from `roots`.
 * @param {string[]} roots
 */
export function reached(roots) {
  const seen = new Set(roots);
  const queue = [...roots];
  while (queue.length > 0) {
    for (const { target } of relativeImports(/** @type {string} */ (queue.pop()))) {
      if (!seen.has(target) && SOURCES.includes(target)) {
        seen.add(target);
        queue.push(target);
      }
    }
  }
  return seen;
}
