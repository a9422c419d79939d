// Start the real program (`node main.js <node file>`) on free ports and talk to it.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { cpSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import YAML from 'yaml';
import { InferenceClient } from '../../dist/client/client.js';

export const ROOT = fileURLToPath(new URL('../../', import.meta.url));
export const MAIN = path.join(ROOT, 'main.js');
export const FIXTURES = path.join(ROOT, 'test', 'fixtures');

/** @typedef {import('../../dist/client/client.js').Tensor} Tensor */

/** A fresh temporary directory, removed by the returned cleanup. */
export function tempDir(prefix = 'stowage-test-') {
  const dir = mkdtempSync(path.join(tmpdir(), prefix));
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/**
 * Copy bundles into a new repository directory: `{ name: sourceDir }`, plus files `{ 'name/file': contents }`.
 * @param {string} root
 * @param {Record<string, string>} bundles
 * @param {Record<string, string | Uint8Array>} [files]
 */
export function makeRepository(root, bundles, files = {}) {
  const repo = path.join(root, 'repo');
  mkdirSync(repo, { recursive: true });
  for (const [name, src] of Object.entries(bundles)) cpSync(src, path.join(repo, name), { recursive: true });
  for (const [rel, contents] of Object.entries(files)) {
    const file = path.join(repo, rel);
    mkdirSync(path.dirname(file), { recursive: true });
    writeFileSync(file, contents);
  }
  return repo;
}

/**
 * What a test does not set: a compile cache of its own (not the user's), and a small device
 * (the default 1 GiB arena, touched at start-up, is more than tests running side by side need).
 */
function testDefaults(config, dir) {
  const runtime = config.global?.runtime ?? {};
  return {
    cache_dir: path.join(dir, 'compile-cache'),
    ...config,
    global: { ...config.global, runtime: { cpu_device_memory_bytes: 128 * 2 ** 20, ...runtime } },
  };
}

/**
 * Start the server with `config` (an object written as the node file) and
 * wait until it logs "serving" (or the line `until` accepts). Ports are 0
 * (chosen by the OS) and read from the log. Resolves to
 * { client, address, adminPort, logs, waitForLog, child, stop }.
 * @param {Record<string, any>} config
 * @param {{ env?: Record<string, string>, root?: string, until?: (entry: any) => boolean }} [options]
 */
export async function startServer(config, { env = {}, root, until = (entry) => entry.msg === 'serving' } = {}) {
  const temp = root ? null : tempDir();
  const dir = root ?? temp.dir;
  const file = path.join(dir, 'node.yaml');
  writeFileSync(file, YAML.stringify(testDefaults(config, dir)));
  const child = spawn(process.execPath, [MAIN, file], {
    env: { ...process.env, INFERENCE_SERVER_ENDPOINTS_GRPC_PORT: '0', INFERENCE_SERVER_ENDPOINTS_ADMIN_PORT: '0', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const logs = [];
  const logWaiters = [];
  let stderr = '';
  child.stderr.on('data', (d) => { stderr += d; });
  const lines = createInterface({ input: child.stdout });
  const serving = new Promise((resolve, reject) => {
    lines.on('line', (line) => {
      let entry;
      try { entry = JSON.parse(line); } catch { entry = { msg: line }; }
      logs.push(entry);
      for (const w of [...logWaiters]) {
        if (w.match(entry)) {
          logWaiters.splice(logWaiters.indexOf(w), 1);
          w.resolve(entry);
        }
      }
      if (until(entry)) resolve(entry);
    });
    child.once('exit', (code) => reject(new Error(`server exited with code ${code} before serving:\n${stderr}`)));
  });
  const entry = await serving;
  const admin = logs.find((l) => l.admin)?.admin;
  const address = logs.find((l) => l.msg === 'serving')?.grpc;
  const adminPort = admin ? Number(admin.split(':').pop()) : undefined;
  const client = new InferenceClient(address ?? 'localhost:1'); // connects lazily: only used once serving
  const stop = async () => {
    client.close();
    if (child.exitCode === null) {
      child.kill('SIGTERM');
      await once(child, 'exit');
    }
    temp?.cleanup();
  };
  /** The first log line (already written or still to come) that `match` accepts. */
  const waitForLog = (match) => {
    const seen = logs.find(match);
    return seen ? Promise.resolve(seen) : new Promise((resolve) => logWaiters.push({ match, resolve }));
  };
  return { client, address, adminPort, logs, child, stop, waitForLog, entry, stderr: () => stderr };
}

/**
 * A tensor for the client (its datatype checked against the client's type).
 * @param {string} name
 * @param {Tensor['datatype']} datatype
 * @param {number[]} shape
 * @param {Tensor['data']} data
 * @returns {Tensor}
 */
export function tensor(name, datatype, shape, data) {
  return { name, datatype, shape, data };
}

/** Scrape the server's /metrics into { 'name{labels}': value }. */
export async function scrapeMetrics(adminPort) {
  const text = await (await fetch(`http://127.0.0.1:${adminPort}/metrics`)).text();
  const samples = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const at = line.lastIndexOf(' ');
    samples[line.slice(0, at)] = Number(line.slice(at + 1));
  }
  return samples;
}
