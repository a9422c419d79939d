// The README's curl examples, run as a user would (curl, against the example repository), with the
// port the test's server took: each must succeed and answer what its comment says.
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import test from 'ava';
import { ROOT, startServer, tempDir } from '../helpers/server.js';

const run = promisify(execFile);

test('the README\'s REST examples run with curl and answer what they say', async (t) => {
  const readme = readFileSync(path.join(ROOT, 'README.md'), 'utf8');
  const block = /<!-- rest examples -->\n```sh\n([\s\S]*?)```/.exec(readme);
  if (!block) throw new Error('README.md has no "<!-- rest examples -->" block');
  const commands = block[1].split('\n').filter((l) => l.startsWith('curl'));
  t.true(commands.length >= 4);
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const server = await startServer({ model_repo: path.join(ROOT, 'bundles') }, { root: temp.dir });
  t.teardown(() => server.stop());
  const answers = [];
  for (const line of commands) {
    const command = line.split('  #')[0].trim().replaceAll('localhost:8000', String(server.rest).replace('http://', ''));
    const { stdout } = await run('bash', ['-c', `${command} --fail-with-body`]);
    answers.push(JSON.parse(stdout));
  }
  t.deepEqual(answers[0], { ready: true });
  t.is(answers[1].name, 'digits');
  t.deepEqual(answers[2].outputs, [{ name: 'label', datatype: 'INT64', shape: [1], data: [0] }], 'the README\'s image is a 0');
  t.true(answers[3].some((/** @type {{ name: string, state: string }} */ m) => m.name === 'digits' && m.state === 'READY'));
  t.true(answers[4].model_stats[0].inference_stats.success.count >= 1);
});
