// Entry point: `node main.js node.yaml`. The server is TypeScript compiled to dist/ by `npm install`
// (or `npm run build`); this file only checks that the build is there and starts it.
import { existsSync } from 'node:fs';

// package.json's engines (^22.22.2 || >=24.15.0), checked before anything else: on an older Node
// the server would start and then fail in ways that do not say why (Node 20 ignores `reusePort`, so
// a second edge thread's listen fails EADDRINUSE).
const [major, minor, patch] = process.versions.node.split('.').map(Number);
const supported = (major === 22 && (minor > 22 || (minor === 22 && patch >= 2))) || (major === 24 && minor >= 15) || major > 24;
if (!supported) {
  process.stderr.write(`stowage: Node ${process.version} is not supported: package.json's engines ask for ^22.22.2 || >=24.15.0; ` +
    '`. tools/use-node.sh` puts Node 24 first on PATH (fetched from npm into .toolchain/ when missing)\n');
  process.exit(2);
}

// V8 flags the server runs with. V8 reads them only when it makes the heap, so they cannot be set
// from here: the process re-executes itself with them (execve: the same PID, stdio and
// environment) before doing anything else. `--initial-old-space-size=128`: with V8's own sizing
// the main thread's heap stayed near 18 MB and V8 ran a full collection every ~10 requests of
// 600 KiB (~1 ms of the main thread each request); with it, 2.21x the requests/s at 600 KiB and
// 1.28x at 8 MiB one at a time, the same at small payloads, and the same resident memory after
// load (`node bench/front-end.js --v8=...`, docs/performance.md). STOWAGE_V8_FLAGS replaces the
// list (empty: none); a flag given to node by hand is kept and not given twice.
const flags = (process.env.STOWAGE_V8_FLAGS ?? '--initial-old-space-size=128').split(/\s+/).filter(Boolean);
const missing = flags.filter((f) => !process.execArgv.some((given) => given.split('=')[0] === f.split('=')[0]));
if (missing.length > 0 && typeof process.execve === 'function') {
  try {
    process.execve(process.execPath, [process.execPath, ...missing, ...process.execArgv, process.argv[1], ...process.argv.slice(2)], process.env);
  } catch (err) {
    // Refused (a sandbox without execve): run as we are, without the flags.
    process.stderr.write(`stowage: could not restart with ${missing.join(' ')} (${err.message}); running without them\n`);
  }
}

// The main thread's heap is made now, with its size. Worker threads' isolates (device actors,
// hooks, the compiler) read the flags when each is made: for them the old generation's size goes
// back to V8's own (the edge threads, which do the protocol's work, get it back while they start:
// src/actors/edge/handle.ts). They allocate little between collections, and with a 128 MB floor each would
// have held up to that much garbage (a 10-minute soak: a device thread's heap at 110 MB, the
// process's memory 26% up).
if (process.execArgv.some((given) => given.split('=')[0] === '--initial-old-space-size')) {
  const v8 = await import('node:v8');
  v8.setFlagsFromString('--initial-old-space-size=0');
}

const entry = new URL('./dist/main.js', import.meta.url);
if (!existsSync(entry)) {
  process.stderr.write('stowage: dist/ is missing; run `npm install` (it builds) or `npm run build` first\n');
  process.exit(2);
}
await import(entry.href);
