// Whether the GPU suites (test/gpu) can run here: an NVIDIA GPU that CUDA sees, with the CUDA
// provider and libraries installed (npm run cuda:install). Elsewhere (CI) they are skipped, saying why.
import test from 'ava';
import { gpuReport, loadCuda } from '../../dist/native/cuda.js';

/** Why the GPU suites cannot run here, or null on a GPU machine. */
function absence() {
  try {
    loadCuda();
    return gpuReport().gpus.length === 0 ? 'CUDA sees no GPU' : null;
  } catch (err) {
    return /** @type {Error} */ (err).message;
  }
}

export const gpuAbsent = absence();
if (gpuAbsent) console.error(`test/gpu skipped: ${gpuAbsent}`);

/** A GPU test: one at a time (they share the GPU, and some measure its memory and timings), skipped without one. */
export const gpuTest = gpuAbsent ? test.skip : test.serial;

/**
 * Fill `memory`'s first `bytes` with a pattern, move them down by `by` bytes within it (compaction's
 * moveWithin), read them back: whether they are as memmove leaves them, and how long the move took.
 * @param {import('../../dist/native/ort.js').DeviceMemory} memory
 * @param {number} bytes
 * @param {number} by
 */
export function moveDown(memory, bytes, by) {
  const host = new Uint8Array(bytes);
  for (let i = 0; i < host.length; i += 4096) host[i] = (i / 4096) % 251;
  crypto.getRandomValues(host.subarray(0, 65536));
  memory.copyFromHost(host, 0);
  const started = performance.now();
  memory.moveWithin(0, by, bytes - by);
  const ms = performance.now() - started;
  const back = new Uint8Array(bytes);
  memory.copyToHost(back, 0);
  const expected = host.slice();
  expected.copyWithin(0, by);
  return { same: Buffer.compare(back, expected) === 0, ms };
}
