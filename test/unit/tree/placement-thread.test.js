// A pooled gateway places off the thread that forwards requests (issue 64): the status reports'
// decoding, the index reads and the placement run on its placement thread (src/remote/placement/),
// and the main thread's modules reach none of them, by any chain of imports. A change that brings
// the placement back onto the requests' thread fails here.
import test from 'ava';
import { relativeImports } from '../../helpers/source-tree.js';

/** Every source file `file` reaches through relative imports (types only included: a type import is cheap, but says the module is used). */
function reached(/** @type {string} */ file) {
  const seen = new Set([file]);
  const todo = [file];
  while (todo.length > 0) {
    for (const { target } of relativeImports(/** @type {string} */ (todo.pop()))) {
      if (seen.has(target) || !target.endsWith('.ts')) continue;
      seen.add(target);
      todo.push(target);
    }
  }
  return seen;
}

const PLACEMENT_ONLY = ['src/remote/fleet-routes.ts', 'src/remote/fleet-catalog.ts', 'src/remote/status-report.ts', 'src/remote/node-status.ts', 'src/remote/placement/worker.ts'];

test('the gateway\'s main thread imports no placement, status decoding or status reads: only the routes\' copy', (t) => {
  const main = reached('src/remote/gateway-server.ts');
  t.deepEqual(PLACEMENT_ONLY.filter((f) => main.has(f)), []);
  t.true(main.has('src/remote/placed-routes.ts'));
  t.true(main.has('src/remote/placement/handle.ts'));
});

test('the placement thread runs the placement and reads the nodes\' status', (t) => {
  const thread = reached('src/remote/placement/worker.ts');
  for (const f of ['src/remote/fleet-routes.ts', 'src/routing/fleet-placement.ts', 'src/remote/status-report.ts', 'src/remote/node-status.ts']) t.true(thread.has(f), f);
});
