// Which of our files a gRPC inference request actually runs through, measured rather than written
// down (issue 63: "a gRPC request's walk touches at most 25 files"). The built server runs twice
// under V8's precise coverage (NODE_V8_COVERAGE: every thread writes each function's call count
// when it exits), once answering WARM requests and once WARM + COUNT, one at a time on one edge
// thread, for a plain model; a file is on the walk when some function of it ran at least once per
// extra request. What start-up, loading and shutdown run is in both runs and cancels out.
//
//   npm run build && node tools/request-walk.mjs [--count 200] [--edge-threads 1] [--json]
//
// Prints the files by the thread they ran on (edge, device, main) and their number;
// docs/architecture.md's walk names the same files, step by step.
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { InferenceClient } from '../dist/client/client.js';
import { mlpLayers, writeBundle } from '../test/helpers/mlp-catalog.js';
import { startServer, tempDir, tensor } from '../test/helpers/server.js';

const { values: args } = parseArgs({
  options: { count: { type: 'string', default: '200' }, 'edge-threads': { type: 'string', default: '1' }, json: { type: 'boolean', default: false } },
});
const COUNT = Number(args.count);
const WARM = 20;
const DIST = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', 'dist');

/**
 * Per thread kind and built file under dist/, each function's call count, from the coverage files
 * of one run. A thread's kind is read from the entry script its coverage holds.
 */
function callCounts(dir) {
  /** @type {Map<string, number>} "kind\tfile\tfunction@offset" -> calls */
  const counts = new Map();
  for (const name of readdirSync(dir)) {
    const { result } = JSON.parse(readFileSync(path.join(dir, name), 'utf8'));
    const ours = result.filter((s) => s.url.startsWith(`file://${DIST}/`));
    const urls = ours.map((s) => s.url);
    const kind = urls.some((u) => u.endsWith('/actors/edge/worker.js')) ? 'edge'
      : urls.some((u) => u.endsWith('/actors/device/worker.js')) ? 'device'
        : urls.some((u) => u.endsWith('/main.js')) ? 'main' : 'other';
    for (const script of ours) {
      const file = path.relative(DIST, fileURLToPath(script.url)).replace(/\.js$/, '.ts');
      for (const fn of script.functions) {
        const key = `${kind}\t${file}\t${fn.functionName}@${fn.ranges[0].startOffset}`;
        counts.set(key, (counts.get(key) ?? 0) + fn.ranges[0].count);
      }
    }
  }
  return counts;
}

/** One run: a fresh server under coverage answering `requests` one at a time; its coverage folder. */
async function run(requests) {
  const temp = tempDir('stowage-walk-');
  const coverage = mkdtempSync(path.join(os.tmpdir(), 'stowage-walk-coverage-'));
  const repo = path.join(temp.dir, 'repo');
  writeBundle(repo, 'm', mlpLayers(3, [16, 32, 4]));
  const server = await startServer(
    { model_repo: repo, global: { endpoints: { edge_threads: Number(args['edge-threads']) } } },
    { root: temp.dir, env: { NODE_V8_COVERAGE: coverage } },
  );
  const client = new InferenceClient(server.address);
  const x = tensor('x', 'FP32', [1, 16], new Float32Array(16).fill(0.5));
  try {
    for (let i = 0; i < requests; i++) await client.infer('m', [x]);
  } finally {
    client.close();
    await server.stop();
    temp.cleanup();
  }
  return coverage;
}

const before = await run(WARM);
const after = await run(WARM + COUNT);
const a = callCounts(before);
const b = callCounts(after);
rmSync(before, { recursive: true, force: true });
rmSync(after, { recursive: true, force: true });

/** @type {Map<string, Set<string>>} thread kind -> files a function of which ran once per request or more */
const walk = new Map();
for (const [key, calls] of b) {
  if (calls - (a.get(key) ?? 0) < COUNT) continue;
  const [kind, file] = key.split('\t');
  if (!walk.has(kind)) walk.set(kind, new Set());
  walk.get(kind).add(file);
}
const files = new Set([...walk.values()].flatMap((s) => [...s]));
if (args.json) {
  console.log(JSON.stringify({ count: COUNT, files: [...files].sort(), threads: Object.fromEntries([...walk].map(([k, s]) => [k, [...s].sort()])) }));
} else {
  for (const [kind, set] of [...walk].sort()) console.log(`${kind} (${set.size}): ${[...set].sort().join(', ')}`);
  console.log(`files a gRPC request runs through: ${files.size}`);
}
