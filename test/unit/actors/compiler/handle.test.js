// The compiler's handle: a pool of one thread that loads onnxruntime-node. Ending that thread while
// the addon registers aborted the whole process (its module init throws a C++ exception when its
// environment goes), which `bundle check` on a refused bundle hit under load; close() now waits for
// the thread to have loaded. Here compilers are closed at staggered moments across their threads'
// loading, in a process of its own, which must survive them all (without the wait it aborted in
// about one round in four).
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import test from 'ava';
import { ROOT, tempDir } from '../../../helpers/server.js';

const RACE = `
const { Compiler } = await import(${JSON.stringify(`${ROOT}/dist/actors/compiler/handle.js`)});
for (let round = 0; round < 3; round++) {
  await Promise.all(Array.from({ length: 48 }, async (_, i) => {
    const compiler = new Compiler(process.argv[1]);
    await new Promise((resolve) => setTimeout(resolve, i * 6));
    await compiler.close();
    if (compiler.threads.length) throw new Error('a thread outlived close()');
  }));
}
console.log('survived');
`;

test('compilers closed at any moment of their thread\'s loading end it without aborting the process', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const { stdout } = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', RACE, temp.dir], { timeout: 120_000 });
  t.is(stdout.trim(), 'survived');
});
