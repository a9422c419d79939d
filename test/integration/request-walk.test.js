// The files a gRPC request runs through, measured (tools/request-walk.mjs: V8's call counts over a
// run with 100 more requests than another), against the walk docs/architecture.md writes down: every
// file the page's steps name must be one a request runs through, and the page states the measured
// count, which issue 63 holds to at most 25.
import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import test from 'ava';
import { walkFiles, walkSection } from '../helpers/request-walk.js';
import { ROOT } from '../helpers/server.js';

test('every file the page\'s walk names is one a gRPC request is measured to run through', async (t) => {
  const { stdout } = await promisify(execFile)(process.execPath, [path.join(ROOT, 'tools/request-walk.mjs'), '--count', '100', '--json'], { cwd: ROOT, timeout: 120_000 });
  /** @type {{ files: string[], threads: Record<string, string[]> }} */
  const measured = JSON.parse(stdout);
  const named = walkFiles(walkSection()).files.map((f) => path.relative('src', f));
  t.deepEqual(named.filter((f) => !measured.files.includes(f)), [], 'files the page names that no request ran through');
  t.true(measured.threads.edge?.includes('actors/edge/worker.ts'), 'the request was served on the edge thread');
  t.true(measured.threads.device?.includes('actors/device/execution.ts'), 'and executed on the device thread');
  t.true(measured.files.length <= 25, `a gRPC request runs through ${measured.files.length} files (issue 63: at most 25): ${measured.files.join(', ')}`);
  t.log(`${measured.files.length} files (${Object.entries(measured.threads).map(([k, v]) => `${k} ${v.length}`).join(', ')}); the page names ${named.length}`);
});
