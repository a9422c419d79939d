// ONNX Runtime's C API headers for the binding (ort.cc), fetched at build time and never committed.
//
// Neither ONNX Runtime's npm package nor its PyPI wheels carry the header. The Go module
// github.com/yalue/onnxruntime_go does (a Go binding, MIT): its v1.27.0 holds onnxruntime_c_api.h
// (and onnxruntime_ep_c_api.h, which it includes) for C API version 24 (ONNX Runtime 1.24), which
// onnxruntime-node's 1.30 library serves through OrtGetApiBase()->GetApi(24): the C API only ever
// grows, keeping every earlier version's table. The module is pinned by version, and each header
// (and the module zip) by its SHA-256.
//
// Where it comes from, first that works:
//   1. STOWAGE_ORT_C_API_HEADERS: a directory holding those headers (for machines with no registry);
//   2. src/native/ort-include/, from an earlier build;
//   3. `go mod download` where Go is installed (Go checks the module against its checksum database);
//   4. the Go module proxy named by GOPROXY (Go's own variable; `go env GOPROXY` prints the one
//      Go uses), fetched with Node and unpacked with Python's zipfile: no Go needed.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

export const MODULE = 'github.com/yalue/onnxruntime_go';
export const VERSION = 'v1.27.0';
/** The C API version the header declares (ORT_API_VERSION), asked of the library at run time. */
export const API_VERSION = 24;
/** Each header the binding compiles against, and its SHA-256. */
const HEADERS = {
  'onnxruntime_c_api.h': '9ed0d7054a4e74249467365b25b415d36f51a44a6349e2a994a1812e4723d1e2',
  'onnxruntime_ep_c_api.h': 'e94ac3490697bdb107844fa9d403952ee7136134132a057eae5c1207b57ce352',
};
const ZIP_SHA256 = '5b7c7e6878caa1f1bf5d5acc09bfdd9de4c2f1e1beee1ff5529570139c540cb0';

const sha256 = (bytes) => createHash('sha256').update(bytes).digest('hex');

/** Null when `dir` holds every pinned header; why not otherwise. */
function check(dir) {
  for (const [name, pinned] of Object.entries(HEADERS)) {
    const file = path.join(dir, name);
    if (!existsSync(file)) return `${file} does not exist`;
    const got = sha256(readFileSync(file));
    if (got !== pinned) return `${file} has SHA-256 ${got}, not the pinned ${pinned}`;
  }
  return null;
}

/** Copy every header from `from` into `into`, once all are checked. */
function take(from, into) {
  const why = check(from);
  if (why) return why;
  for (const name of Object.keys(HEADERS)) copyFileSync(path.join(from, name), path.join(into, name));
  return null;
}

function fromGo(into) {
  const go = spawnSync('go', ['mod', 'download', '-json', `${MODULE}@${VERSION}`], { encoding: 'utf8', env: { ...process.env, GOFLAGS: '-mod=mod' } });
  if (go.error) return `go is not installed (${go.error.code})`;
  if (go.status !== 0) return `go mod download failed: ${(go.stderr || go.stdout).trim().slice(0, 500)}`;
  return take(JSON.parse(go.stdout).Dir, into);
}

async function fromProxy(into) {
  const proxies = (process.env.GOPROXY ?? '').split(/[,|]/).map((p) => p.trim()).filter((p) => /^https?:\/\//.test(p));
  if (proxies.length === 0) return 'GOPROXY names no module proxy (set it to the one `go env GOPROXY` prints on a machine with Go)';
  const reasons = [];
  for (const proxy of proxies) {
    const url = `${proxy.replace(/\/+$/, '')}/${MODULE}/@v/${VERSION}.zip`;
    try {
      const response = await fetch(url);
      if (!response.ok) {
        reasons.push(`${url}: HTTP ${response.status}`);
        continue;
      }
      const zip = Buffer.from(await response.arrayBuffer());
      const got = sha256(zip);
      if (got !== ZIP_SHA256) {
        reasons.push(`${url}: SHA-256 ${got}, not the pinned ${ZIP_SHA256}`);
        continue;
      }
      const zipFile = path.join(tmpdir(), `stowage-ort-${process.pid}.zip`);
      writeFileSync(zipFile, zip);
      try {
        const members = Object.keys(HEADERS).map((name) => `${MODULE}@${VERSION}/${name}`);
        const unpack = 'import os, sys, zipfile\nz = zipfile.ZipFile(sys.argv[1])\nfor m in sys.argv[3:]:\n    open(os.path.join(sys.argv[2], os.path.basename(m)), "wb").write(z.read(m))';
        const py = spawnSync('python3', ['-c', unpack, zipFile, into, ...members]);
        if (py.status !== 0) {
          reasons.push(`unpacking the headers with python3 failed: ${String(py.stderr || py.error).trim().slice(0, 300)}`);
          continue;
        }
      } finally {
        rmSync(zipFile, { force: true });
      }
      const why = check(into);
      if (!why) return null;
      reasons.push(why);
    } catch (err) {
      reasons.push(`${url}: ${err.message}`);
    }
  }
  return reasons.join('; ');
}

/** Put the pinned headers into `dir`; resolves once they are there, or throws saying what was tried. */
export async function ensureOrtHeader(dir) {
  mkdirSync(dir, { recursive: true });
  const tried = [];
  const given = process.env.STOWAGE_ORT_C_API_HEADERS;
  if (given) {
    const why = take(given, dir);
    if (!why) return;
    tried.push(`STOWAGE_ORT_C_API_HEADERS: ${why}`);
  }
  if (!check(dir)) return;
  const viaGo = fromGo(dir);
  if (!viaGo) return;
  tried.push(viaGo);
  const viaProxy = await fromProxy(dir);
  if (!viaProxy) return;
  tried.push(viaProxy);
  throw new Error(`cannot get ONNX Runtime's C API headers (${Object.keys(HEADERS).join(', ')} of the Go module ${MODULE}@${VERSION}): ${tried.join('; ')}`);
}
