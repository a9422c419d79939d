// One set of rooms (issue 63): every thread that holds requests, each edge thread and the main
// thread, runs the request path in rooms of one class (src/actors/rooms/rooms.ts). Each of what the
// path stands on exists once: the lease front (a model's route and its lease slot), the choice of
// device, the device's inbox (its doors: device-inbox.test.js), the regions a request holds. A second
// one creeping back — a registry that leases, a device pool that picks a device per request, another
// module making a request path or holding regions — fails here, as does docs/architecture.md no
// longer naming the one module of each.
import test from 'ava';
import { filesUnder, readSource, relativeImports, splitComments } from '../../helpers/source-tree.js';

const SOURCES = filesUnder('src', /\.ts$/).filter((f) => !f.endsWith('.d.ts'));
const code = (/** @type {string} */ file) => splitComments(readSource(file)).code;

test('one rooms class makes the request path, on every thread', (t) => {
  t.deepEqual(SOURCES.filter((f) => /\bnew RequestPath\b/.test(code(f))), ['src/actors/rooms/rooms.ts']);
  // The edge worker and the main thread's server both make it.
  const makers = SOURCES.filter((f) => /\bnew Rooms\(/.test(code(f))).sort();
  t.deepEqual(makers, ['src/actors/edge/worker.ts', 'src/node/server.ts']);
});

test('one lease front: models are leased by their route\'s slot in the rooms alone, no registry leases', (t) => {
  // A method named acquire is the leases' own, and the rooms' (PathRooms); no other module of a node defines one (a
  // gateway's remote-node.ts acquires its connection, no model).
  const definers = SOURCES.filter((f) => !f.startsWith('src/remote/') && /^\s+(#)?acquire\(/m.test(code(f))).sort();
  t.deepEqual(definers, ['src/actors/rooms/rooms.ts', 'src/shared/leases.ts', 'src/shared/request-path.ts']);
  const callers = SOURCES.filter((f) => /\.acquire\(/.test(code(f))).sort();
  t.deepEqual(callers, ['src/actors/rooms/rooms.ts', 'src/shared/request-check.ts', 'src/shared/request-path.ts'], 'the rooms lease models; request-check holds regions; the path asks its rooms');
});

test('one choice of device: only the rooms (and a gateway, across nodes) route with routing/routing.ts; the device pool has no infer', (t) => {
  const routers = SOURCES.filter((f) => relativeImports(f).some(({ target }) => target === 'src/routing/routing.ts')).sort();
  // A gateway's: its forwarding, and its routes' picks by a model's shares (pooled).
  t.deepEqual(routers, ['src/actors/rooms/rooms.ts', 'src/remote/placed-routes.ts', 'src/remote/proxy-service.ts']);
  t.notRegex(code('src/node/devices.ts'), /^\s+(async\s+)?infer\(/m, 'the device pool hands no request to a device');
});

test('one holder of regions per thread: the rooms\' regions hold them, the registry only registers', (t) => {
  const holders = SOURCES.filter((f) => /\bholdRegions\(/.test(code(f))).sort();
  t.deepEqual(holders, ['src/actors/rooms/regions.ts', 'src/shared/request-check.ts']);
});

test('docs/architecture.md names the one module of each: the rooms (lease front, choice of device) and the device inbox', (t) => {
  const page = readSource('docs/architecture.md');
  const rooms = page.split('\n').find((line) => line.startsWith('| `src/actors/rooms/`')) ?? '';
  t.regex(rooms, /`rooms\.ts`/);
  t.regex(rooms, /\*\*the lease front\*\*/);
  t.regex(rooms, /\*\*the choice of device\*\*/);
  t.regex(rooms, /`regions\.ts`/);
  t.regex(page, /`inbox\.ts`: every request comes through one of its doors/, 'the device inbox');
});
