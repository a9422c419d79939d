// A soak: mixed traffic against one real node for a bounded time, the server's resident memory
// sampled every second. After a warm-up, RSS must stay flat: growth past 5% (last minute against
// the minute after warm-up) is a leak, and the script exits 1.
//
// The mix, all at once: unary requests (digits, batches of 1-8), a ModelStreamInfer stream, system
// shared memory (register, infer, unregister a region every few seconds, inputs and outputs in
// it), a hooked model (digits_u8: model.js preprocess) and a meta model (digit_finder: model.js
// calling digit_cells and digits), a model unloaded and loaded again every 2 s while it takes
// traffic, and a trickle of malformed requests. Every answer is checked.
//
//   npm run build && node bench/soak.js [--seconds 1800] [--warmup 120]
import { cpSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { InferenceClient } from '../dist/client/client.js';
import { createRegion, destroyRegion, readRegion, writeRegion } from '../dist/client/shared-memory.js';
import { FIXTURES, ROOT, makeRepository, scrapeMetrics, startServer, tempDir } from '../test/helpers/server.js';

const { values } = parseArgs({ options: { seconds: { type: 'string', default: '1800' }, warmup: { type: 'string', default: '120' } } });
const SECONDS = Number(values.seconds);
const WARMUP = Math.min(Number(values.warmup), SECONDS / 3);
const heldout = JSON.parse(readFileSync(path.join(FIXTURES, 'digits_heldout.json'), 'utf8'));
const N = heldout.images.length;

const temp = tempDir('stowage-soak-');
const repo = makeRepository(temp.dir, {
  digits: path.join(ROOT, 'bundles', 'digits'),
  digits_u8: path.join(ROOT, 'bundles', 'digits_u8'),
  digit_cells: path.join(ROOT, 'bundles', 'digit_cells'),
  digit_finder: path.join(ROOT, 'bundles', 'digit_finder'),
  severity_grader: path.join(ROOT, 'bundles', 'severity_grader'),
});
cpSync(path.join(FIXTURES, 'models', 'negate'), path.join(repo, 'negate'), { recursive: true });
const server = await startServer({ model_repo: repo }, { root: temp.dir });
const pid = server.child.pid;
const rss = () => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) / 1024; // MiB

const digitsBatch = (from, rows) => {
  const data = new Float32Array(rows * 64);
  for (let r = 0; r < rows; r++) data.set(heldout.images[(from + r) % N], r * 64);
  return { name: 'image', datatype: 'FP32', shape: [rows, 8, 8], data };
};
// The labels digits gives every held-out image: what every later answer must match.
const reference = [];
for (let from = 0; from < N; from += 32) {
  const { outputs } = await server.client.infer('digits', [digitsBatch(from, Math.min(32, N - from))], { outputs: ['label'] });
  reference.push(...[...outputs[0].data].map(Number));
}

const counts = { unary: 0, stream: 0, sharedMemory: 0, hooked: 0, meta: 0, loadUnload: 0, reloadWindowRefusals: 0, malformed: 0 };
const problems = [];
const problem = (what) => {
  if (problems.length < 50) problems.push(what);
};
const deadline = Date.now() + SECONDS * 1000;
const running = () => Date.now() < deadline;
const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const checkLabels = (what, got, from) => {
  got.forEach((l, i) => {
    if (Number(l) !== reference[(from + i) % N]) problem(`${what}: row ${from + i} answered ${l}, expected ${reference[(from + i) % N]}`);
  });
};

async function unaryClient(k) {
  const client = new InferenceClient(server.address);
  for (let i = 0; running(); i++) {
    const from = (k * 997 + i * 13) % N;
    const rows = 1 + (i % 8);
    try {
      const { outputs } = await client.infer('digits', [digitsBatch(from, rows)], { outputs: ['label'] });
      checkLabels('unary', [...outputs[0].data], from);
      counts.unary++;
    } catch (err) {
      problem(`unary: ${err.message}`);
    }
  }
  client.close();
}

