// The command line of the real program: help, config checking, start-up errors, signals.
import { execFile, execFileSync } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import test from 'ava';
import { MAIN, ROOT, startServer, tempDir } from '../helpers/server.js';

const run = promisify(execFile);

/**
 * Run `node main.js ...args`; resolves to its exit code and output whatever the exit status.
 * @param {string[]} args
 * @param {Record<string, string>} [env]
 * @returns {Promise<{ code: number, stdout: string, stderr: string }>}
 */
async function main(args, env = {}) {
  try {
    const { stdout, stderr } = await run(process.execPath, [MAIN, ...args], { env: { ...process.env, ...env } });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const failed = /** @type {{ code: number, stdout: string, stderr: string }} */ (err);
    return { code: failed.code, stdout: failed.stdout, stderr: failed.stderr };
  }
}

/** package.json's engines for Node, which main.js checks before anything else. */
const ENGINES = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')).engines.node;

/**
 * A `node` on PATH older than package.json's engines (the machine's own Node 20 here and in CI, where PATH has Node 24
 * first), or none.
 */
const olderNode = (process.env.PATH ?? '').split(path.delimiter).map((dir) => path.join(dir, 'node')).find((file) => {
  if (!existsSync(file)) return false;
  try {
    return Number(execFileSync(file, ['-p', 'process.versions.node.split(".")[0]'], { encoding: 'utf8' }).trim()) < 22;
  } catch {
    return false;
  }
});

(olderNode ? test : test.skip)('a Node older than package.json\'s engines stops start-up at once, naming the versions it needs and how to get one', async (t) => {
  const err = await t.throwsAsync(run(/** @type {string} */ (olderNode), [MAIN, path.join(ROOT, 'node.yaml')], { timeout: 30_000 }));
  const failed = /** @type {{ code: number, stderr: string }} */ (/** @type {unknown} */ (err));
  t.is(failed.code, 2);
  t.regex(failed.stderr, /stowage: Node v\d+\.\d+\.\d+ is not supported: package\.json's engines ask for /);
  t.true(failed.stderr.includes(ENGINES), `names package.json's engines (${ENGINES})`);
  t.regex(failed.stderr, /tools\/use-node\.sh/);
});

test('main.js checks the Node versions package.json\'s engines name (the check is written out there; this keeps the two one)', (t) => {
  t.true(readFileSync(MAIN, 'utf8').includes(ENGINES), `main.js names ${ENGINES}`);
});

test('--help explains the usage and lists every environment override', async (t) => {
  const { code, stdout } = await main(['--help']);
  t.is(code, 0);
  t.regex(stdout, /node main\.js NODE_FILE/);
  t.regex(stdout, /INFERENCE_SERVER_ENDPOINTS_GRPC_PORT\s+global\.endpoints\.grpc_port/);
  t.regex(stdout, /INFERENCE_SERVER_MODEL_REPO\s+model_repo/);
  t.is((await main([])).code, 2, 'no node file is a usage error');
});

test('--check-config prints the effective configuration with overrides applied', async (t) => {
  const { code, stdout } = await main(['--check-config', path.join(ROOT, 'node.yaml')], { INFERENCE_SERVER_ENDPOINTS_GRPC_PORT: '9101' });
  t.is(code, 0);
  const { config, overrides } = JSON.parse(stdout);
  t.is(config.model_repo, path.join(ROOT, 'bundles'));
  t.is(config.global.endpoints.grpc_port, 9101);
  t.is(config.global.endpoints.host, '127.0.0.1');
  t.deepEqual(overrides, ['INFERENCE_SERVER_ENDPOINTS_GRPC_PORT']);
});

test('an invalid node file stops start-up with exit code 2 and the key path', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const file = path.join(temp.dir, 'node.yaml');
  writeFileSync(file, 'model_repo: .\nglobal:\n  endpoints:\n    grpc_port: many\n  runtim: {}\n');
  const { code, stderr } = await main([file]);
  t.is(code, 2);
  t.regex(stderr, /global\.endpoints\.grpc_port: "many" must be integer/);
  t.regex(stderr, /global\.runtim: unknown key; allowed here: model_control_mode, model_poll_seconds, logging, tracing, runtime, scheduler, quotas, hooks, endpoints/);
  const missing = await main([path.join(temp.dir, 'absent.yaml')]);
  t.is(missing.code, 2);
  t.regex(missing.stderr, /cannot read node file .*absent\.yaml: ENOENT/);
});

