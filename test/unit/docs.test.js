// The README is the front door (issue 63): it stays short, and what it does not say lives in docs/,
// reached by links that resolve. Every relative link of the README and of docs/*.md must name a
// file or folder that exists (anchors and web addresses are not checked).
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import test from 'ava';
import { ROOT } from '../helpers/server.js';

/** A page's relative link targets, without their anchors. */
function relativeLinks(/** @type {string} */ text) {
  return [...text.matchAll(/\[[^\]]*\]\(([^)\s]+)\)/g)].map((m) => m[1])
    .filter((target) => !/^(https?:|mailto:|#)/.test(target))
    .map((target) => target.replace(/#.*$/, ''));
}

test('the README stays a front door: under 15 KB, the two commands in it', (t) => {
  const readme = readFileSync(path.join(ROOT, 'README.md'), 'utf8');
  t.true(Buffer.byteLength(readme) < 15 * 1024, `README.md is ${Buffer.byteLength(readme)} bytes`);
  t.true(readme.includes('npm install && node main.js node.yaml'), 'the command that serves the example repository');
  t.true(readme.includes('\nnpm test '), 'the command that runs the tests');
});

test('every relative link of the README and of docs/ names a file that exists', (t) => {
  const pages = ['README.md', ...readdirSync(path.join(ROOT, 'docs')).filter((f) => f.endsWith('.md')).map((f) => path.join('docs', f))];
  const broken = [];
  for (const page of pages) {
    for (const target of relativeLinks(readFileSync(path.join(ROOT, page), 'utf8'))) {
      const resolved = path.join(ROOT, path.dirname(page), target);
      if (!existsSync(resolved)) broken.push(`${page}: ${target}`);
    }
  }
  t.deepEqual(broken, []);
});
