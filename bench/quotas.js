// Tenant isolation by quotas (issue 65 item 3): one CPU device, one model; tenant `quiet` sends a
// steady trickle (closed loop, 2 clients) and its latency is measured alone, then beside tenant
// `noisy` flooding the same model (32 clients in a process of their own, at nice 19: --generator-nice; a flood as fast
// as they can, or --noisy-rate requests a second), first without quotas, then with
// `noisy` capped at 2 requests in flight (global.quotas.tenants.noisy.max_inflight), then at 0.1 device-seconds a second
// (device_seconds_per_second: what bounds the device time it takes from the quiet tenant). Prints the quiet
// tenant's p50 and p99 in each phase and as a ratio to its quiet p99, and how many of noisy's
// requests were answered and refused. The issue asks for the quiet tenant's p99 within 1.2x of its
// quiet p99 while the noisy one is over its quota. Last, the quiet tenant beside two threads that only spin: what CPU
// contention alone costs it on this machine, the floor under the flood's figures where the load generator shares the
// server's cores.
//
//   npm run build && node bench/quotas.js [--seconds 8] [--rounds 1] [--generator-nice 19] [--noisy-rate 0]
//     [--server-cpus LIST --generator-cpus LIST: the server and the load generator on cores apart (taskset's lists, e.g.
//      0-11 and 12-15), as clients on other hosts would be; on a host with few cores each side then has fewer]
//     [--interleave S: instead of a fresh server per phase, one server per quota for --seconds, the noisy side (or the
//      spinning threads) on in every other window of S seconds, the quiet tenant throughout; its p99 with the noisy
//      side on against its p99 in the windows between, on the same server over the same minute, so that a shared
//      machine's slow swings fall on both alike; a row more, noisy at 0.0001 device-seconds a second, nearly every
//      request refused: what its refusals alone cost the quiet tenant; and its control, the same flood refused by a
//      second server on this machine, none of it reaching the quiet tenant's: what the machine's shared cores cost]
//     [--rows 4,5: with --interleave, only these rows (1-based, in the order printed)]
//
// The machine is shared and noisy: compare the rows of one run, not runs of different days.
import { parseArgs } from 'node:util';
import http2 from 'node:http2';
import { readFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { InferenceClient } from '../dist/client/client.js';
import { ROOT, startServer, tempDir, tensor } from '../test/helpers/server.js';
import { mlpLayers, writeBundle } from '../test/helpers/mlp-catalog.js';
import { runWithCpu } from './proc-cpu.js';
import protobuf from 'protobufjs';

const { values: args } = parseArgs({
  options: {
    seconds: { type: 'string', default: '8' },
    'generator-nice': { type: 'string', default: '19' },
    'noisy-rate': { type: 'string', default: '0' },
    rounds: { type: 'string', default: '1' },
    'server-cpus': { type: 'string', default: '' },
    'generator-cpus': { type: 'string', default: '' },
    interleave: { type: 'string', default: '0' },
    rows: { type: 'string', default: '' },
  },
});
const SECONDS = Number(args.seconds);
// The noisy tenant's clients and the spinning threads run at this nice level (per thread, Linux): on a machine where
// the load generator cannot have cores of its own, it then takes only the CPU the server and the quiet tenant leave,
// which is what a flood from other hosts amounts to. 0 puts them level with the server (the figures before 2026-12-03).
const GENERATOR_NICE = Number(args['generator-nice']);
if (!Number.isInteger(GENERATOR_NICE) || GENERATOR_NICE < 0 || GENERATOR_NICE > 19) {
  throw new Error(`--generator-nice must be an integer from 0 to 19, got ${args['generator-nice']}`);
}
// The noisy tenant's offered load: 0 (the default) is a flood, each client sending again the moment it is answered or
// refused, as fast as the load generator's share of the machine allows; R > 0 is R requests a second in all, each
// client on a fixed schedule (open loop, as from many remote clients), so that its refusals cost the server the same
// in every phase and on every machine.
const ROUNDS = Number(args.rounds);
if (!Number.isInteger(ROUNDS) || ROUNDS < 1) throw new Error(`--rounds must be a whole number from 1, got ${args.rounds}`);
// With --interleave, the rows to run (1-based, as printed in order; empty: all).
const ROWS = args.rows ? args.rows.split(',').map(Number) : [];
if (!ROWS.every((r) => Number.isInteger(r) && r >= 1)) throw new Error(`--rows must be row numbers from 1, comma-separated, got ${args.rows}`);
const INTERLEAVE_MS = Number(args.interleave) * 1000;
if (!(INTERLEAVE_MS >= 0)) throw new Error(`--interleave must be a number of seconds, 0 or more, got ${args.interleave}`);
const NOISY_RATE = Number(args['noisy-rate']);
if (!(NOISY_RATE >= 0)) throw new Error(`--noisy-rate must be a number of requests a second, 0 or more, got ${args['noisy-rate']}`);
// Cores apart (Linux's taskset): the server started on SERVER_CPUS, this process (the quiet tenant's clients, the flood's
// thread and the spinning threads, which start later and inherit it) moved to GENERATOR_CPUS.
const SERVER_CPUS = args['server-cpus'];
const GENERATOR_CPUS = args['generator-cpus'];
for (const [option, list] of [['--server-cpus', SERVER_CPUS], ['--generator-cpus', GENERATOR_CPUS]]) {
  if (list && !/^\d+(-\d+)?(,\d+(-\d+)?)*$/.test(list)) throw new Error(`${option} must be a list of cores as taskset takes it (e.g. 0-11 or 0,2,4), got ${list}`);
}
if (GENERATOR_CPUS) execFileSync('taskset', ['-a', '-p', '-c', GENERATOR_CPUS, String(process.pid)], { stdio: 'ignore' });
const x = tensor('x', 'FP32', [1, 512], new Float32Array(512).fill(0.25));
const MODEL_INFER = '/inference.GRPCInferenceService/ModelInfer';
// Set in the flood's own process (`phase` starts this file again under `nice`): its options, as JSON.
const FLOOD_ENV = 'STOWAGE_BENCH_QUOTAS_FLOOD';

/** @param {number[]} values @param {number} p */
const percentile = (values, p) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] : NaN;
};

