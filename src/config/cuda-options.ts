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
