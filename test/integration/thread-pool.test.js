// runtime.thread_pool through the real server: with a pool per session every session holds
// intra_op_threads - 1 threads of its own (a session per model with runtime.share_sessions off; one
// for the models of one graph with it on, the default); with one pool for the process the thread
// count is the same however many models there are, and every model still answers what its own
// weights give.
import { readdirSync, readFileSync } from 'node:fs';
import test from 'ava';
import { inferAndCheck, random, writeCatalog } from '../helpers/mlp-catalog.js';
import { startServer, tempDir } from '../helpers/server.js';

const MODELS = 12;
const INTRA_OP_THREADS = 4;

/**
 * The process's threads, but libuv's pool (started by the first asynchronous file or DNS call,
 * whenever that comes: not ONNX Runtime's doing, and 4 threads at once).
 * @param {number | undefined} pid
 */
const threadsOf = (pid) => readdirSync(`/proc/${pid}/task`).filter((task) => {
  try {
    return !readFileSync(`/proc/${pid}/task/${task}/comm`, 'utf8').startsWith('libuv-worker');
  } catch {
    return false; // ended meanwhile
  }
}).length;

/**
 * Serve a catalog of `models` models (one graph, weights of their own) under `threadPool`, every
 * model called at two batch sizes and its answers checked; the server's threads once every model
 * has answered.
 * @param {import('ava').ExecutionContext} t
 * @param {'per_session' | 'process'} threadPool
 * @param {number} models
 * @param {boolean} [share] runtime.share_sessions
 */
async function threadsServing(t, threadPool, models, share = false) {
  const temp = tempDir();
  const repo = `${temp.dir}/repo`;
  const catalog = writeCatalog(repo, { count: models, sizes: [32, 64, 8] });
  const server = await startServer({ model_repo: repo, global: { runtime: { thread_pool: threadPool, intra_op_threads: INTRA_OP_THREADS, share_sessions: share } } }, { root: temp.dir });
  try {
    const next = random(5);
    for (const model of catalog) {
      t.is(await inferAndCheck(server.client, model, 3, next), null);
      t.is(await inferAndCheck(server.client, model, 8, next), null);
    }
    return threadsOf(server.child.pid);
  } finally {
    await server.stop();
    temp.cleanup();
  }
}

test('per_session: each model adds a pool of threads; process: the models share one', async (t) => {
  const perSession = { one: await threadsServing(t, 'per_session', 1), many: await threadsServing(t, 'per_session', MODELS) };
  const shared = { one: await threadsServing(t, 'process', 1), many: await threadsServing(t, 'process', MODELS) };
  const oneGraph = await threadsServing(t, 'per_session', MODELS, true);
  t.log(`threads with 1 and ${MODELS} models: per_session ${perSession.one}, ${perSession.many} (sessions shared: ${oneGraph}); process ${shared.one}, ${shared.many}`);
  // Sessions shared: the models of one graph run on one session, so on one pool.
  t.true(oneGraph - perSession.one < INTRA_OP_THREADS - 1, `per_session, sessions shared: ${oneGraph - perSession.one} threads for ${MODELS - 1} more models of one graph`);
  // Each further model's session brings intra_op_threads - 1 threads (the caller is the last).
  t.true(perSession.many - perSession.one >= (MODELS - 1) * (INTRA_OP_THREADS - 1), `per_session: ${perSession.many - perSession.one} threads for ${MODELS - 1} more models`);
  // One pool: no thread for any further model (libuv's pool may add its few when runs leave the device thread).
  t.true(shared.many - shared.one < INTRA_OP_THREADS - 1, `process: ${shared.many - shared.one} threads for ${MODELS - 1} more models`);
});