/**
 * Whether the noisy side is on at `t` (Date.now()): always without --interleave; with it, in every other window of
 * `windowMs` from `startMs`, the first one off (the quiet tenant alone).
 */
const noisyOn = (/** @type {number} */ t, /** @type {number} */ startMs, /** @type {number} */ windowMs) =>
  windowMs === 0 || Math.floor((t - startMs) / windowMs) % 2 === 1;

/** CPU seconds a process has used (user + system, from /proc: the server runs as a child). */
const cpuSeconds = (/** @type {number} */ pid) => {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
};

/**
 * The noisy tenant's flood, in a process of its own (`phase` starts it under `nice`): each of `clients` callers sends
 * again the moment it is answered or refused (or on its schedule at `rate`), until `untilMs` (Date.now()); resolves to
 * how many were answered, refused and failed. Apart from the quiet tenant's loop, as two tenants' clients are apart: on
 * one event loop the flood's own callbacks would delay the quiet tenant's answers in the load generator, and the quiet
 * p99 would measure the generator, not the server. Its calls are bare HTTP/2 (node:http2) carrying one ModelInfer
 * request encoded once: ~60 µs of CPU a call, where our gRPC client's cost ~500 and ghz's ~470. On a machine whose
 * cores the load generator shares with the server, what it takes of them weighs on the quiet tenant's figures as much
 * as what the server does, so the lighter it is, the more the figures say of the server.
 */
