// NVIDIA's perf_analyzer (2.41, from the tritonclient wheel) against the real server: a bounded
// run inline and one with --shared-memory system must finish cleanly, and the server must count
// exactly the requests perf_analyzer says it sent. Its figures go to the log.
// test/run.sh installs it into .toolchain/perf_analyzer with tools/install-perf-analyzer.sh.
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import test from 'ava';
import { ROOT, startServer } from '../helpers/server.js';

const PERF_ANALYZER = path.join(ROOT, '.toolchain', 'perf_analyzer', 'perf_analyzer');
const run = promisify(execFile);

/**
 * Requests the server answered successfully for `model`, from its own statistics.
 * @param {import('../helpers/server.js').Server} server
 * @param {string} model
 */
async function served(server, model) {
  const { model_stats: [stats] } = await server.client.call('ModelStatistics', { name: model });
  return Number(stats.inference_stats.success.count);
}

/**
 * One bounded perf_analyzer run: windows of 100 requests at `concurrency`, at most 10 of them.
 * This checks that it works against us, not how fast: the stability band is wide (1000%) so that
 * a busy machine (other test files run beside this one) cannot fail it.
 * @param {import('ava').ExecutionContext} t
 * @param {import('../helpers/server.js').Server} server
 * @param {number} concurrency
 * @param {string[]} [extra]
 */
async function perfAnalyzer(t, server, concurrency, extra = []) {
  const { stdout } = await run(PERF_ANALYZER, [
    '-m', 'digits', '-u', server.address, '-i', 'grpc', '--async',
    '--concurrency-range', String(concurrency),
    '--measurement-mode', 'count_windows', '--measurement-request-count', '100',
    '--max-trials', '10', '--stability-percentage', '1000',
    ...extra,
  ], { timeout: 60_000, maxBuffer: 16 * 1024 * 1024 });
  const summary = stdout.match(/Concurrency: (\d+), throughput: ([\d.]+) infer\/sec, latency (\d+) usec/);
  if (!summary) throw new Error(`perf_analyzer printed no summary:\n${stdout}`);
  t.log(summary[0]);
  const sent = stdout.match(/Server:\s+Inference count: (\d+)/);
  return { throughput: Number(summary[2]), serverCount: Number(sent?.[1]), stdout };
}

/** @type {import('../helpers/server.js').Server} */
let server;
test.before(async () => {
  server = await startServer({ model_repo: path.join(ROOT, 'bundles') });
});
test.after.always(() => server?.stop());

test.serial('perf_analyzer runs inline at concurrency 1; the server counts what it reports', async (t) => {
  t.true(existsSync(PERF_ANALYZER), `perf_analyzer is missing at ${PERF_ANALYZER}: run tools/install-perf-analyzer.sh (test/run.sh does)`);
  const before = await served(server, 'digits');
  const { throughput, serverCount } = await perfAnalyzer(t, server, 1);
  t.true(throughput > 0);
  // perf_analyzer reads the server's statistics itself; they must agree with ours over the run.
  t.true(serverCount > 0, 'perf_analyzer read ModelStatistics');
  t.true(await served(server, 'digits') - before >= serverCount);
});

test.serial('perf_analyzer runs with --shared-memory system and leaves no region registered', async (t) => {
  t.true(existsSync(PERF_ANALYZER), `perf_analyzer is missing at ${PERF_ANALYZER}`);
  const before = await served(server, 'digits');
  // It unregisters every system and CUDA region first and last: both must succeed on a CPU server.
  const { throughput } = await perfAnalyzer(t, server, 4, ['--shared-memory', 'system', '--output-shared-memory-size', '1024']);
  t.true(throughput > 0);
  t.true(await served(server, 'digits') > before);
  const { regions } = await server.client.call('SystemSharedMemoryStatus', { name: '' });
  t.deepEqual(regions, {}, 'its regions were unregistered at the end');
  const registered = server.logs.filter((l) => l.msg === 'shared-memory region registered');
  t.true(registered.length >= 2, 'an input and an output region per concurrent request');
  t.true(server.logs.some((l) => l.msg === 'shared-memory regions unregistered'));
});
