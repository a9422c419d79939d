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
/**
 * A node file as a test writes it: any part of the schema's sections (their values are checked by
 * the server, which is what many tests exercise).
 * @typedef {Record<string, any>} NodeFile
 */
/** One line of the server's JSON log. @typedef {Record<string, any> & { msg?: string }} LogEntry */
/** A server a test started. @typedef {Awaited<ReturnType<typeof startServer>>} Server */
/** A temporary directory a test made. @typedef {ReturnType<typeof tempDir>} TempDir */

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
 * @param {NodeFile} config
 * @param {string} dir
 * @returns {NodeFile}
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
 * { client, address, rest, adminPort, logs, waitForLog, child, stop }.
 * `nodeArgs` go to node before main.js (a test's --require preload, say); `main` is another
 * build's main.js (a benchmark comparing two builds); `wrapper`, a command that runs node and its
 * arguments (a benchmark counting the server's instructions under valgrind).
 * @param {NodeFile} config
 * @param {{ env?: Record<string, string>, root?: string, until?: (entry: LogEntry) => boolean, nodeArgs?: string[], main?: string, wrapper?: string[] }} [options]
 */
export async function startServer(config, { env = {}, root, until = (entry) => entry.msg === 'serving', nodeArgs = [], main = MAIN, wrapper = [] } = {}) {
  const temp = root === undefined ? tempDir() : null;
  const dir = root ?? /** @type {TempDir} */ (temp).dir;
  const file = path.join(dir, 'node.yaml');
  writeFileSync(file, YAML.stringify(testDefaults(config, dir)));
  const [command, ...args] = [...wrapper, process.execPath, ...nodeArgs, main, file];
  const child = spawn(command, args, {
    env: { ...process.env, INFERENCE_SERVER_ENDPOINTS_GRPC_PORT: '0', INFERENCE_SERVER_ENDPOINTS_HTTP_PORT: '0', INFERENCE_SERVER_ENDPOINTS_ADMIN_PORT: '0', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  /** @type {LogEntry[]} */
  const logs = [];
  /** @type {{ match: (entry: LogEntry) => boolean, resolve: (entry: LogEntry) => void }[]} */
  const logWaiters = [];
  let stderr = '';
  child.stderr.on('data', (d) => { stderr += d; });
  const lines = createInterface({ input: child.stdout });
  /** @type {Promise<LogEntry>} */
  const serving = new Promise((resolve, reject) => {
    lines.on('line', (line) => {
      /** @type {LogEntry} */
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
  /** The REST base URL (http://host:port), once serving. */
  const http = logs.find((l) => l.msg === 'serving')?.http;
  const rest = http ? `http://${http}` : undefined;
  const client = new InferenceClient(address ?? 'localhost:1'); // connects lazily: only used once serving
  const stop = async () => {
    client.close();
    if (child.exitCode === null) {
      child.kill('SIGTERM');
      await once(child, 'exit');
    }
    temp?.cleanup();
  };
  /**
   * The first log line (already written or still to come) that `match` accepts.
   * @param {(entry: LogEntry) => boolean} match
   * @returns {Promise<LogEntry>}
   */
  const waitForLog = (match) => {
    const seen = logs.find(match);
    return seen ? Promise.resolve(seen) : new Promise((resolve) => logWaiters.push({ match, resolve }));
  };
  /**
   * Resolves once `count` log lines (written already or still to come) are ones `match` accepts.
   * @param {(entry: LogEntry) => boolean} match
   * @param {number} count
   */
  const waitForLogs = async (match, count) => {
    while (logs.filter(match).length < count) {
      const seen = logs.length;
      await waitForLog((l) => logs.indexOf(l) >= seen && match(l));
    }
  };
  return { client, address, rest, adminPort, logs, child, stop, waitForLog, waitForLogs, entry, stderr: () => stderr };
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

/**
 * Scrape the server's /metrics into { 'name{labels}': value }.
 * @param {number | undefined} adminPort
 * @returns {Promise<Record<string, number>>}
 */
export async function scrapeMetrics(adminPort) {
  const text = await (await fetch(`http://127.0.0.1:${adminPort}/metrics`)).text();
  /** @type {Record<string, number>} */
  const samples = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const at = line.lastIndexOf(' ');
    samples[line.slice(0, at)] = Number(line.slice(at + 1));
  }
  return samples;
}

/**
 * The data of an answer's tensor as the typed array its datatype gives, checked to be one.
 * @template {new (...args: any[]) => import('../../dist/client/client.js').TypedArray} C
 * @param {Tensor} t
 * @param {C} Type Float32Array, BigInt64Array, ...
 * @returns {InstanceType<C>}
 */
export function dataAs(t, Type) {
  if (!(t.data instanceof Type)) throw new Error(`tensor ${t.name} (${t.datatype}) holds ${t.data.constructor.name}, not ${Type.name}`);
  return /** @type {InstanceType<C>} */ (t.data);
}

/**
 * The elements of an answer's BYTES tensor.
 * @param {Tensor} t
 * @returns {Uint8Array[]}
 */
export function bytesOf(t) {
  if (!Array.isArray(t.data)) throw new Error(`tensor ${t.name} (${t.datatype}) is not BYTES`);
  return t.data;
}

/**
 * One sample of a scrape (scrapeMetrics): `name{labels}`, 0 when the server has not reported it.
 * @param {Record<string, number>} samples
 * @param {string} name
 * @param {string} labels as the exposition writes them, e.g. `model="m000"`
 */
export function metric(samples, name, labels) {
  return samples[`${name}{${labels}}`] ?? 0;
}
