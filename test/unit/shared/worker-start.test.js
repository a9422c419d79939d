// Starting an actor's worker thread (shared/worker-start.ts) with real workers: the start settles
// once, by the worker's start message, by the start timeout (the worker terminated) or by its exit
// before starting (its last error in the message); every exit is told, with whether it had started.
import { once } from 'node:events';
import test from 'ava';
import { scaledStartTimeoutMs, startWorker } from '../../../dist/shared/worker-start.js';

/** A worker from source: it runs `body` with `parentPort` in scope. @param {string} body */
const source = (body) => new URL(`data:text/javascript,${encodeURIComponent(`import { parentPort } from 'node:worker_threads';\n${body}`)}`);

/**
 * @param {string} body
 * @param {number} [startTimeoutMs]
 */
function start(body, startTimeoutMs = 5000) {
  /** @type {any[]} */
  const messages = [];
  /** @type {{ code: number, lastError: Error | undefined, started: boolean }[]} */
  const exits = [];
  const { worker, started } = startWorker({
    url: source(body), name: 'test-worker', workerData: null, startTimeoutMs,
    onMessage: (/** @type {any} */ msg, markStarted) => (msg.type === 'started' ? markStarted(msg.value) : messages.push(msg)),
    onStartTimeout: (limitMs) => new Error(`did not start within ${limitMs} ms`),
    exitedBeforeStart: (code, lastError) => new Error(`exited (code ${code}) before starting: ${lastError?.message ?? 'no error'}`),
    onExit: (code, lastError, hadStarted) => exits.push({ code, lastError, started: hadStarted }),
  });
  return { worker, started, messages, exits };
}

test('it starts with what its start message carries; its other messages go to the supervisor; a crash after is told as started', async (t) => {
  const w = start(`parentPort.postMessage({ type: 'hello' }); parentPort.postMessage({ type: 'started', value: 42 }); parentPort.on('message', () => { throw new Error('boom'); });`);
  t.is(await w.started, 42);
  t.deepEqual(w.messages, [{ type: 'hello' }]);
  const exited = new Promise((resolve) => w.worker.on('exit', resolve)); // not once(): its 'error' comes first
  w.worker.postMessage('crash');
  await exited;
  t.is(w.exits.length, 1);
  t.true(w.exits[0].started);
  t.is(w.exits[0].code, 1);
  t.regex(String(w.exits[0].lastError?.message), /boom/);
});

test('one that throws before starting fails its start with its error; one that never starts fails at the timeout and is ended', async (t) => {
  const crash = start(`throw new Error('no device here');`);
  await t.throwsAsync(crash.started, { message: /exited \(code 1\) before starting: no device here/ });
  t.deepEqual(crash.exits.map((e) => e.started), [false]);

  const silent = start(`setInterval(() => {}, 1000);`, 200);
  await t.throwsAsync(silent.started, { message: 'did not start within 200 ms' }, 'the limit used, told to onStartTimeout');
  await once(silent.worker, 'exit');
  t.deepEqual(silent.exits.map((e) => e.started), [false], 'terminated, and its exit told');
});

test('STOWAGE_START_TIMEOUT_SCALE multiplies every start limit; a value that is not a number above 0 leaves it as it is', (t) => {
  t.is(scaledStartTimeoutMs(30_000, {}), 30_000, 'unset');
  t.is(scaledStartTimeoutMs(30_000, { STOWAGE_START_TIMEOUT_SCALE: '20' }), 600_000);
  t.is(scaledStartTimeoutMs(30_000, { STOWAGE_START_TIMEOUT_SCALE: '0.5' }), 15_000);
  t.is(scaledStartTimeoutMs(30_000, { STOWAGE_START_TIMEOUT_SCALE: '1e-9' }), 1, 'never below 1 ms');
  for (const ignored of ['0', '-5', 'soon', '', ' ', 'Infinity']) {
    t.is(scaledStartTimeoutMs(30_000, { STOWAGE_START_TIMEOUT_SCALE: ignored }), 30_000, JSON.stringify(ignored));
  }
});
