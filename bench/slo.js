// Quality of service on one device (issue 65 item 4): two classes of traffic share one CPU device,
// `interactive` (its own model, priority 1, a deadline of a few times its lone run) and `batch`
// (another model, priority 2, no deadline), offered open loop (Poisson arrivals) at 1.5x, then 3x
// the device's capacity, where capacity is the saturated goodput of batch traffic alone (closed
// loop, 32 clients). Each load runs twice on the same server: with priorities and deadlines on (the
// requests carry Triton's `priority` and `timeout` parameters: the device serves level 1 first and a
// request that cannot make its deadline is refused at once, src/shared/backlog.ts, DeadlineAdmission) and
// off (neither parameter: today's behaviour for a client that says nothing; its deadline is only the
// client's own). Prints, per run, the interactive class's deadline attainment (answered within its
// deadline, of those sent), the p99 of its answers, its refusals, and the goodput of all (batch
// answers, and interactive answers within their deadline, per second) as a share of capacity.
//
//   npm run build && node bench/slo.js [--seconds 10] [--loads 1.5,3] [--interactive-share 0.2] [--deadline-x 4] [--edge-threads 0]
//     [--image-size 32: the convnets' input side; 64 costs each row ~4x, so the device saturates at a
//      quarter of the requests and the front end's share of the cores is a quarter as large]
//
// Each row also says the p99 of the server's main event-loop delay over it (prom-client's, read from
// the admin port, less its 10 ms sampling interval): on a 2-core machine the front end shares a core with this load generator, and a
// delay of tens of ms there is time no scheduler can give back.
//
// The machine is shared and noisy: compare the rows of one run, not runs of different days.
import { parseArgs } from 'node:util';
import path from 'node:path';
import { InferenceClient } from '../dist/client/client.js';
import { startServer, tempDir, tensor } from '../test/helpers/server.js';
import { writeConvnetBundle } from '../test/helpers/convnet.js';

const { values: args } = parseArgs({
  options: {
    seconds: { type: 'string', default: '10' },
    loads: { type: 'string', default: '1.5,3' },
    'interactive-share': { type: 'string', default: '0.2' },
    'deadline-x': { type: 'string', default: '4' },
    'edge-threads': { type: 'string', default: '0' },
    'image-size': { type: 'string', default: '32' },
  },
});
const SECONDS = Number(args.seconds);
const SHARE = Number(args['interactive-share']);

const temp = tempDir('stowage-bench-slo-');
const repo = path.join(temp.dir, 'repo');
// Two convnets of one shape (test/helpers/convnet.js: 3x32x32 in, 64 channels, five 3x3
// convolutions), heavy enough that the device, not the front end, is what saturates, and whose
// run grows with its rows (~5 ms a row here at batch 1 and at 8), as a vision model's does on a
// CPU. Until 2026-11-30 the bench served a 512-4096-4096-8 MLP, bound by reading its 80 MB of
// weights: a batch of 8 cost 1.8x a batch of 1, so each interactive request run alone cost nearly a
// full batch, and interactive traffic at 30% of capacity took ~70% of the device by itself (the
// 0.6x goodput of both modes). One ONNX Runtime thread: the device takes one core, and the gRPC
// front end and this load generator share the rest (the bench is about the device's scheduling).
const SHAPE = { size: Number(args['image-size']), channels: 64, layers: 4 };
if (!Number.isInteger(SHAPE.size) || SHAPE.size < 8) {
  console.error(`--image-size ${args['image-size']}: expected a whole number of pixels, 8 or more`);
  process.exit(2);
}
writeConvnetBundle(repo, 'interactive', { ...SHAPE, seed: 1 });
writeConvnetBundle(repo, 'batch', { ...SHAPE, seed: 2 });
const server = await startServer({ model_repo: repo, global: { runtime: { intra_op_threads: 1 }, endpoints: { edge_threads: Number(args['edge-threads']) } } }, { root: temp.dir });
const clients = Array.from({ length: 4 }, () => new InferenceClient(server.address, { 'grpc.use_local_subchannel_pool': 1 }));
const x = tensor('image', 'FP32', [1, 3, SHAPE.size, SHAPE.size], new Float32Array(3 * SHAPE.size * SHAPE.size).fill(0.25));
const client = (/** @type {number} */ i) => clients[i % clients.length];

/** @param {number[]} values */
const percentile = (values, p) => {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
};

