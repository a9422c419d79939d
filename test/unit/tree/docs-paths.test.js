// The repository stands alone and its words are true to its files: every repository path a
// Markdown file or a source comment names exists here, and none points outside the repository
// (`../shared/...` is another team's folder, absent on a user's machine). A path is a word that
// starts with one of the repository's folders (src/, test/, docs/, bench/, tools/, ...) or, in a
// source comment, with one of src/'s (actors/, node/, protocol/, ...); a Markdown link's target is
// read relative to its page. Globs and placeholders (`*`, `<name>`, `{a,b}`) and what the build or
// the installers make (dist/, .toolchain/, ...) are not checked.
import { existsSync, readdirSync } from 'node:fs';
import path from 'node:path';
import test from 'ava';
import { filesUnder, readSource, splitComments } from '../../helpers/source-tree.js';
import { ROOT as ROOT_URL_PATH } from '../../helpers/server.js';

/** The repository's root, without a trailing separator. */
const ROOT = path.resolve(ROOT_URL_PATH);

const TOP = ['src', 'test', 'docs', 'bench', 'tools', 'bundles', 'deploy', 'proto', 'docker', '.ci'];
const FLOORS = readdirSync(path.join(ROOT, 'src'), { withFileTypes: true }).filter((e) => e.isDirectory()).map((e) => e.name);
/** What the build, the installers and the tests make: named in the words, never committed. */
const MADE = ['src/native/build', 'src/native/ort-include', 'dist/', '.toolchain/', '.venv/', '.stowage/', 'test/container/out'];

/** A word starting with one of `folders`/, up to its last path character (globs and placeholders kept, to be skipped). */
const pathPattern = (/** @type {string[]} */ folders) => new RegExp(String.raw`(?<![\w./-])((?:\.\./)*(?:${folders.map((d) => d.replace('.', '\\.')).join('|')})/[\w.@/*<>{}$-]*[\w/*>}])`, 'g');
/** In Markdown: the repository's own folders (config/crd/... on a page is another project's). */
const IN_MARKDOWN = pathPattern(TOP);
/** In a source comment: src/'s floors too (`actors/device/worker.ts`). */
const IN_SOURCE = pathPattern([...TOP, ...FLOORS]);
/** Anywhere: a relative path that climbs (`../shared/GPU.md`), which must land inside the repository. */
const CLIMBING = /(?<![\w./-])((?:\.\.\/)+[\w.@-]+\/[\w.@/-]*[\w/])/g;

/** Whether `word`, named in `file`, is a path this check skips (a glob, a placeholder, something made). */
const skipped = (/** @type {string} */ word) => /[*<>{}]|\.\.\.|\$/.test(word) || MADE.some((m) => word.replace(/^(\.\.\/)+/, '').startsWith(m));

/**
 * Whether `word` (named in `file`) is a path of the repository: from its root, from src/ (a source
 * comment naming `actors/device/worker.ts`), or from the file's own folder.
 * @param {string} file
 * @param {string} word
 */
function exists(file, word) {
  const bare = word.replace(/\/$/, '');
  const bases = [ROOT, path.join(ROOT, 'src'), path.join(ROOT, path.dirname(file))];
  return bases.some((base) => {
    const at = path.resolve(base, bare);
    return at.startsWith(ROOT + path.sep) && existsSync(at);
  });
}

/** `text`'s words that look like repository paths, each with its line. */
function pathsIn(/** @type {string} */ text, /** @type {RegExp} */ pattern) {
  const found = [];
  for (const [i, line] of text.split('\n').entries()) {
    for (const m of line.matchAll(pattern)) found.push({ word: m[1].replace(/[.,:;]+$/, ''), line: i + 1 });
  }
  return found;
}

/** A Markdown page's link targets that are files (not URLs or anchors), each with its line. */
function linksIn(/** @type {string} */ text) {
  const found = [];
  for (const [i, line] of text.split('\n').entries()) {
    for (const m of line.matchAll(/\]\(([^)\s]+)\)/g)) {
      const target = m[1].split('#')[0];
      if (target && !/^[a-z]+:/i.test(target)) found.push({ word: target, line: i + 1 });
    }
  }
  return found;
}

const MARKDOWN = filesUnder('.', /\.md$/).filter((f) => !f.startsWith('node_modules'));
const SOURCES = filesUnder('src', /\.(ts|mts|mjs|cc|h)$/);

test('every repository path the Markdown names exists, and every link resolves, inside the repository', (t) => {
  const wrong = [];
  for (const file of MARKDOWN) {
    const text = readSource(file);
    for (const { word, line } of pathsIn(text, IN_MARKDOWN)) {
      if (!skipped(word) && !exists(file, word)) wrong.push(`${file}:${line} names ${word}, which does not exist`);
    }
    for (const { word, line } of pathsIn(text, CLIMBING)) {
      if (!exists(file, word)) wrong.push(`${file}:${line} names ${word}, outside the repository or missing`);
    }
    for (const { word, line } of linksIn(text)) {
      const at = path.resolve(ROOT, path.dirname(file), word);
      if (!at.startsWith(ROOT + path.sep)) wrong.push(`${file}:${line} links ${word}, outside the repository`);
      else if (!skipped(word) && !existsSync(at)) wrong.push(`${file}:${line} links ${word}, which does not exist`);
    }
  }
  t.deepEqual(wrong, []);
  t.true(MARKDOWN.length >= 10, `read ${MARKDOWN.length} pages`);
});

test('every repository path a source comment names exists, inside the repository', (t) => {
  const wrong = [];
  let named = 0;
  for (const file of SOURCES) {
    const comments = splitComments(readSource(file)).comments;
    for (const { word, line } of pathsIn(comments, IN_SOURCE)) {
      named++;
      if (!skipped(word) && !exists(file, word)) wrong.push(`${file}:${line} names ${word}, which does not exist`);
    }
    for (const { word, line } of pathsIn(comments, CLIMBING)) {
      if (!exists(file, word)) wrong.push(`${file}:${line} names ${word}, outside the repository or missing`);
    }
  }
  t.deepEqual(wrong, []);
  t.true(named > 50, `${named} paths named in comments`);
});