async function streamClient() {
  const client = new InferenceClient(server.address);
  while (running()) {
    // One stream of 200 requests, up to 16 outstanding, then a new stream.
    const call = client.stream();
    let answered = 0;
    let sent = 0;
    const done = new Promise((resolve) => {
      call.on('data', (r) => {
        answered++;
        if (r.error_message) problem(`stream: ${r.error_message}`);
        else counts.stream++;
        if (sent < 200 && running()) send();
        else if (answered === sent) call.end();
      });
      call.on('error', (err) => {
        problem(`stream ended: ${err.message}`);
        resolve();
      });
      call.on('end', resolve);
    });
    const send = () => {
      const from = (sent * 7) % N;
      const t = digitsBatch(from, 2);
      call.write({ model_name: 'digits', id: `s${sent}`, inputs: [{ name: 'image', datatype: 'FP32', shape: t.shape }], outputs: [{ name: 'label' }], raw_input_contents: [Buffer.from(t.data.buffer)] });
      sent++;
    };
    for (let i = 0; i < 16; i++) send();
    await done;
  }
  client.close();
}

async function sharedMemoryClient() {
  const client = new InferenceClient(server.address);
  for (let round = 0; running(); round++) {
    const key = `/stowage_soak_${process.pid}_${round % 4}`;
    const region = `soak${round}`;
    const rows = 8;
    createRegion(key, rows * 256 + rows * 8);
    try {
      await client.registerSystemSharedMemory(region, key, rows * 256 + rows * 8);
      for (let i = 0; i < 50 && running(); i++) {
        const from = (round * 50 + i) % N;
        writeRegion(key, 0, digitsBatch(from, rows).data);
        await client.infer('digits', [{ name: 'image', datatype: 'FP32', shape: [rows, 8, 8], sharedMemory: { region, byteSize: rows * 256 } }],
          { outputs: [{ name: 'label', sharedMemory: { region, byteSize: rows * 8, offset: rows * 256 } }] });
        const labels = new BigInt64Array(readRegion(key, rows * 256, rows * 8).slice().buffer);
        checkLabels('shared memory', [...labels], from);
        counts.sharedMemory++;
      }
      await client.unregisterSystemSharedMemory(region);
    } catch (err) {
      problem(`shared memory: ${err.message}`);
    } finally {
      destroyRegion(key);
    }
  }
  client.close();
}

async function hookedAndMetaClient() {
  const client = new InferenceClient(server.address);
  const canvas = new Float32Array(32 * 32);
  // One digit in the top-left cell of the canvas: the meta model must find and read it.
  for (let y = 0; y < 8; y++) for (let x = 0; x < 8; x++) canvas[y * 32 + x] = heldout.images[0][y * 8 + x];
  for (let i = 0; running(); i++) {
    try {
      const from = (i * 5) % N;
      const u8 = Uint8Array.from(heldout.images[from], (v) => Math.round((v * 255) / 16));
      const { outputs } = await client.infer('digits_u8', [{ name: 'image', datatype: 'UINT8', shape: [1, 8, 8], data: u8 }], { outputs: ['label'] });
      if (outputs[0].data.length !== 1) problem(`hooked: ${outputs[0].data.length} labels for one image`);
      counts.hooked++;
      const meta = await client.infer('digit_finder', [{ name: 'canvas', datatype: 'FP32', shape: [32, 32], data: canvas }]);
      const count = Number(meta.outputs.find((o) => o.name === 'count').data[0]);
      const digit = Number(meta.outputs.find((o) => o.name === 'digits').data[0]);
      if (count !== 1 || digit !== reference[0]) problem(`meta: found ${count} digits, the first ${digit}; expected 1, ${reference[0]}`);
      counts.meta++;
    } catch (err) {
      problem(`hooked/meta: ${err.message}`);
    }
  }
  client.close();
}

/** negate is unloaded and loaded again every 2 s; its own client keeps asking, and may be refused only while it is out. */
async function loadUnloadClients() {
  const control = new InferenceClient(server.address);
  const user = new InferenceClient(server.address);
  let out = false;
  const asking = (async () => {
    while (running()) {
      try {
        const { outputs } = await user.infer('negate', [{ name: 'x', datatype: 'FP32', shape: [3], data: Float32Array.from([1, 2, 3]) }]);
        if ([...outputs[0].data].join() !== '-1,-2,-3') problem(`negate answered ${[...outputs[0].data]}`);
      } catch (err) {
        if (out || /UNAVAILABLE|NOT_FOUND/.test(err.message)) counts.reloadWindowRefusals++;
        else problem(`negate: ${err.message}`);
        await pause(20);
      }
    }
  })();
  while (running()) {
    try {
      out = true;
      await control.call('RepositoryModelUnload', { model_name: 'negate' });
      await pause(200);
      await control.call('RepositoryModelLoad', { model_name: 'negate' });
      out = false;
      counts.loadUnload++;
    } catch (err) {
      problem(`load/unload: ${err.message}`);
    }
    await pause(2000);
  }
  await asking;
  control.close();
  user.close();
}