test('a cache_dir the server cannot write stops start-up with a clear message', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const file = path.join(temp.dir, 'node.yaml');
  writeFileSync(path.join(temp.dir, 'a-file'), 'not a directory');
  writeFileSync(file, `model_repo: ${path.join(ROOT, 'bundles')}\ncache_dir: ./a-file/cache\n`);
  const { code, stderr } = await main([file], { INFERENCE_SERVER_ENDPOINTS_GRPC_PORT: '0', INFERENCE_SERVER_ENDPOINTS_HTTP_PORT: '0', INFERENCE_SERVER_ENDPOINTS_ADMIN_PORT: '0' });
  t.is(code, 2);
  t.regex(stderr, /cache_dir .*a-file\/cache is not a writable directory \(ENOTDIR\)/);
});

test('a model_repo that is not a directory stops start-up with a clear message', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const file = path.join(temp.dir, 'node.yaml');
  writeFileSync(file, 'model_repo: ./no-such-dir\n');
  const { code, stderr } = await main([file], { INFERENCE_SERVER_ENDPOINTS_GRPC_PORT: '0', INFERENCE_SERVER_ENDPOINTS_HTTP_PORT: '0', INFERENCE_SERVER_ENDPOINTS_ADMIN_PORT: '0' });
  t.is(code, 2);
  t.regex(stderr, /model_repo .*no-such-dir is not a directory/);
});

test('SIGTERM stops the server cleanly with exit code 0', async (t) => {
  const server = await startServer({ model_repo: path.join(ROOT, 'bundles') });
  t.true(await server.client.serverReady());
  server.child.kill('SIGTERM');
  const [code] = await once(server.child, 'close'); // after its output is drained
  t.is(code, 0);
  t.true(server.logs.some((l) => l.msg === 'stopped'));
  await server.stop();
});

test('backend cuda without the CUDA provider installed stops start-up naming what is missing and the command that installs it', async (t) => {
  // This machine (CI's) has no CUDA provider beside onnxruntime-node: start-up must say so, not crash.
  const { existsSync } = await import('node:fs');
  const { ortLibraryPath } = await import('../../dist/native/ort.js');
  if (existsSync(path.join(path.dirname(ortLibraryPath()), 'libonnxruntime_providers_cuda.so'))) {
    t.pass('the CUDA provider is installed here: test/gpu covers backend cuda');
    return;
  }
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const file = path.join(temp.dir, 'node.yaml');
  writeFileSync(file, `model_repo: ${path.join(ROOT, 'bundles')}\ncache_dir: ${path.join(temp.dir, 'cache')}\nglobal:\n  runtime: { backend: cuda }\n  endpoints: { grpc_port: 0, http_port: 0, admin_port: 0 }\n`);
  const { code, stdout, stderr } = await main([file]);
  t.not(code, 0);
  t.regex(stdout + stderr, /backend cuda: ONNX Runtime's CUDA provider is not installed \(libonnxruntime_providers_shared\.so, libonnxruntime_providers_cuda\.so missing from .*\); run npm run cuda:install/);
});

/** The command line the kernel has for `pid`, as its arguments. */
function commandLine(/** @type {number | undefined} */ pid) {
  return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean);
}

test('the server runs under its V8 flags: the same process restarted with them, a flag given by hand kept, STOWAGE_V8_FLAGS replacing them', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const repo = path.join(ROOT, 'bundles');
  const serve = async (/** @type {string[]} */ nodeArgs, /** @type {Record<string, string>} */ env = {}) => {
    const server = await startServer({ model_repo: repo }, { root: temp.dir, nodeArgs, env });
    try {
      // The PID the test spawned is the one serving: execve replaced the image, no child was made.
      t.truthy(await server.client.call('ServerLive', {}));
      return commandLine(server.child.pid);
    } finally {
      await server.stop();
    }
  };
  const plain = await serve([]);
  t.deepEqual(plain.slice(1, 3), ['--initial-old-space-size=128', MAIN], 'the flag, then the script');
  const byHand = await serve(['--initial-old-space-size=64']);
  t.deepEqual(byHand.filter((a) => a.startsWith('--initial-old-space-size')), ['--initial-old-space-size=64'], 'a size chosen by hand is kept and not given twice');
  const replaced = await serve([], { STOWAGE_V8_FLAGS: '--max-semi-space-size=8' });
  t.deepEqual(replaced.slice(1, 3), ['--max-semi-space-size=8', MAIN]);
  const none = await serve([], { STOWAGE_V8_FLAGS: '' });
  t.is(none[1], MAIN, 'no flags: the process runs as started');
});
