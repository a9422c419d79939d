// Stowage's own ONNX Runtime binding (src/native/ort.ts) against the path it replaced.
//
// 1. The per-run floor, in process: one Neg on [3] and the convnet fixture at batch 1 and 8, run
//    by the binding (bound input, output written into a buffer we give) and by onnxruntime-node's
//    JavaScript API (session.run), interleaved run by run.
// 2. Through the server, side by side: this tree and a build of the commit before the binding
//    (`--before REV`, by default the parent of the commit that added src/native/ort.cc), each a
//    node serving the same repository, driven by perf_analyzer point by point in turns: the tiny
//    `digits` model, the convnet fixture, and the identity fixture `echo` at 600 KiB and 8 MiB,
//    at concurrency 1, 8 and 32. Requests/s, p50, p99, the server's CPU per request, and the
//    binding's ratio to the JS path.
//
//   npm run build && node bench/binding.js [--quick] [--only digits,convnet,600KiB,8MiB] [--before REV] [--skip-server]
//
// The earlier build goes to .toolchain/bench-before/ (a git worktree with its own npm ci), made
// once per REV. The machine is shared and noisy: compare the rows of one run.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import * as ortNode from 'onnxruntime-node';
import { OrtSession } from '../dist/native/ort.js';
import { FIXTURES, ROOT, makeRepository, startServer, tempDir } from '../test/helpers/server.js';
import { cpuUs } from './proc-cpu.js';
import { PERF_ANALYZER, perfAnalyzer } from './perf-analyzer.js';

const { values: args } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    only: { type: 'string' },
    before: { type: 'string' },
    'skip-server': { type: 'boolean', default: false },
    concurrency: { type: 'string', default: '1,8,32' },
  },
});
const FLOAT = 1;

/** Median of `xs`. @param {number[]} xs */
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/**
 * Per-run time of the binding and of onnxruntime-node on one model and input, interleaved.
 * @param {string} label
 * @param {string} file
 * @param {string} input
 * @param {string} output
 * @param {number[]} dims
 * @param {number[]} outDims
 */
async function floor(label, file, input, output, dims, outDims, runs = 2000) {
  const x = new Float32Array(dims.reduce((a, b) => a * b, 1)).fill(0.5);
  const y = new Float32Array(outDims.reduce((a, b) => a * b, 1));
  const binding = OrtSession.open(file, { intraOpThreads: 1, allowSpinning: false, graphOptimizationLevel: 'all', logSeverityLevel: 3 });
  const js = await ortNode.InferenceSession.create(file, { intraOpNumThreads: 1, graphOptimizationLevel: 'all', extra: { session: { 'intra_op.allow_spinning': '0' } } });
  const tensor = new ortNode.Tensor('float32', x, dims);
  /** @type {number[]} */ const a = [];
  /** @type {number[]} */ const c = [];
  /** @type {number[]} */ const b = [];
  const inputs = [{ name: input, type: FLOAT, dims, data: x }];
  const outputs = [{ name: output, type: FLOAT, dims: outDims, data: y }];
  for (let i = 0; i < runs; i++) {
    let t = performance.now();
    await binding.run(inputs, outputs);
    a.push(performance.now() - t);
    t = performance.now();
    binding.runSync(inputs, outputs);
    c.push(performance.now() - t);
    t = performance.now();
    await js.run({ [input]: tensor });
    b.push(performance.now() - t);
  }
  binding.release();
  await js.release();
  const [ma, mc, mb] = [a, c, b].map((xs) => median(xs.slice(runs / 10)));
  const us = (/** @type {number} */ ms) => `${(ms * 1000).toFixed(1)} µs`;
  console.log(`| ${label} | ${us(ma)} | ${us(mc)} | ${us(mb)} | ${(ma / mb).toFixed(2)} / ${(mc / mb).toFixed(2)} |`);
}

/** A git worktree of `rev`, built, in .toolchain/bench-before/<rev>; its path. @param {string} rev */
function buildBefore(rev) {
  const dir = path.join(ROOT, '.toolchain', 'bench-before', rev);
  if (existsSync(path.join(dir, 'dist', 'main.js'))) return dir;
  mkdirSync(path.dirname(dir), { recursive: true });
  if (!existsSync(dir)) execFileSync('git', ['worktree', 'add', '--detach', dir, rev], { cwd: ROOT, stdio: 'inherit' });
  execFileSync('npm', ['ci', '--no-audit', '--no-fund'], { cwd: dir, stdio: 'inherit', env: { ...process.env, ONNXRUNTIME_NODE_INSTALL: 'skip' } });
  return dir;
}

/** The commit before the one that added the binding. */
function defaultBefore() {
  const added = execFileSync('git', ['log', '--diff-filter=A', '--format=%H', '--', 'src/native/ort.cc'], { cwd: ROOT, encoding: 'utf8' }).trim().split('\n').pop();
  return execFileSync('git', ['rev-parse', '--short', `${added}^`], { cwd: ROOT, encoding: 'utf8' }).trim();
}

