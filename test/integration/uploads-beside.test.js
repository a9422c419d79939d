// Weight uploads beside execution (runtime.upload_beside_execution) through the real server on the
// CPU: a catalog four times the weight budget, called by 12 clients at once, every run on one of
// libuv's threads (inline_run_below_ms: 0) so that the device thread copies the next cold models'
// weights while it goes. Every answer must be the model's own: a weight read before its upload
// landed, or copied into a block another model still used, would show as a wrong row. The same
// traffic with the switch off uploads nothing beside, and answers the same.
import test from 'ava';
import { inferAndCheck, mlpWeightBytes, random, writeCatalog } from '../helpers/mlp-catalog.js';
import { metric, scrapeMetrics, startServer, tempDir } from '../helpers/server.js';

const INPUTS = 64;
const OUTPUTS = 8;
const SIZES = [INPUTS, 512, OUTPUTS];
const COUNT = 24;
const WEIGHT_BYTES = mlpWeightBytes(SIZES) - 4 * OUTPUTS + 64; // the last bias (32 bytes) at its 64-byte alignment
const BUDGET = Math.floor((COUNT * WEIGHT_BYTES) / 4 / 64) * 64;
const CLIENTS = 12;
const CALLS = 480;

/** @type {import('../helpers/server.js').TempDir} */
let temp;
/** @type {import('../helpers/mlp-catalog.js').CatalogModel[]} */
let catalog;

test.before(() => {
  temp = tempDir();
  catalog = writeCatalog(`${temp.dir}/repo`, { count: COUNT, sizes: SIZES });
});

test.after.always(() => temp?.cleanup());

/** @param {boolean} beside */
function serve(beside) {
  return startServer({
    model_repo: `${temp.dir}/repo`,
    global: {
      runtime: { cpu_device_memory_bytes: BUDGET, mem_fraction: 1, weight_cache_wiggle_fraction: 0, inline_run_below_ms: 0, upload_beside_execution: beside },
    },
  }, { root: temp.dir });
}

/**
 * CLIENTS clients over CALLS calls at random (one seeded sequence: both servers get the same
 * traffic); the number answered right, and the weight cache's counters summed over the catalog.
 * @param {import('ava').ExecutionContext} t
 * @param {import('../helpers/server.js').Server} server
 */
async function load(t, server) {
  const next = random(11);
  const picks = Array.from({ length: CALLS }, () => catalog[Math.floor(next() * COUNT)]);
  const right = await Promise.all(Array.from({ length: CLIENTS }, async (_, c) => {
    let ok = 0;
    for (let i = c; i < picks.length; i += CLIENTS) {
      const wrong = await inferAndCheck(server.client, picks[i], 1 + (i % 3), random(i));
      if (wrong) t.fail(wrong);
      else ok++;
    }
    return ok;
  }));
  const m = await scrapeMetrics(server.adminPort);
  const sum = (/** @type {string} */ name) => catalog.reduce((total, { name: model }) => total + metric(m, name, `model="${model}"`), 0);
  return {
    right: right.reduce((a, b) => a + b, 0),
    misses: sum('stowage_weight_cache_misses_total'),
    beside: sum('stowage_weight_cache_uploads_beside_total'),
    hiddenSeconds: sum('stowage_weight_cache_load_hidden_seconds_total'),
    waitedSeconds: sum('stowage_weight_cache_load_seconds_total'),
    loadBytes: catalog.reduce((total, { name }) => total + metric(m, 'stowage_weight_cache_load_bytes_total', `model="${name}",source="host"`), 0),
    resident: metric(m, 'stowage_weight_cache_resident_bytes', 'device="0"'),
  };
}

test.serial('cold models\' weights copy in while other models run, and every answer is still the model\'s own', async (t) => {
  const server = await serve(true);
  try {
    const r = await load(t, server);
    t.log(`${r.right} of ${CALLS} right; ${r.misses} cold loads, ${r.beside} of them uploaded beside execution, ${(r.hiddenSeconds * 1000).toFixed(2)} ms of copies hidden`);
    t.is(r.right, CALLS);
    t.true(r.misses > COUNT, 'the catalog does not fit: the cache evicted and reloaded');
    t.true(r.beside > 0, 'some cold loads were uploaded ahead of their turn');
    t.true(r.beside <= r.misses, 'an upload beside is one of the cold loads, counted once');
    t.true(r.hiddenSeconds > 0, 'their copy time is reported as hidden');
    t.is(r.loadBytes, r.misses * WEIGHT_BYTES, 'each cold load copied one model\'s weights, whichever way it came');
    t.true(r.resident <= BUDGET);
  } finally {
    await server.stop();
  }
});

test.serial('upload_beside_execution: false loads each cold model at its turn, with the same answers', async (t) => {
  const server = await serve(false);
  try {
    const r = await load(t, server);
    t.is(r.right, CALLS);
    t.true(r.misses > COUNT);
    t.is(r.beside, 0);
    t.is(r.hiddenSeconds, 0);
    t.true(r.waitedSeconds > 0, 'a cold load at its turn is waited for, and counted so');
    t.is(r.loadBytes, r.misses * WEIGHT_BYTES);
  } finally {
    await server.stop();
  }
});