// Warm both models (compile, first runs), then time a lone interactive run.
for (let i = 0; i < 20; i++) await Promise.all([client(i).infer('interactive', [x]), client(i).infer('batch', [x])]);
const lone = [];
for (let i = 0; i < 50; i++) {
  const t0 = performance.now();
  await client(i).infer('interactive', [x]);
  lone.push(performance.now() - t0);
}
const loneMs = percentile(lone, 50);
const deadlineMs = Math.max(5, Math.round(Number(args['deadline-x']) * loneMs));

// Capacity: batch traffic alone, closed loop, 32 clients, for the run's length.
async function capacity() {
  let done = 0;
  const until = performance.now() + SECONDS * 1000;
  await Promise.all(Array.from({ length: 32 }, async (_, i) => {
    while (performance.now() < until) {
      await client(i).infer('batch', [x]);
      done++;
    }
  }));
  return done / SECONDS;
}
const capacityPerS = await capacity();
console.log(`lone interactive run ${loneMs.toFixed(2)} ms (p50 of 50), deadline ${deadlineMs} ms; capacity ${capacityPerS.toFixed(0)} requests/s (batch alone, 32 clients)`);

/** Open-loop traffic at `rate` requests/s for SECONDS, `on`: with priorities and deadlines. */
async function offer(rate, on) {
  const interactive = { sent: 0, inTime: 0, late: 0, refused: 0, failed: 0, latencies: /** @type {number[]} */ ([]) };
  const batch = { sent: 0, ok: 0, failed: 0 };
  const pending = [];
  const start = performance.now();
  let next = start;
  let i = 0;
  while (next < start + SECONDS * 1000) {
    const wait = next - performance.now();
    if (wait > 1) await new Promise((resolve) => setTimeout(resolve, wait));
    const c = client(i++);
    if (Math.random() < SHARE) {
      interactive.sent++;
      const t0 = performance.now();
      const parameters = on ? { priority: { uint64_param: '1' }, timeout: { int64_param: String(deadlineMs * 1000) } } : {};
      pending.push(c.infer('interactive', [x], { parameters }).then(() => {
        const ms = performance.now() - t0;
        interactive.latencies.push(ms);
        if (ms <= deadlineMs) interactive.inTime++;
        else interactive.late++;
      }, (/** @type {{ code?: number }} */ err) => {
        if (err.code === 4) interactive.refused++; // DEADLINE_EXCEEDED: refused (or shed) by the server
        else interactive.failed++;
      }));
    } else {
      batch.sent++;
      const parameters = on ? { priority: { uint64_param: '2' } } : {};
      pending.push(c.infer('batch', [x], { parameters }).then(() => { batch.ok++; }, () => { batch.failed++; }));
    }
    next += (-Math.log(1 - Math.random()) / rate) * 1000; // Poisson arrivals
  }
  await Promise.all(pending);
  const elapsed = (performance.now() - start) / 1000;
  return { interactive, batch, goodput: (batch.ok + interactive.inTime) / Math.max(elapsed, SECONDS) };
}

/**
 * prom-client's event-loop monitor samples every 10 ms (its eventLoopMonitoringPrecision), and Node's
 * histogram records the whole time between two samples: an idle loop reads 10.2 ms at its p50.
 */
const LOOP_SAMPLE_MS = 10;

/**
 * p99 of the server's main event-loop delay since the last scrape (prom-client resets it as it is
 * read), ms: what a sample waited past its 10 ms. Until 2026-12-02 this printed the histogram's
 * p99 as it is, 10 ms more than the loop was late.
 */
async function loopP99Ms() {
  const text = await (await fetch(`http://127.0.0.1:${server.adminPort}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith('nodejs_eventloop_lag_p99_seconds '));
  return line ? Math.max(0, Number(line.split(' ')[1]) * 1000 - LOOP_SAMPLE_MS) : NaN;
}

console.log('| load | priorities and deadlines | interactive sent | within deadline | p99 of answers (ms) | refused at once | batch answered | goodput / capacity | server loop p99 (ms) |');
console.log('| --- | --- | --- | --- | --- | --- | --- | --- | --- |');
for (const load of args.loads.split(',').map(Number)) {
  for (const on of [true, false]) {
    await loopP99Ms(); // from here
    const r = await offer(load * capacityPerS, on);
    const loopMs = await loopP99Ms();
    const { interactive: i, batch: b } = r;
    console.log(`| ${load}x | ${on ? 'on' : 'off'} | ${i.sent} | ${((100 * i.inTime) / Math.max(1, i.sent)).toFixed(1)}% | ${percentile(i.latencies, 99).toFixed(1)} | ${i.refused} | ${b.ok} of ${b.sent} | ${(r.goodput / capacityPerS).toFixed(2)} | ${loopMs.toFixed(1)} |`);
  }
}
for (const c of clients) c.close();
await server.stop();
temp.cleanup();