const PAYLOADS = {
  digits: { model: 'digits', batch: 1, requests: 2000 },
  convnet: { model: 'convnet', batch: 1, requests: 1000 },
  '600KiB': { model: 'echo', batch: 150, requests: 300 },
  '8MiB': { model: 'echo', batch: 2048, requests: 40 },
};

async function servers() {
  const before = args.before ?? defaultBefore();
  const beforeDir = buildBefore(before);
  const temp = tempDir('stowage-bench-binding-');
  const repo = makeRepository(temp.dir, {
    digits: path.join(ROOT, 'bundles', 'digits'),
    convnet: path.join(FIXTURES, 'models', 'convnet'),
    echo: path.join(FIXTURES, 'models', 'echo'),
  });
  const threads = os.availableParallelism();
  const config = { model_repo: repo, global: { runtime: { intra_op_threads: threads, cpu_device_memory_bytes: 256 * 2 ** 20 } } };
  // Both under V8's own heap sizing: the build before has no main.js flags, and this compares the
  // execution paths, not them (bench/front-end.js --v8= measures the flags).
  const now = await startServer(config, { env: { STOWAGE_V8_FLAGS: '' } });
  // The build before the binding has no REST port: it would refuse the helper's override for one.
  const then = await startServer({ ...config, cache_dir: path.join(temp.dir, 'cache-before') }, { main: path.join(beforeDir, 'main.js'), env: /** @type {Record<string, string>} */ ({ INFERENCE_SERVER_ENDPOINTS_HTTP_PORT: undefined }) });
  console.log(`\nThrough the server: this tree against ${before} (the JS path), perf_analyzer, ${threads} ONNX Runtime threads each\n`);
  console.log('| workload | concurrency | binding req/s (p50, p99 µs) | JS path req/s (p50, p99 µs) | binding / JS | CPU µs per request: binding / JS |');
  console.log('| --- | --- | --- | --- | --- | --- |');
  const only = args.only?.split(',') ?? Object.keys(PAYLOADS);
  const levels = args.concurrency.split(',').map(Number);
  try {
    for (const name of only) {
      const p = PAYLOADS[/** @type {keyof typeof PAYLOADS} */ (name)];
      for (const concurrency of levels) {
        const requests = Math.max(2 * concurrency, Math.round(p.requests * (args.quick ? 0.25 : 1)));
        /** @type {Record<string, { rps: number, p50: number, p99: number, cpu: number }>} */
        const row = {};
        for (const [label, server] of [['now', now], ['then', then]]) {
          const pid = /** @type {number} */ (server.child.pid);
          const cpu0 = cpuUs(pid).process;
          const r = await perfAnalyzer(server.address ?? '', { model: p.model, batch: p.batch, concurrency, requests, inputData: 'zero' });
          row[label] = { ...r, cpu: (cpuUs(pid).process - cpu0) / r.count };
        }
        const { now: a, then: b } = row;
        console.log(`| ${name} | ${concurrency} | ${a.rps.toFixed(0)} (${a.p50}, ${a.p99}) | ${b.rps.toFixed(0)} (${b.p50}, ${b.p99}) | ${(a.rps / b.rps).toFixed(2)} | ${a.cpu.toFixed(0)} / ${b.cpu.toFixed(0)} |`);
      }
    }
  } finally {
    await now.stop();
    await then.stop();
    temp.cleanup();
  }
}

console.log(`${new Date().toISOString().slice(0, 10)}, ${os.cpus()[0]?.model ?? 'unknown CPU'}, ${os.availableParallelism()} cores, Node ${process.version}, onnxruntime ${ortNode.env.versions.common}\n`);
console.log('Per run, in process, one intra-op thread (median; binding: bound input, output into our buffer, on a libuv thread or inline; JS: session.run)\n');
console.log('| model | binding, libuv thread | binding, inline | onnxruntime-node | binding / JS (thread / inline) |');
console.log('| --- | --- | --- | --- | --- |');
const runs = args.quick ? 500 : 2000;
await floor('Neg on [3]', path.join(FIXTURES, 'models', 'negate', 'model.onnx'), 'x', 'y', [3], [3], runs);
await floor('convnet, batch 1', path.join(FIXTURES, 'models', 'convnet', 'model.onnx'), 'image', 'scores', [1, 3, 32, 32], [1, 10], runs / 4);
await floor('convnet, batch 8', path.join(FIXTURES, 'models', 'convnet', 'model.onnx'), 'image', 'scores', [8, 3, 32, 32], [8, 10], runs / 8);
if (!args['skip-server']) {
  if (!existsSync(PERF_ANALYZER)) console.log('\nperf_analyzer is not installed (bash tools/install-perf-analyzer.sh): the server comparison is skipped');
  else await servers();
}
