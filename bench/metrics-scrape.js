// What a /metrics scrape costs the requests beside it (docs/performance.md, "A /metrics scrape
// beside the requests"): one node serving a catalog of small MLPs, every model called once so each
// has its series, then closed-loop clients for a few seconds with no scrape and again with the
// node's /metrics scraped at an interval; prints the requests' p50/p99/p99.9/max in both phases and
// how long a scrape took.
//
//   npm run build && node bench/metrics-scrape.js [--models 200] [--clients 16] [--seconds 6] [--every-ms 500]
import { parseArgs } from 'node:util';
import { startFleet } from '../test/helpers/fleet.js';
import { tempDir } from '../test/helpers/server.js';
import { InferenceClient } from '../dist/client/client.js';
import { percentile } from './timing.js';

const { values } = parseArgs({ options: { models: { type: 'string', default: '200' }, clients: { type: 'string', default: '16' }, seconds: { type: 'string', default: '6' }, 'every-ms': { type: 'string', default: '500' } } });
const MODELS = Number(values.models);
const CLIENTS = Number(values.clients);
const SECONDS = Number(values.seconds);
const EVERY_MS = Number(values['every-ms']);

const temp = tempDir('stowage-bench-');
const { catalog, nodes } = await startFleet(temp.dir, { count: MODELS, sizes: [64, 64, 4], nodes: 1, budgetShare: 1 });
const node = nodes[0].server;
const client = new InferenceClient(node.address);
try {
  const x = [{ name: 'x', datatype: 'FP32', shape: [1, 64], data: new Float32Array(64) }];
  for (const m of catalog) await client.infer(m.name, x);
  const url = `http://127.0.0.1:${node.adminPort}/metrics`;
  const size = (await (await fetch(url)).text()).length;
  console.log(`one node, ${MODELS} models (/metrics ${(size / 1024).toFixed(0)} KiB), ${CLIENTS} clients, ${SECONDS} s a phase, scraped every ${EVERY_MS} ms in the second`);
  console.log('phase        requests   p50 ms   p99 ms  p99.9 ms   max ms   scrape ms (median)');
  for (const scraping of [false, true]) {
    let running = true;
    /** @type {number[]} */
    const scrapes = [];
    const scraper = (async () => {
      while (running && scraping) {
        const t0 = performance.now();
        await (await fetch(url)).text();
        scrapes.push(performance.now() - t0);
        await new Promise((resolve) => setTimeout(resolve, EVERY_MS));
      }
    })();
    /** @type {number[]} */
    const latencies = [];
    const end = Date.now() + SECONDS * 1000;
    let next = 0;
    await Promise.all(Array.from({ length: CLIENTS }, async () => {
      while (Date.now() < end) {
        const t0 = performance.now();
        await client.infer(catalog[next++ % catalog.length].name, x);
        latencies.push(performance.now() - t0);
      }
    }));
    running = false;
    await scraper;
    const p = (/** @type {number} */ q) => percentile(latencies, q).toFixed(1).padStart(8);
    console.log(`${(scraping ? 'scraped' : 'no scrapes').padEnd(12)} ${String(latencies.length).padStart(8)} ${p(0.5)} ${p(0.99)} ${p(0.999)}  ${Math.max(...latencies).toFixed(1).padStart(7)}   ${scrapes.length ? percentile(scrapes, 0.5).toFixed(1) : '-'}`);
  }
} finally {
  client.close();
  await node.stop();
  temp.cleanup();
}
