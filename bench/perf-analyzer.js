// What the benchmarks share: the load generators, NVIDIA's perf_analyzer and ghz (installed by
// tools/install-perf-analyzer.sh and tools/install-ghz.sh into .toolchain/), run once per point
// and read back, and the bare grpc-js echo server (bench/echo-server.js) that is the gRPC front
// end's ceiling.
import { spawn } from 'node:child_process';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { ROOT } from '../test/helpers/server.js';
import { runWithCpu } from './proc-cpu.js';

export const PERF_ANALYZER = path.join(ROOT, '.toolchain', 'perf_analyzer', 'perf_analyzer');
export const GHZ = path.join(ROOT, '.toolchain', 'gopath', 'bin', 'ghz');

/**
 * One perf_analyzer point (async gRPC, count windows) against `address`: requests/s (rows/s
 * divided by the batch), p50 and p99 in µs, how many requests the client counted, and the CPU µs
 * perf_analyzer itself used (runWithCpu). `sharedMemory: 'system'` (or 'cuda') puts inputs and outputs in system (or CUDA) shared memory
 * (`outputBytes`: the largest output's size); `inputData: 'zero'` sends zeros instead of random
 * bytes. `protocol: 'http'` drives the REST port instead (`address` then the REST host:port).
 */
export async function perfAnalyzer(address, { model, batch, concurrency, requests, sharedMemory, outputBytes, inputData, protocol = 'grpc' }) {
  const args = [
    '-m', model, '-u', address, '-i', protocol, '--async', '-b', String(batch),
    '--concurrency-range', String(concurrency), '--measurement-mode', 'count_windows',
    '--measurement-request-count', String(Math.round(requests)), '--max-trials', '3', '--stability-percentage', '1000',
    ...(inputData ? ['--input-data', inputData] : []),
    ...(sharedMemory ? ['--shared-memory', sharedMemory, '--output-shared-memory-size', String(outputBytes)] : []),
  ];
  const { stdout, cpuUs } = await runWithCpu(PERF_ANALYZER, args, { timeout: 600_000, maxBuffer: 64 * 2 ** 20 });
  return {
    rps: Number(stdout.match(/Throughput: ([\d.]+(?:e[+-]?\d+)?) infer\/sec/)?.[1]) / batch,
    p50: Number(stdout.match(/p50 latency: (\d+) usec/)?.[1]),
    p99: Number(stdout.match(/p99 latency: (\d+) usec/)?.[1]),
    count: Number(stdout.match(/Request count: (\d+)/)?.[1]),
    clientUs: cpuUs,
  };
}

/**
 * One ghz point against `address`: `requests` unary ModelInfer calls from `concurrency` workers
 * (at `rate` requests/s, or as fast as they go without it) with the serialized ModelInferRequest
 * messages in `file` (one message, or count-delimited ones: ghz sends message i mod n as request
 * i). Rejects unless every call is OK. Requests/s, p50 and p99 in µs, and ghz's own CPU µs.
 */
export async function ghz(address, file, { concurrency, requests, rate }) {
  const { stdout, cpuUs } = await runWithCpu(GHZ, [
    '--insecure', '--proto', path.join(ROOT, 'proto', 'grpc_service.proto'), '--import-paths', path.join(ROOT, 'proto'),
    '--call', 'inference.GRPCInferenceService/ModelInfer', '--binary-file', file,
    '-c', String(concurrency), '-n', String(requests), ...(rate ? ['--rps', String(rate)] : []), '--timeout', '60s', '-O', 'json', address,
  ], { timeout: 600_000, maxBuffer: 64 * 2 ** 20 });
  const report = JSON.parse(stdout);
  const ok = report.statusCodeDistribution?.OK ?? 0;
  if (ok !== requests) throw new Error(`ghz against ${address}: ${ok} of ${requests} OK: ${JSON.stringify(report.errorDistribution)}`);
  const at = (p) => (report.latencyDistribution.find((d) => d.percentage === p)?.latency ?? NaN) / 1000;
  return { rps: report.rps, p50: at(50), p99: at(99), count: requests, clientUs: cpuUs };
}

/**
 * Start bench/echo-server.js answering as Stowage does for the models in `modelsFile` (see its
 * header); `window` 0 keeps HTTP/2's 64 KiB windows, else the tuned size.
 */
export async function startEcho(modelsFile, window) {
  const child = spawn(process.execPath, [path.join(ROOT, 'bench', 'echo-server.js'), modelsFile, '--window', String(window)], { stdio: ['ignore', 'pipe', 'inherit'] });
  const lines = createInterface({ input: child.stdout });
  const port = await new Promise((resolve, reject) => {
    lines.once('line', (line) => resolve(Number(line.split(' ')[1])));
    child.once('exit', (code) => reject(new Error(`echo server exited ${code}`)));
  });
  return { name: window ? 'echo (tuned)' : 'echo', address: `127.0.0.1:${port}`, pid: child.pid, stop: () => child.kill('SIGTERM') };
}
