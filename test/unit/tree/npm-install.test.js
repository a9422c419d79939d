// A newcomer's `npm install` on Node 24 is clean: every dependency's install script is reviewed in
// package.json's allowScripts (npm's own mechanism, npm 11.16 and later; onnxruntime-node's is
// denied, since it would download CUDA libraries the CPU build does not use and the CUDA build takes
// from PyPI), and no project config npm does not know is set.
import { execFileSync, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import test from 'ava';
import { ROOT } from '../../helpers/server.js';

const npmVersion = execFileSync('npm', ['--version'], { cwd: ROOT, encoding: 'utf8' }).trim();
const [major, minor] = npmVersion.split('.').map(Number);
const hasAllowScripts = major > 11 || (major === 11 && minor >= 16);

test('every install script of the dependencies is reviewed in package.json; onnxruntime-node\'s download is denied', (t) => {
  const pkg = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8'));
  t.is(pkg.allowScripts['onnxruntime-node'], false);
  if (!hasAllowScripts) {
    t.log(`npm ${npmVersion} predates allowScripts: only package.json was checked`);
    return;
  }
  const ls = spawnSync('npm', ['install-scripts', 'ls'], { cwd: ROOT, encoding: 'utf8' });
  t.is(ls.status, 0, ls.stderr);
  t.regex(ls.stdout, /No packages with unreviewed install scripts/, ls.stdout);
});

test('npm reads no project config it does not know', (t) => {
  const run = spawnSync('npm', ['config', 'get', 'fund'], { cwd: ROOT, encoding: 'utf8' });
  t.is(run.status, 0, run.stderr);
  t.notRegex(run.stderr, /Unknown project config/);
  t.notRegex(run.stderr, /npm warn/);
});
