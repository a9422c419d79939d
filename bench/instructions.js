// Instructions a request costs the server, counted by valgrind (callgrind), to compare two builds
// where requests/s cannot: on this shared 2-core machine one point of bench/edges.js moved 10-30%
// between runs (docs/performance.md), while a count of instructions does not depend on what else
// the machine runs. Each build and edge_threads setting is one server under callgrind; every point
// (protocol x payload, one request at a time) is warmed up, then counted `--reps` times: counters
// zeroed, the point's requests sent, counters dumped, each thread's dump read.
//
// What is counted, per request, summed over the server's threads: *work*, every instruction outside
// V8's garbage collector and its optimising compilers (the request path itself, grpc-js, HTTP/2,
// ONNX Runtime, the copies); *gc*, the collector's, printed beside (it follows allocation, but
// where it lands in a window of a few hundred requests is luck: ±10% between windows). The
// compilers' are left out: tiering is warm-up, and runs on V8's own threads when it pleases. The
// server's idle instructions (timers: ~0.5 M a second under valgrind) are measured once per server,
// after its warm-up, and taken out of each window in proportion to its wall time. --top N (with
// --baseline) prints, per point and setting, the N functions of the work whose own instructions a
// request differ most between the two builds (last window; V8's generated code, which valgrind
// cannot name, is one entry, its builtins are named). INSTRUCTIONS_THREADS=1 prints every dump's
// threads (the main thread is 01).
//
// V8 tiers up 10x sooner than by default (--invocation-count-for-turbofan=300 and two more, below),
// so that a warm-up of ~1,500 requests leaves a function's code as ~15,000 would: with the
// defaults the device thread's count was still falling 2% a window after 6,500. With them, six
// windows of 500 requests of one server read the main thread's work within ±0.6% and the device
// thread's within ±0.3% (the 2026-12-02 trial). The figures are valgrind's world: every thread of
// the server runs on one core in turn, about 50x slower, so concurrency other than 1 batches
// differently than on a real machine; the default is 1.
//
//   npm run build && node bench/instructions.js [--baseline DIR] [--edges 0,2] [--protocols grpc,http]
//                                               [--only 64B,600KiB,8MiB] [--reps 3] [--scale 1] [--concurrency 1]
//                                               [--top N]
//
// --baseline DIR: the same settings served by the build in DIR (another checkout of Stowage, built:
// `git worktree add DIR REV && (cd DIR && npm ci)`), each row beside this build's with their ratio.
// A build before STOWAGE_START_TIMEOUT_SCALE (2026-12-02) gives its device and edge threads 30 s to
// start, too short under valgrind beside a busy machine: lengthen DEVICE_START_TIMEOUT_MS in its
// dist/shared/constants.js and EDGE_START_TIMEOUT_MS in its dist/actors/edge/handle.js by hand.
// Needs valgrind (Debian's package `valgrind`); one setting's servers run at a time, the builds side
// by side (one core each), a run of the defaults with a baseline takes ~30 minutes here.
//
// --name-js: V8's generated code named by function (node's --perf-basic-prof map), in --top's
// lists, which also print each server's idle by function.
import { execFile, execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { parseArgs } from 'node:util';
import { FIXTURES, makeRepository, startServer, tempDir } from '../test/helpers/server.js';
import { mlpLayers, writeBundle } from '../test/helpers/mlp-catalog.js';

const run = promisify(execFile);
const { values: args } = parseArgs({
  options: {
    baseline: { type: 'string' },
    edges: { type: 'string', default: '0,2' },
    protocols: { type: 'string', default: 'grpc,http' },
    only: { type: 'string', default: '64B,600KiB,8MiB' },
    reps: { type: 'string', default: '3' },
    scale: { type: 'string', default: '1' },
    concurrency: { type: 'string', default: '1' },
    top: { type: 'string', default: '0' },
    'name-js': { type: 'boolean', default: false },
  },
});
try {
  execFileSync('valgrind', ['--version'], { stdio: 'ignore' });
} catch {
  console.log('valgrind is missing: install Debian\'s package `valgrind` to count instructions');
  process.exit(0);
}
if (args.baseline && !existsSync(path.resolve(args.baseline, 'dist', 'main.js'))) {
  console.error(`--baseline ${args.baseline}: no built Stowage there (dist/main.js); run \`npm ci\` in it first`);
  process.exit(2);
}

/** Requests a window counts and the warm-up before the first (both times --scale for the window). */
const PAYLOADS = {
  '64B': { model: 'p64', rows: 1, width: 16, requests: 300, warm: 1500 },
  '600KiB': { model: 'echo', rows: 150, width: 1024, requests: 40, warm: 150 },
  '8MiB': { model: 'echo', rows: 2048, width: 1024, requests: 6, warm: 20 },
};
// --no-memory-reducer: V8 runs a full collection when a thread falls idle, which landed in the idle
// measure (6.2 M instructions a second read there instead of ~0.5) and, taken out of every window,
// made a build 20% cheaper than it is.
const V8_FLAGS = ['--initial-old-space-size=128', '--invocation-count-for-turbofan=300', '--minimum-invocations-after-ic-update=50', '--invocation-count-for-maglev=40', '--no-memory-reducer'];
/** How long each server's idle is measured, once warm. */
const IDLE_MS = 10_000;
const payloads = args.only.split(',');
for (const p of payloads) if (!PAYLOADS[p]) throw new Error(`--only ${p}: expected some of ${Object.keys(PAYLOADS).join(', ')}`);
const protocols = args.protocols.split(',');
const reps = Number(args.reps);
const scale = Number(args.scale);
const concurrency = Number(args.concurrency);
const settings = args.edges.split(',').map(Number);
const top = Number(args.top);
const nameJs = args['name-js'];

const temp = tempDir('stowage-instructions-');
const repo = makeRepository(temp.dir, { echo: path.join(FIXTURES, 'models', 'echo') });
writeBundle(repo, 'p64', mlpLayers(1, [16, 16]));

// The collector's and the optimising compilers' functions, by their symbols in node's binary.
const GC = /v8::internal::(Heap|Scaveng|MarkCompact|MinorMarkSweep|MinorGC|ConcurrentMarking|IncrementalMarking|Marking|Sweep|Evacuat|PagedSpace|NewSpace|SemiSpace|YoungGeneration|RememberedSet|SlotSet|TypedSlot|ArrayBufferSweeper|GCTracer|LargeObjectSpace|MemoryReducer|MemoryAllocator|\w*Visitor|BodyDescriptor|HeapObject::SizeFromMap)|heap::base::|cppgc::|Visit\w*Pointers?\b/;
const JIT = /v8::internal::(compiler::|maglev::|baseline::|Compiler::|OptimizingCompile|interpreter::BytecodeGenerator|Parser|Scanner|PreParser|Zone\b)/;

/**
 * One thread's dump read: its instructions in the collector, the compilers and the rest. Callgrind's
 * format: `fn=` starts a function's lines (its name given once, then by number), a cost line is a
 * position and a count, and the cost line after `calls=` is a call's inclusive cost (skipped: only
 * each function's own instructions are summed, so nothing is counted twice).
 */
function readDump(file, nameCode) {
  const names = new Map();
  const sums = { work: 0, gc: 0, jit: 0 };
  /** Each function's own instructions, with --top (generated code, named by its address, as one). */
  const fns = new Map();
  let fn = '';
  let kind = 'work';
  let callCost = false;
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    const named = /^c?fn=\((\d+)\)(?: (.*))?$/.exec(line);
    if (named) {
      if (named[2] !== undefined) names.set(named[1], named[2]);
      if (line.startsWith('fn=')) {
        const name = names.get(named[1]) ?? '';
        kind = GC.test(name) ? 'gc' : JIT.test(name) ? 'jit' : 'work';
        const code = /^0x([0-9a-f]+)('\d+)?$/.exec(name);
        fn = code ? nameCode(code[1]) : name;
      }
      continue;
    }
    if (line.startsWith('calls=')) { callCost = true; continue; }
    if (!/^[-+*\d]/.test(line)) continue;
    if (callCost) { callCost = false; continue; }
    const cost = Number(line.split(' ')[1]) || 0;
    sums[kind] += cost;
    if (top > 0 && kind === 'work') fns.set(fn, (fns.get(fn) ?? 0) + cost);
  }
  return { ...sums, fns };
}

/**
 * With --name-js, a namer of V8's generated code at a hex address (callgrind names code it has no
 * symbol for by its address): the function V8's perf map (`--perf-basic-prof`, /tmp/perf-PID.map,
 * each line `start size name`, every thread's code in one file) says is there, the last written
 * where code was freed and its memory reused. Without it, all of it is one entry.
 */
function codeNamer(pid) {
  if (!nameJs) return () => '(V8 generated code)';
  const file = `/tmp/perf-${pid}.map`;
  const entries = existsSync(file) ? readFileSync(file, 'utf8').split('\n').flatMap((line, order) => {
    const m = /^([0-9a-f]+) ([0-9a-f]+) (.*)$/.exec(line);
    return m ? [{ start: parseInt(m[1], 16), end: parseInt(m[1], 16) + parseInt(m[2], 16), name: m[3], order }] : [];
  }) : [];
  entries.sort((a, b) => a.start - b.start || a.order - b.order);
  const cache = new Map();
  return (hex) => {
    let name = cache.get(hex);
    if (name !== undefined) return name;
    const at = parseInt(hex, 16);
    let lo = 0;
    let hi = entries.length - 1;
    let found = -1;
    while (lo <= hi) { // the last entry starting at or before `at`
      const mid = (lo + hi) >> 1;
      if (entries[mid].start <= at) { found = mid; lo = mid + 1; } else hi = mid - 1;
    }
    // Of the entries that cover `at` near it, the one written last.
    let best = null;
    for (let i = found; i >= 0 && i > found - 64; i--) if (entries[i].end > at && (!best || entries[i].order > best.order)) best = entries[i];
    // `JS:*'f /abs/dist/x.js:1:2` (the marker says its tier): by function and file, whichever build and line.
    name = best ? `JS ${best.name.replace(/^JS:[*~^+]?'?/, '').replace(/(file:\/\/)?\/\S*?\/(dist|node_modules)\//, '$2/').replace(/:\d+:\d+$/, '')}` : '(V8 generated code, unnamed)';
    cache.set(hex, name);
    return name;
  };
}

/** A server under callgrind, with one thread's dump a file (`cg.PID.N-TT`: the Nth dump, thread TT). */
async function startCounted(setting, main, label) {
  // The repository is looked at once a day, not every 15 s: a look costs tens of millions of
  // instructions under valgrind, and one landing in a window (or in the idle measure) moved a
  // point's median by up to 7% between runs (2026-12-02: the same build read 489 and 523 thousand).
  const global = { logging: { level: 'info' }, model_poll_seconds: 86_400, endpoints: { edge_threads: setting } };
  const server = await startServer({ model_repo: repo, global }, {
    root: temp.dir,
    nodeArgs: [...V8_FLAGS, '--require', path.join(import.meta.dirname, 'quiet-event-loop.cjs'), ...(nameJs ? ['--perf-basic-prof'] : [])],
    ...(main ? { main } : {}),
    env: { STOWAGE_START_TIMEOUT_SCALE: '20' }, // every worker's 30 s start limit: 10 minutes
    wrapper: ['valgrind', '--tool=callgrind', '--separate-threads=yes', `--callgrind-out-file=${temp.dir}/cg-${label.replaceAll(' ', '-')}.%p`],
  });
  let dumps = 0;
  const pid = server.child.pid;
  return {
    label, server,
    zero: () => run('callgrind_control', ['-z', String(pid)]),
    /** Dumps the counters and sums the threads' files of this dump. */
    dump: async () => {
      await run('callgrind_control', ['-d', String(pid)]);
      dumps++;
      const prefix = `cg-${label.replaceAll(' ', '-')}.${pid}.${dumps}-`;
      const sums = { work: 0, gc: 0, jit: 0, fns: new Map() };
      const nameCode = codeNamer(pid);
      for (const f of readdirSync(temp.dir).filter((name) => name.startsWith(prefix))) {
        const s = readDump(path.join(temp.dir, f), nameCode);
        if (process.env.INSTRUCTIONS_THREADS) console.log(`${label} dump ${dumps} thread ${f.slice(prefix.length)}: work ${s.work} gc ${s.gc} jit ${s.jit}`);
        sums.work += s.work; sums.gc += s.gc; sums.jit += s.jit;
        for (const [name, cost] of s.fns) sums.fns.set(name, (sums.fns.get(name) ?? 0) + cost);
      }
      return sums;
    },
  };
}

/** `n` requests of one point, `width` at a time, each answer checked for its shape. */
async function send(counted, protocol, payload, n, width = concurrency) {
  const { server } = counted;
  const data = new Float32Array(payload.rows * payload.width).fill(0.5);
  const one = async () => {
    if (protocol === 'grpc') {
      const answer = await server.client.infer(payload.model, [{ name: 'x', datatype: 'FP32', shape: [payload.rows, payload.width], data }]);
      if (answer.outputs[0]?.shape?.map(Number)[0] !== payload.rows) throw new Error(`${payload.model}: an answer of shape ${answer.outputs[0]?.shape}`);
      return;
    }
    // REST as Triton's clients send tensors: a JSON header, the bytes after it, binary outputs.
    const header = Buffer.from(JSON.stringify({ inputs: [{ name: 'x', datatype: 'FP32', shape: [payload.rows, payload.width], parameters: { binary_data_size: data.byteLength } }], outputs: [{ name: 'y', parameters: { binary_data: true } }] }));
    const post = () => fetch(`${server.rest}/v2/models/${payload.model}/infer`, { method: 'POST', body: Buffer.concat([header, Buffer.from(data.buffer)]), headers: { 'inference-header-content-length': String(header.length) } });
    // A keep-alive connection the server closed (idle past its timeout) as it was reused resets: sent again once.
    const res = await post().catch((err) => (err?.cause?.code === 'ECONNRESET' ? post() : Promise.reject(err)));
    const body = await res.arrayBuffer();
    if (res.status !== 200) throw new Error(`${payload.model} over REST: ${res.status} ${Buffer.from(body).toString().slice(0, 200)}`);
  };
  let next = 0;
  await Promise.all(Array.from({ length: width }, async () => { while (next++ < n) await one(); }));
}

const builds = [{ prefix: '', main: undefined }, ...(args.baseline ? [{ prefix: 'base ', main: path.resolve(args.baseline, 'main.js') }] : [])];
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const points = protocols.flatMap((protocol) => payloads.map((name) => ({ protocol, name, payload: PAYLOADS[name] })));
console.log(`instructions bench: ${new Date().toISOString().slice(0, 10)}, node ${process.version}, ${execFileSync('valgrind', ['--version']).toString().trim()}, concurrency ${concurrency}, ${reps} windows a point`);

/** One server's run once started (stopped by the caller): warm-up of every point, idle rate, then the windows, point by point. */
async function measure(counted, setting, prefix) {
  // REST with edge threads warms up over 8 connections: the kernel gives each new connection to
  // one edge (reusePort), and a window runs on whichever edges its keep-alive connections met.
  // Warmed over one connection, the other edge's code could stay cold: REST with two edges read
  // 0.926, 1.020 and 1.117 of the baseline in three runs, 0.935 warmed over 8 (2026-12-02).
  // gRPC keeps its one connection, on one edge.
  for (const p of points) await send(counted, p.protocol, p.payload, Math.round(p.payload.warm * scale), p.protocol === 'http' && setting > 0 ? 8 : concurrency);
  // Idle measured once warm, not just after the start: then its leftovers (the warm-up runs, the
  // collector) read 0.65-2.4 M a second, and one build's higher idle taken out of every window made
  // it 8% cheaper at 64 B than the other (2026-12-02).
  await counted.zero();
  const idleStart = Date.now();
  await new Promise((resolve) => setTimeout(resolve, IDLE_MS));
  const idle = await counted.dump();
  const idlePerMs = (idle.work + idle.gc) / (Date.now() - idleStart);
  const windows = new Map(points.map((p) => [p, []]));
  for (let rep = 0; rep < reps; rep++) {
    for (const p of points) {
      const n = Math.round(p.payload.requests * scale);
      await send(counted, p.protocol, p.payload, Math.max(2, Math.round(n / 10))); // its own warm-up after another point
      await counted.zero();
      const started = Date.now();
      await send(counted, p.protocol, p.payload, n);
      const s = await counted.dump();
      const idleShare = idlePerMs * (Date.now() - started);
      windows.get(p).push({ work: (s.work - idleShare) / n, gc: s.gc / n, fns: s.fns, n });
    }
  }
  return { name: counted.label, setting, base: prefix !== '', idlePerS: idlePerMs * 1000, idleFns: idle.fns, windows };
}

/** Every server started, stopped at the end whatever happens. */
const servers = [];
try {
  // One setting at a time, its builds side by side (one core each): each server's windows and its
  // idle measure then meet the same load. With every server at once (four on two cores) the idle
  // taken out of a window (mostly timers that fire by the clock: prom-client's event-loop delay
  // monitor every 10 ms) matched it less well, and one ratio read 1.039 and 1.065 in two runs,
  // where two servers at a time read it 0.993-1.014 over three (2026-12-02).
  // Started one after another (a device worker given 30 s to start missed it with four servers
  // starting under valgrind at once), measured together.
  // A start that fails stops the servers already running (the finally below), not left to run on.
  const runs = [];
  for (const setting of settings) {
    const started = [];
    const pair = [];
    for (const { prefix, main } of builds) {
      const counted = await startCounted(setting, main, `${prefix}edges ${setting}`);
      servers.push(counted.server);
      pair.push(counted.server);
      const measuring = measure(counted, setting, prefix);
      measuring.catch(() => {}); // awaited below; not a crash while a later server starts
      started.push(measuring);
    }
    runs.push(...await Promise.all(started));
    for (const server of pair) {
      await server.stop();
      servers.splice(servers.indexOf(server), 1);
      if (nameJs) rmSync(`/tmp/perf-${server.child.pid}.map`, { force: true });
    }
  }
  for (const r of runs) console.log(`${r.name}: idle ${(r.idlePerS / 1e6).toFixed(2)} M instructions a second (taken out of each window)`);
  console.log('\nper request, thousands of instructions (median of the windows; spread: lowest-highest work)');
  console.log('protocol payload  server        work      spread            gc   ÷ base work');
  for (const p of points) {
    for (const r of runs) {
      const w = r.windows.get(p);
      const work = median(w.map((x) => x.work));
      const base = runs.find((b) => b.base && b.setting === r.setting && !r.base);
      const ratio = base ? (work / median(base.windows.get(p).map((x) => x.work))).toFixed(3) : '';
      const spread = `${(Math.min(...w.map((x) => x.work)) / 1e3).toFixed(0)}-${(Math.max(...w.map((x) => x.work)) / 1e3).toFixed(0)}`;
      console.log(`${p.protocol.padEnd(8)} ${p.name.padEnd(8)} ${r.name.padEnd(12)} ${(work / 1e3).toFixed(1).padStart(8)}  ${spread.padEnd(16)} ${(median(w.map((x) => x.gc)) / 1e3).toFixed(1).padStart(7)}   ${ratio}`);
    }
  }
  if (top > 0) printTop(runs);
  if (top > 0) printIdle(runs);
} finally {
  for (const server of servers) {
    await server.stop();
    if (nameJs) rmSync(`/tmp/perf-${server.child.pid}.map`, { force: true });
  }
  temp.cleanup();
}

/**
 * Per point and setting, the `top` functions whose own instructions a request differ most between the builds; without
 * a baseline, the `top` that cost the most.
 */
function printTop(runs) {
  for (const p of points) {
    for (const r of runs.filter((x) => !x.base)) {
      const base = runs.find((b) => b.base && b.setting === r.setting);
      const mine = r.windows.get(p).at(-1);
      const theirs = base ? base.windows.get(p).at(-1) : { fns: new Map(), n: 1 };
      const names = new Set([...mine.fns.keys(), ...theirs.fns.keys()]);
      const diffs = [...names].map((name) => ({ name, a: (mine.fns.get(name) ?? 0) / mine.n, b: (theirs.fns.get(name) ?? 0) / theirs.n }))
        .sort((x, y) => Math.abs(y.a - y.b) - Math.abs(x.a - x.b)).slice(0, top);
      console.log(`\n${p.protocol} ${p.name} ${r.name}: functions that ${base ? 'differ most, own instructions a request (this build, base, difference)' : 'cost most, own instructions a request'}`);
      for (const d of diffs) console.log(`  ${d.a.toFixed(0).padStart(9)} ${base ? `${d.b.toFixed(0).padStart(9)} ${(d.a - d.b).toFixed(0).padStart(9)}` : ''}  ${d.name.slice(0, 110)}`);
    }
  }
}

/** Per server, the `top` functions of its idle (what is taken out of every window), instructions a second. */
function printIdle(runs) {
  for (const r of runs) {
    const seconds = IDLE_MS / 1000;
    console.log(`\n${r.name} idle: functions that cost most, own instructions a second`);
    for (const [name, cost] of [...r.idleFns].sort((a, b) => b[1] - a[1]).slice(0, top)) console.log(`  ${(cost / seconds).toFixed(0).padStart(9)}  ${name.slice(0, 110)}`);
  }
}
