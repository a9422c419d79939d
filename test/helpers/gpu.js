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