async function flood({ address, clients, untilMs, rate, startMs, windowMs }) {
  const gapMs = rate > 0 ? (clients * 1000) / rate : 0;
  const ModelInferRequest = protobuf.loadSync(path.join(ROOT, 'proto', 'grpc_service.proto')).lookupType('inference.ModelInferRequest');
  const message = ModelInferRequest.encode(ModelInferRequest.create({
    modelName: 'm', inputs: [{ name: x.name, datatype: x.datatype, shape: x.shape }], rawInputContents: [Buffer.from(x.data.buffer)],
  })).finish();
  // gRPC's length-prefixed message: no compression (0), then its length, big-endian.
  const body = Buffer.alloc(5 + message.length);
  body.writeUInt32BE(message.length, 1);
  body.set(message, 5);
  const sessions = [0, 1].map(() => http2.connect(`http://${address}`));
  const noisy = { ok: 0, refused: 0, failed: 0 };
  const call = (/** @type {http2.ClientHttp2Session} */ session) => new Promise((resolve) => {
    const stream = session.request({ ':method': 'POST', ':path': MODEL_INFER, 'content-type': 'application/grpc', te: 'trailers', 'stowage-tenant': 'noisy' });
    let status = '';
    // A refusal comes as headers alone (trailers-only), an answer's status in its trailers.
    stream.on('response', (headers) => { status = String(headers['grpc-status'] ?? status); });
    stream.on('trailers', (trailers) => { status = String(trailers['grpc-status'] ?? status); });
    stream.on('data', () => {});
    stream.on('error', () => {});
    stream.on('close', () => {
      // Anything but an answer or RESOURCE_EXHAUSTED (the quota's refusal) is a fault of the run, counted apart.
      if (status === '0') noisy.ok++;
      else if (status === '8') noisy.refused++;
      else noisy.failed++;
      resolve(undefined);
    });
    stream.end(body);
  });
  await Promise.all(Array.from({ length: clients }, async (_, i) => {
    let next = Date.now() + (gapMs * i) / clients;
    while (Date.now() < untilMs) {
      if (!noisyOn(Date.now(), startMs, windowMs)) {
        // A window off: wait for the next one on, and start its schedule there.
        const off = Date.now() - startMs;
        await new Promise((resolve) => setTimeout(resolve, windowMs - (off % windowMs)));
        next = Date.now() + (gapMs * i) / clients;
        continue;
      }
      if (gapMs > 0) {
        const wait = next - Date.now();
        next += gapMs;
        if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
      }
      await call(sessions[i % 2]);
    }
  }));
  for (const session of sessions) session.close();
  return noisy;
}

/**
 * One phase on a fresh server: quiet alone or beside noisy; `quota`: noisy's limits (global.quotas.tenants.noisy), false
 * for none; `hogs`: spinning threads. With --interleave the noisy side (or the threads) is on in every other window, and
 * the quiet tenant's figures come apart as `on` and `off` (by when each request was sent). `elsewhere`: the noisy
 * tenant sends to a second server of its own on this machine, with the same quota, instead of the quiet tenant's: the
 * same flood and the same refusals, but none of them on the quiet tenant's server (the control for what this server's
 * handling of them costs the quiet tenant, apart from what the machine's cores do).
 */