async function malformedClient() {
  const client = new InferenceClient(server.address);
  const bad = [
    { model_name: 'digits', inputs: [{ name: 'image', datatype: 'FP32', shape: ['1', '8', '7'] }], raw_input_contents: [Buffer.alloc(224)] },
    { model_name: 'digits', inputs: [{ name: 'image', datatype: 'FP32', shape: ['9223372036854775807', '8', '8'] }], raw_input_contents: [Buffer.alloc(4)] },
    { model_name: 'ghost', inputs: [] },
    { model_name: 'x'.repeat(100_000), inputs: [] },
  ];
  for (let i = 0; running(); i++) {
    try {
      await client.call('ModelInfer', bad[i % bad.length]);
      problem('a malformed request succeeded');
    } catch (err) {
      if (!/INVALID_ARGUMENT|NOT_FOUND/.test(err.message)) problem(`malformed: ${err.message.slice(0, 200)}`);
      counts.malformed++;
    }
    await pause(5);
  }
  client.close();
}

// Each thread's V8 heap (stowage_thread_heap_bytes), in MiB: where RSS growth would live if it
// were JavaScript objects, and in which thread.
async function threadHeaps() {
  const m = await scrapeMetrics(server.adminPort);
  const heaps = {};
  for (const [key, value] of Object.entries(m)) {
    const match = /^stowage_thread_heap_bytes\{thread="([^"]+)",kind="(used|total)"\}$/.exec(key);
    if (match) (heaps[match[1]] ??= {})[match[2]] = value / 2 ** 20;
  }
  return heaps;
}
const showHeaps = (heaps) => Object.entries(heaps).map(([t, h]) => `${t} ${h.used.toFixed(0)}/${h.total.toFixed(0)}`).join(', ');

// RSS every second; a line every 30 s with the heaps (used/total MiB per thread).
const samples = [];
const heapSamples = [];
const started = Date.now();
const sampler = setInterval(() => {
  const s = (Date.now() - started) / 1000;
  samples.push({ s, mib: rss() });
  if (samples.length % 30 === 0) {
    void threadHeaps().then((heaps) => {
      heapSamples.push({ s, heaps });
      console.log(`${s.toFixed(0).padStart(6)} s  RSS ${samples.at(-1).mib.toFixed(0)} MiB  ${JSON.stringify(counts)}\n         heap ${showHeaps(heaps)}`);
    }, (err) => problem(`metrics: ${err.message}`));
  }
}, 1000);

console.log(`soak: ${SECONDS} s of mixed traffic against node pid ${pid}, warm-up ${WARMUP} s; RSS at start ${rss().toFixed(0)} MiB`);
try {
  await Promise.all([unaryClient(0), unaryClient(1), unaryClient(2), streamClient(), sharedMemoryClient(), hookedAndMetaClient(), loadUnloadClients(), malformedClient()]);
} finally {
  clearInterval(sampler);
}
const alive = server.child.exitCode === null;
await server.stop();
temp.cleanup();

// Growth: the mean of the last minute against the mean of the minute after warm-up.
const mean = (xs) => xs.reduce((a, b) => a + b.mib, 0) / Math.max(1, xs.length);
const window = Math.min(60, Math.floor((SECONDS - WARMUP) / 3));
const after = mean(samples.filter((x) => x.s >= WARMUP && x.s < WARMUP + window));
const last = mean(samples.slice(-window));
const growth = (last - after) / after;
const peak = Math.max(...samples.map((x) => x.mib));
console.log(`\nnode ${process.version}, ${SECONDS} s, warm-up ${WARMUP} s`);
console.log(`requests: ${JSON.stringify(counts)}`);
console.log(`RSS: ${after.toFixed(1)} MiB after warm-up, ${last.toFixed(1)} MiB at the end (${window} s means), peak ${peak.toFixed(1)} MiB`);
console.log(`growth after warm-up: ${(growth * 100).toFixed(2)}% (limit 5%)`);
const heapAfter = heapSamples.find((x) => x.s >= WARMUP + window);
if (heapAfter) console.log(`V8 heaps (used/total MiB) after warm-up: ${showHeaps(heapAfter.heaps)}\n                       at the end: ${showHeaps(heapSamples.at(-1).heaps)}`);
console.log(`problems: ${problems.length}${problems.length ? `\n  ${problems.slice(0, 20).join('\n  ')}` : ''}`);
console.log(`server alive at the end: ${alive}`);
process.exitCode = growth < 0.05 && problems.length === 0 && alive ? 0 : 1;
