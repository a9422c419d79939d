// ghz, a gRPC load tester nobody on this team wrote, calls ModelInfer with our proto/ files:
// a bounded run (count and time) must finish with every call OK, and /metrics must count every
// call. Its figures go to the log.
// tools/install-ghz.sh (run by test/run.sh) installs ghz into .toolchain/gopath with `go install`.
import { execFile } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import test from 'ava';
import { FIXTURES, ROOT, startServer, tempDir } from '../helpers/server.js';

const GHZ = path.join(ROOT, '.toolchain', 'gopath', 'bin', 'ghz');
const run = promisify(execFile);
const heldout = JSON.parse(readFileSync(path.join(FIXTURES, 'digits_heldout.json'), 'utf8'));

test('ghz drives ModelInfer at concurrency 8 with zero errors', async (t) => {
  t.true(existsSync(GHZ), `ghz is missing at ${GHZ}: tools/install-ghz.sh installs it (test/run.sh runs it)`);
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const server = await startServer({ model_repo: path.join(ROOT, 'bundles') });
  t.teardown(() => server.stop());
  const image = Buffer.from(Float32Array.from(heldout.images[0]).buffer).toString('base64');
  const data = path.join(temp.dir, 'request.json');
  writeFileSync(data, JSON.stringify({
    model_name: 'digits',
    inputs: [{ name: 'image', datatype: 'FP32', shape: [1, 8, 8] }],
    outputs: [{ name: 'label' }],
    raw_input_contents: [image],
  }));
  const { stdout } = await run(GHZ, [
    '--insecure',
    '--proto', path.join(ROOT, 'proto', 'grpc_service.proto'),
    '--import-paths', path.join(ROOT, 'proto'),
    '--call', 'inference.GRPCInferenceService/ModelInfer',
    '--data-file', data,
    '--total', '4000', '--concurrency', '8', '--timeout', '10s',
    '--format', 'json',
    server.address,
  ], { maxBuffer: 64 * 1024 * 1024 });
  const report = JSON.parse(stdout);
  t.log(JSON.stringify({ count: report.count, status: report.statusCodeDistribution, errors: report.errorDistribution }));
  t.is(report.count, 4000);
  t.deepEqual(report.statusCodeDistribution, { OK: 4000 });
  t.deepEqual(report.errorDistribution ?? {}, {});
  // A Prometheus scrape afterwards counts exactly what ghz sent.
  const metrics = await (await fetch(`http://127.0.0.1:${server.adminPort}/metrics`)).text();
  const sample = (/** @type {string} */ name) => Number(metrics.match(new RegExp(`^${name}\\{model="digits",version="1"\\} (\\S+)$`, 'm'))?.[1]);
  t.is(sample('nv_inference_request_success'), 4000);
  t.is(sample('nv_inference_count'), 4000);
  t.true(sample('nv_inference_exec_count') <= 4000);
  const ms = (/** @type {number} */ ns) => (ns / 1e6).toFixed(2);
  const pct = (/** @type {number} */ p) => report.latencyDistribution.find((/** @type {{ percentage: number, latency: number }} */ l) => l.percentage === p).latency;
  t.log(`ghz: ${report.count} calls at concurrency 8, ${report.rps.toFixed(0)} req/s, average ${ms(report.average)} ms, p50 ${ms(pct(50))} ms, p99 ${ms(pct(99))} ms; ${sample('nv_inference_exec_count')} executions`);
});
