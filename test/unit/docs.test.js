// The README is the front door (issue 63): it stays short, and what it does not say lives in docs/
// (that every link of the README and of docs/ resolves is test/unit/tree/docs-paths.test.js's).
import { readFileSync } from 'node:fs';
import path from 'node:path';
import test from 'ava';
import { ROOT } from '../helpers/server.js';

test('the README stays a front door: under 15 KB, the two commands in it', (t) => {
  const readme = readFileSync(path.join(ROOT, 'README.md'), 'utf8');
  t.true(Buffer.byteLength(readme) < 15 * 1024, `README.md is ${Buffer.byteLength(readme)} bytes`);
  t.true(readme.includes('npm install && node main.js node.yaml'), 'the command that serves the example repository');
  t.true(readme.includes('\nnpm test '), 'the command that runs the tests');
});
