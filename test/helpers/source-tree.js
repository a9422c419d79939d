// Reading the repository's own files for the checks of its shape (test/unit/tree/): the files of
// a folder, their comments apart from their code, and the imports of a module.
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { ROOT } from './server.js';

/** Folders never read: what is installed, built or fetched rather than written here. */
const SKIPPED = new Set(['node_modules', 'dist', 'build', 'ort-include', '.git', '.toolchain', '.venv', '.stowage', '__pycache__', '.pytest_cache']);

/**
 * Every file under `dir` (relative to the repository) whose name matches `pattern`, as paths
 * relative to the repository, sorted.
 * @param {string} dir
 * @param {RegExp} pattern
 * @returns {string[]}
 */
export function filesUnder(dir, pattern) {
  /** @type {string[]} */
  const out = [];
  /** @param {string} at */
  const walk = (at) => {
    for (const entry of readdirSync(path.join(ROOT, at), { withFileTypes: true })) {
      const rel = path.join(at, entry.name);
      if (entry.isDirectory()) {
        if (!SKIPPED.has(entry.name)) walk(rel);
      } else if (pattern.test(entry.name)) {
        out.push(rel);
      }
    }
  };
  walk(dir);
  return out.sort();
}

/** @param {string} file relative to the repository */
export const readSource = (file) => readFileSync(path.join(ROOT, file), 'utf8');

/**
 * `source` split into its code and its comments (JavaScript, TypeScript and C++ alike: `//` and
 * `/* ... *\/`), string and template literals kept whole in the code, so a `//` inside a string is
 * not a comment. Both come back with the same line breaks as the source, so line numbers hold.
 * @param {string} source
 * @returns {{ code: string, comments: string }}
 */
export function splitComments(source) {
  let code = '';
  let comments = '';
  let i = 0;
  /** @param {string} s */
  const blank = (s) => s.replace(/[^\n]/g, ' ');
  while (i < source.length) {
    const c = source[i];
    const next = source[i + 1];
    if (c === '/' && next === '/') {
      const end = source.indexOf('\n', i);
      const stop = end < 0 ? source.length : end;
      comments += source.slice(i, stop);
      code += blank(source.slice(i, stop));
      i = stop;
    } else if (c === '/' && next === '*') {
      const end = source.indexOf('*/', i + 2);
      const stop = end < 0 ? source.length : end + 2;
      comments += source.slice(i, stop);
      code += blank(source.slice(i, stop));
      i = stop;
    } else if (c === '/' && /[(,=:[!&|?{};]$|^$/.test(code.trimEnd().slice(-1))) {
      // A regular expression literal (where an expression starts): its quotes are not strings.
      let j = i + 1;
      let inClass = false;
      while (j < source.length && source[j] !== '\n' && (inClass || source[j] !== '/')) {
        if (source[j] === '\\') j++;
        else if (source[j] === '[') inClass = true;
        else if (source[j] === ']') inClass = false;
        j++;
      }
      const literal = source.slice(i, j + 1);
      code += literal;
      comments += blank(literal);
      i = j + 1;
    } else if (c === '"' || c === '\'' || c === '`') {
      let j = i + 1;
      while (j < source.length && source[j] !== c && !(c !== '`' && source[j] === '\n')) j += source[j] === '\\' ? 2 : 1;
      const literal = source.slice(i, j + 1);
      code += literal;
      comments += blank(literal);
      i = j + 1;
    } else {
      code += c;
      comments += c === '\n' ? '\n' : ' ';
      i++;
    }
  }
  return { code, comments };
}

/**
 * The modules `file` (a TypeScript or JavaScript module relative to the repository) imports by a
 * relative path, resolved to repository paths of their sources (`.js` read as the `.ts` it is built
 * from): static imports and re-exports, side-effect imports and `import()`.
 * @param {string} file
 * @returns {{ target: string, line: number, typeOnly: boolean }[]}
 */
export function relativeImports(file) {
  const { code } = splitComments(readSource(file));
  const found = [];
  const patterns = [
    /\b(import|export)(\s+type)?\s+[^'";]*?\bfrom\s*(['"])(\.[^'"]*)\3/g,
    /\bimport\s*(['"])(\.[^'"]*)\1/g,
    /\bimport\s*\(\s*(['"])(\.[^'"]*)\1\s*\)/g,
  ];
  for (const [k, pattern] of patterns.entries()) {
    for (const m of code.matchAll(pattern)) {
      const spec = k === 0 ? m[4] : m[2];
      const typeOnly = k === 0 && Boolean(m[2]);
      let target = path.normalize(path.join(path.dirname(file), spec));
      if (target.endsWith('.js') && !file.endsWith('.js')) target = target.replace(/\.js$/, '.ts');
      found.push({ target, line: code.slice(0, m.index).split('\n').length, typeOnly });
    }
  }
  return found;
}
