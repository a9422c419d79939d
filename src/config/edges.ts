/**
 * How many edge threads terminate gRPC and REST (`endpoints.edge_threads`; actors/edge/): a
 * number as given (0: the main thread alone, as before edges existed), or `auto`, by the rule
 * below, chosen by measurement (docs/performance.md, bench/edges.js).
 */
import { availableParallelism } from 'node:os';

/**
 * Below this many cores `auto` keeps the main thread alone: the edges' threads would take cores the device and ONNX
 * Runtime need.
 */
export const EDGE_AUTO_MIN_CORES = 4;
/** `auto`: one edge per this many cores. */
export const EDGE_AUTO_CORES_PER_EDGE = 4;
/** `auto` never starts more than this many. */
export const EDGE_AUTO_MAX = 8;

export function edgeThreads(setting: 'auto' | number, cores = availableParallelism()): number {
  if (setting !== 'auto') return setting;
  if (cores < EDGE_AUTO_MIN_CORES) return 0;
  return Math.min(EDGE_AUTO_MAX, Math.floor(cores / EDGE_AUTO_CORES_PER_EDGE));
}
