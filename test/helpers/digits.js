// The held-out digits as the fault tests ask for them: each request's labels checked against the
// answers the model gave before any fault, and clients that keep asking until told to stop.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { dataAs, FIXTURES, ROOT, tensor } from './server.js';
import { awaitableCount } from './checks.js';

/** @typedef {import('../../dist/client/client.js').InferenceClient} InferenceClient */

export const DIGITS = path.join(ROOT, 'bundles', 'digits');
export const heldout = JSON.parse(readFileSync(path.join(FIXTURES, 'digits_heldout.json'), 'utf8'));

export const N = heldout.images.length;
/**
 * Rows `from`..`from+rows` of the held-out digits, as `digits` takes them, or as raw 8-bit pixels for `digits_u8` (whose preprocess hook scales them).
 * @param {number} from
 * @param {number} rows
 */
export function digits(from, rows, model = 'digits') {
  const data = new Float32Array(rows * 64);
  for (let r = 0; r < rows; r++) data.set(heldout.images[(from + r) % N], r * 64);
  if (model === 'digits_u8') return tensor('image', 'UINT8', [rows, 8, 8], Uint8Array.from(data, (v) => Math.round((v * 255) / 16)));
  return tensor('image', 'FP32', [rows, 8, 8], data);
}

/**
 * The labels `model` gives every held-out image, asked before any fault (the answers every later request must match).
 * @param {InferenceClient} client
 * @returns {Promise<number[]>}
 */
export async function referenceLabels(client, model = 'digits') {
  const labels = [];
  for (let from = 0; from < N; from += 32) {
    const { outputs } = await client.infer(model, [digits(from, Math.min(32, N - from), model)], { outputs: ['label'] });
    labels.push(...[...dataAs(outputs[0], BigInt64Array)].map(Number));
  }
  return labels;
}

/**
 * Ask `client` for the labels of rows `from`.. and check them against `reference`; throws the call's error or a wrong answer.
 * @param {InferenceClient} client
 * @param {number[]} reference
 * @param {number} from
 */
export async function classify(client, reference, from, rows = 2, model = 'digits') {
  const { outputs } = await client.infer(model, [digits(from, rows, model)], { outputs: ['label'] });
  const got = [...dataAs(outputs[0], BigInt64Array)].map(Number);
  const expected = Array.from({ length: rows }, (_, r) => reference[(from + r) % N]);
  if (JSON.stringify(got) !== JSON.stringify(expected)) throw new Error(`digits answered ${got}, expected ${expected}`);
  return got;
}

/**
 * `clients` asking for digits back to back (checked against `reference`) until `load.stop`: the
 * answers counted (`ok`, and `okAfterRestart` once `load.restarted` is set), the calls that failed
 * with a status and which clients they were on, and wrong answers. A failed call waits 20 ms before
 * the next (a client whose connection is down fails at once: not a busy loop). `done` resolves
 * when every client has stopped.
 * @param {InferenceClient[]} clients
 * @param {number[]} reference
 */
export function classifyUntilStopped(clients, reference) {
  const load = {
    ok: awaitableCount(),
    okAfterRestart: awaitableCount(),
    restarted: false,
    stop: false,
    /** @type {import('@grpc/grpc-js').ServiceError[]} */
    failures: [],
    /** @type {Set<number>} */
    failedClients: new Set(),
    /** @type {string[]} */
    wrong: [],
    /** @type {Promise<void[]>} */
    done: Promise.resolve([]),
  };
  load.done = Promise.all(clients.map(async (c, k) => {
    for (let i = 0; !load.stop; i++) {
      try {
        await classify(c, reference, k * 100 + i, 1 + (i % 3));
        load.ok.add();
        if (load.restarted) load.okAfterRestart.add();
      } catch (err) {
        const failure = /** @type {import('@grpc/grpc-js').ServiceError} */ (err);
        if (failure.code === undefined) {
          load.wrong.push(failure.message);
          continue;
        }
        load.failures.push(failure);
        load.failedClients.add(k);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    }
  }));
  return load;
}
