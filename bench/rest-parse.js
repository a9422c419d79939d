// How long a large JSON inference body holds the thread that serves everyone: one client sends
// JSON bodies of growing size (FP32 `data`, an identity model, so the answer is as large again)
// while another sends small requests every 5 ms; the figures are the large request's time and
// the small ones' latency meanwhile (their worst is about the longest the thread was held), with
// the server's own event-loop delay (prom-client's nodejs_eventloop_lag_max_seconds, reset per
// size by a fresh server).
//
//   npm run build && node bench/rest-parse.js [--sizes 1,8,16,32] (MiB of JSON body; echo takes at most 2048 rows, about 38 MiB)
import { parseArgs } from 'node:util';
import path from 'node:path';
import { FIXTURES, makeRepository, scrapeMetrics, startServer, tempDir } from '../test/helpers/server.js';

const { values } = parseArgs({ options: { sizes: { type: 'string', default: '1,8,16,32' } } });
const sizes = values.sizes.split(',').map(Number);

/** A JSON body of about `mib` MiB: FP32 data for echo (f32[n, 1024]), 17-digit numbers as Python's json writes float32 values. */
function body(mib) {
  const perRow = 1024 * 19; // ~19 bytes a number written in full
  const rows = Math.max(1, Math.round((mib * 2 ** 20) / perRow));
  const row = Array.from({ length: 1024 }, (_, i) => String(Math.fround(Math.sin(i) * 123.456))).join(',');
  const data = Array.from({ length: rows }, () => row).join(',');
  return { rows, text: `{"inputs":[{"name":"x","datatype":"FP32","shape":[${rows},1024],"data":[${data}]}]}` };
}

const pct = (/** @type {number[]} */ xs, /** @type {number} */ p) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))];

console.log('| JSON body | large request (parse, run, answer) | small requests meanwhile: p50 / p99 / max | server event-loop delay, max |');
console.log('| --- | --- | --- | --- |');
for (const mib of sizes) {
  const temp = tempDir();
  const repo = makeRepository(temp.dir, { echo: path.join(FIXTURES, 'models', 'echo') });
  const server = await startServer({ model_repo: repo, global: { endpoints: { max_json_body_bytes: 256 * 2 ** 20 } } }, { root: temp.dir });
  try {
    const { rows, text } = body(mib);
    const small = JSON.stringify({ inputs: [{ name: 'x', datatype: 'FP32', shape: [1, 1024], data: Array(1024).fill(1) }] });
    // Warm both paths.
    await fetch(`${server.rest}/v2/models/echo/infer`, { method: 'POST', body: small });
    const latencies = [];
    let running = true;
    const prober = (async () => {
      while (running) {
        const t0 = performance.now();
        await fetch(`${server.rest}/v2/models/echo/infer`, { method: 'POST', body: small }).then((r) => r.arrayBuffer());
        latencies.push(performance.now() - t0);
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    })();
    await new Promise((resolve) => setTimeout(resolve, 300));
    const t0 = performance.now();
    const res = await fetch(`${server.rest}/v2/models/echo/infer`, { method: 'POST', body: text });
    const answer = await res.text();
    const took = performance.now() - t0;
    running = false;
    await prober;
    if (res.status !== 200 || answer.length < text.length / 2) throw new Error(`the large request answered ${res.status}: ${answer.slice(0, 200)}`);
    const lag = (await scrapeMetrics(server.adminPort)).nodejs_eventloop_lag_max_seconds * 1000;
    console.log(`| ${(text.length / 2 ** 20).toFixed(1)} MiB (${rows * 1024} elements) | ${took.toFixed(0)} ms | ${pct(latencies, 0.5).toFixed(1)} / ${pct(latencies, 0.99).toFixed(1)} / ${Math.max(...latencies).toFixed(1)} ms (${latencies.length} requests) | ${lag.toFixed(0)} ms |`);
  } finally {
    await server.stop();
    temp.cleanup();
  }
}