async function phase(noisyClients, quota, hogs = 0, elsewhere = false) {
  const temp = tempDir('stowage-bench-quotas-');
  const repo = path.join(temp.dir, 'repo');
  writeBundle(repo, 'm', mlpLayers(3, [512, 2048, 2048, 8]));
  const quotas = quota ? { tenants: { noisy: quota } } : {};
  const server = await startServer({ model_repo: repo, global: { quotas, runtime: { intra_op_threads: 1 } } }, { root: temp.dir, wrapper: SERVER_CPUS ? ['taskset', '-c', SERVER_CPUS] : [] });
  const other = elsewhere ? await startServer({ model_repo: repo, global: { quotas, runtime: { intra_op_threads: 1 } } }, { wrapper: SERVER_CPUS ? ['taskset', '-c', SERVER_CPUS] : [] }) : null;
  const clients = Array.from({ length: 2 }, () => new InferenceClient(server.address, { 'grpc.use_local_subchannel_pool': 1 }));
  for (let i = 0; i < 20; i++) await clients[i % 2].infer('m', [x]);
  const quiet = /** @type {number[]} */ ([]);
  const quietOn = /** @type {number[]} */ ([]);
  const startMs = Date.now();
  const untilMs = startMs + SECONDS * 1000;
  const cpu0 = { server: cpuSeconds(server.child.pid), bench: process.cpuUsage() };
  const floodOptions = { address: (other ?? server).address, clients: noisyClients, untilMs, rate: NOISY_RATE, startMs, windowMs: INTERLEAVE_MS };
  // The flood in a process of its own under `nice`, every thread of it niced (V8's collector and compiler threads too,
  // which a thread's own nice level leaves at 0); its cores are this process's (taskset's list is inherited).
  const flooding = noisyClients > 0
    ? runWithCpu('nice', ['-n', String(GENERATOR_NICE), process.execPath, fileURLToPath(import.meta.url)], { env: { ...process.env, [FLOOD_ENV]: JSON.stringify(floodOptions) }, maxBuffer: 2 ** 20 })
      .then(({ stdout, cpuUs }) => ({ .../** @type {{ ok: number, refused: number, failed: number }} */ (JSON.parse(stdout)), cpuUs }))
    : Promise.resolve({ ok: 0, refused: 0, failed: 0, cpuUs: 0 });
  // The machine's own floor: threads that only spin, sending nothing, take the cores a flood's client would.
  // With --interleave they sleep through the windows off (Atomics.wait: a thread's sleep).
  const spinners = Array.from({ length: hogs }, () => new Worker(
    `require('node:os').setPriority(${GENERATOR_NICE}); const until = ${untilMs}, start = ${startMs}, w = ${INTERLEAVE_MS};
    const nap = new Int32Array(new SharedArrayBuffer(4));
    while (Date.now() < until) if (w > 0 && Math.floor((Date.now() - start) / w) % 2 === 0) Atomics.wait(nap, 0, 0, 5);`,
    { eval: true },
  ));
  const quietLoop = async (/** @type {number} */ i) => {
    while (Date.now() < untilMs) {
      const t0 = performance.now();
      const on = INTERLEAVE_MS > 0 && noisyOn(Date.now(), startMs, INTERLEAVE_MS);
      await clients[i].infer('m', [x], { metadata: { 'stowage-tenant': 'quiet' } });
      (on ? quietOn : quiet).push(performance.now() - t0);
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
  };
  await Promise.all([quietLoop(0), quietLoop(1)]);
  const noisyCounts = await flooding;
  if (noisyCounts.failed > 0) console.error(`warning: ${noisyCounts.failed} of the noisy tenant's calls ended neither answered nor refused RESOURCE_EXHAUSTED`);
  const benchCpu = process.cpuUsage(cpu0.bench);
  // Cores each side used over the phase: on two cores, what the load generator takes the server does not get.
  const cores = { server: (cpuSeconds(server.child.pid) - cpu0.server) / SECONDS, bench: (benchCpu.user + benchCpu.system + noisyCounts.cpuUs) / 1e6 / SECONDS };
  await Promise.all(spinners.map((w) => w.terminate()));
  for (const c of clients) c.close();
  await server.stop();
  await other?.stop(); // its temporary directory goes with it (startServer's root is not given)
  temp.cleanup();
  const on = { p50: percentile(quietOn, 50), p99: percentile(quietOn, 99), quiet: quietOn.length };
  return { p50: percentile(quiet, 50), p99: percentile(quiet, 99), quiet: quiet.length, noisy: noisyCounts, cores, on };
}

if (process.env[FLOOD_ENV]) {
  process.stdout.write(JSON.stringify(await flood(JSON.parse(process.env[FLOOD_ENV]))));
} else if (INTERLEAVE_MS > 0) {
  console.log(`Interleaved: one server per row for ${SECONDS} s, the noisy side on in every other ${INTERLEAVE_MS / 1000} s window; quiet p99 on / off`);
  console.log('| round | noisy side | quiet requests off / on | quiet p50 ms off / on | quiet p99 ms off / on | p99 on / off | noisy answered | noisy refused | server cores | load generator cores |');
  console.log('| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |');
  const rounds = /** @type {Map<string, number>[]} */ ([]);
  const rows = /** @type {const} */ ([
    ['noisy, no quota', () => phase(32, false)],
    ['noisy, max_inflight 2', () => phase(32, { max_inflight: 2 })],
    // A burst of 0.05 s: the default, 1 s ahead of the rate, filled again in every window off, let the noisy tenant
    // through for the first quarter of every window on (~240 answered a second in all against ~85), which is not a
    // tenant over its quota.
    ['noisy, 0.1 device-seconds a second (burst 0.05 s)', () => phase(32, { device_seconds_per_second: 0.1, burst_seconds: 0.05 })],
    // What its refusals alone cost: a quota nearly nothing passes.
    ['noisy, 0.0001 device-seconds a second', () => phase(32, { device_seconds_per_second: 0.0001 })],
    // The control for the row above: the same flood refused by a second server on this machine, none of it on the
    // quiet tenant's. What the row above costs beyond this one is this server's handling of the refusals; what both
    // cost is the machine's (its cores shared by both servers and the load generator).
    ['noisy, 0.0001 device-seconds a second, at a second server', () => phase(32, { device_seconds_per_second: 0.0001 }, 0, true)],
    ['two spinning threads, no requests', () => phase(0, false, 2)],
  ]);
  for (let round = 1; round <= ROUNDS; round++) {
    const ratios = new Map();
    for (const [name, run] of rows.filter((_, i) => ROWS.length === 0 || ROWS.includes(i + 1))) {
      const r = await run();
      ratios.set(name, r.on.p99 / r.p99);
      console.log(`| ${round} | ${name} | ${r.quiet} / ${r.on.quiet} | ${r.p50.toFixed(2)} / ${r.on.p50.toFixed(2)} | ${r.p99.toFixed(2)} / ${r.on.p99.toFixed(2)} | ${(r.on.p99 / r.p99).toFixed(2)} | ${r.noisy.ok} | ${r.noisy.refused} | ${r.cores.server.toFixed(2)} | ${r.cores.bench.toFixed(2)} |`);
    }
    rounds.push(ratios);
  }
  // What the refusals cost the quiet tenant on its own server beyond what the same refusals cost it from a second
  // server on this machine: the server's handling of them, the machine's share taken out.
  const here = rounds.map((r) => r.get(rows[3][0])).filter((v) => v !== undefined);
  const there = rounds.map((r) => r.get(rows[4][0])).filter((v) => v !== undefined);
  if (here.length && there.length) {
    const median = (/** @type {number[]} */ v) => { const s = [...v].sort((a, b) => a - b); return (s[Math.floor((s.length - 1) / 2)] + s[Math.ceil((s.length - 1) / 2)]) / 2; };
    console.log(`Refusals alone, p99 on / off: ${here.map((v) => v.toFixed(2)).join(', ')} at the quiet tenant's server, ${there.map((v) => v.toFixed(2)).join(', ')} at a second server; medians ${median(here).toFixed(2)} and ${median(there).toFixed(2)}, their ratio ${(median(here) / median(there)).toFixed(2)}`);
  }
} else {
  console.log('| round | phase | quiet requests | quiet p50 ms | quiet p99 ms | p99 / alone | noisy answered | noisy refused | server cores | load generator cores |');
  console.log('| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |');
  // Rounds run the four phases again one after another, so that a quiet spell or a busy one of a shared machine falls
  // on every phase alike: compare a round's rows, and the rounds' spread.
  for (let round = 1; round <= ROUNDS; round++) {
    const alone = await phase(0, false);
    const flooded = await phase(32, false);
    const capped = await phase(32, { max_inflight: 2 });
    const rated = await phase(32, { device_seconds_per_second: 0.1 });
    const spun = await phase(0, false, 2);
    for (const [name, r] of /** @type {const} */ ([['quiet alone', alone], ['noisy beside, no quota', flooded], ['noisy beside, max_inflight 2', capped], ['noisy beside, 0.1 device-seconds a second', rated], ['beside two spinning threads, no requests', spun]])) {
      console.log(`| ${round} | ${name} | ${r.quiet} | ${r.p50.toFixed(2)} | ${r.p99.toFixed(2)} | ${(r.p99 / alone.p99).toFixed(2)} | ${r.noisy.ok} | ${r.noisy.refused} | ${r.cores.server.toFixed(2)} | ${r.cores.bench.toFixed(2)} |`);
    }
  }
}
