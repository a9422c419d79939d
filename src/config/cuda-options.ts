/**
 * runtime.cuda in the node file as ONNX Runtime's CUDA provider options (its own names and string
 * values, which it checks when a session is made).
 */
import type { RuntimeConfig } from '../shared/config-schema.js';

export function cudaProviderOptions(cuda: RuntimeConfig['cuda']): Record<string, string> {
  return {
    use_tf32: cuda.tf32 ? '1' : '0',
    cudnn_conv_algo_search: cuda.cudnn_conv_algo_search.toUpperCase(),
    // Grow ONNX Runtime's arena by what is asked, not to the next power of two: with many models
    // per GPU the doubling strands memory the weight cache could use.
    arena_extend_strategy: 'kSameAsRequested',
    ...(cuda.ort_arena_limit_bytes > 0 ? { gpu_mem_limit: String(cuda.ort_arena_limit_bytes) } : {}),
  };
}

/**
 * Intra-op threads for runtime.intra_op_threads on `backend`: as configured, except that 0 (the
 * default, one per core) means one on backend cuda. The CUDA provider's runs keep the CPU for
 * launches and a few shape operators; with a pool per core a warm ResNet-50 run took 2.65 ms at
 * batch 1 and 3.02 at batch 8 against 1.94 and 2.28 with one thread (H200 with 16 cores,
 * bench/gpu-first-call.js).
 */
export function intraOpThreadsFor(backend: RuntimeConfig['backend'], configured: number): number {
  return backend === 'cuda' && configured === 0 ? 1 : configured;
}
