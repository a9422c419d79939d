/**
 * The compiler thread (a Piscina worker; actors/compiler/handle.ts runs the
 * pool): compiles a bundle's ONNX files into the compile cache and reads the
 * weights the process does not hold yet into host RAM, so that a device actor
 * loading the model only opens weightless sessions (about a millisecond each)
 * and never stops executing for a compile. A compile of a large model takes
 * seconds of CPU (hashing the file, ONNX Runtime's 'all' optimisation,
 * splitting the weights); this thread lowers its own scheduling priority so
 * that, on a machine with few cores, the threads serving requests win.
 */
import { readlinkSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as ort from 'onnxruntime-node';
import type { CompiledExecutable, CompileResult, CompileTask, ReadyTask } from '../../shared/channels/compiler.js';
import { COMPILER_NICE } from '../../shared/constants.js';
import { errors, toErrorData } from '../../shared/errors.js';
import { readTensorFile } from '../../shared/tensor-file.js';
import { compileExecutable, discardDamaged, runtimeName, tensorIntact } from './compile-cache.js';

// Linux: /proc/thread-self names this thread; a nice value set on a thread id applies to that
// thread alone (and to threads it starts later). Elsewhere the compile runs at normal priority.
try {
  const tid = Number(path.basename(readlinkSync('/proc/thread-self')));
  if (Number.isInteger(tid)) os.setPriority(tid, COMPILER_NICE);
} catch {
  // not Linux, or not permitted: a compile then competes with serving as an equal
}


async function optimise(model: string, source: string, target: string, backend: 'cpu' | 'cuda'): Promise<void> {
  let session: ort.InferenceSession;
  try {
    // One thread: graph optimisation barely parallelises, and this thread is a guest on the machine.
    // Level 'all' saved to disk is hardware specific; the cache key carries the CPU's features, so ORT's warning says
    // nothing new.
    session = await ort.InferenceSession.create(source, {
      // On the CPU, 'all' (its fusions and blocked layouts are the CPU provider's). For CUDA only
      // 'basic', which any provider runs (constant folding, Conv+BatchNorm, eliminations): the CPU
      // provider's fused nodes would not run on the GPU, and the device session makes the CUDA
      // provider's own fusions when it opens the graph.
      graphOptimizationLevel: backend === 'cuda' ? 'basic' : 'all',
      executionProviders: ['cpu'],
      intraOpNumThreads: 1,
      optimizedModelFilePath: target,
      logSeverityLevel: 3,
      extra: { session: { 'intra_op.allow_spinning': '0' } },
    });
  } catch (err) {
    throw errors.bundleInvalid(model, path.basename(source), `ONNX Runtime cannot load it: ${(err as Error).message}`);
  }
  await session.release();
}

export default async function compile(task: CompileTask | ReadyTask): Promise<CompileResult> {
  if (task.type === 'ready') return { type: 'ready' }; // this module, and so onnxruntime-node, is loaded
  try {
    const repaired: string[] = [];
    // Twice at most: a damaged tensor file is thrown away with the entries naming it and they are
    // compiled again; damaged again at once means the disk itself is failing.
    for (let attempt = 1; ; attempt++) {
      const executables: CompiledExecutable[] = [];
      for (const file of task.files) {
        const e = await compileExecutable(file, { cacheDir: task.cacheDir, runtime: runtimeName(ort.env.versions.common, task.backend), optimise: (source, target) => optimise(task.model, source, target, task.backend) });
        if (e.damaged) repaired.push(e.damaged);
        executables.push(e);
      }
      const { host, damaged } = readHostWeights(executables, new Set(task.inHostRam));
      if (damaged.length === 0) return { type: 'compiled', executables, host, repaired };
      if (attempt === 2) throw errors.internal(`the compile cache in ${task.cacheDir} read back damaged twice (${damaged.join('; ')}): is its disk failing?`);
      for (const d of damaged) repaired.push(d);
    }
  } catch (err) {
    return { type: 'compileFailed', error: toErrorData(err) };
  }
}

/**
 * Read the weights the process does not hold yet into host RAM, each checked against its content
 * key; a damaged tensor file is discarded with the entries naming it, and reported.
 */
function readHostWeights(executables: CompiledExecutable[], have: ReadonlySet<string>): { host: Record<string, SharedArrayBuffer>; damaged: string[] } {
  const host: Record<string, SharedArrayBuffer> = {};
  const damaged: string[] = [];
  for (const w of executables.flatMap((e) => e.weights)) {
    if (have.has(w.key) || host[w.key]) continue;
    const buffer = new SharedArrayBuffer(w.byteLength);
    readTensorFile(w.path, w.byteLength, new Uint8Array(buffer));
    if (!tensorIntact(w, new Uint8Array(buffer))) {
      damaged.push(`${w.path} does not hash to its key`);
      discardDamaged(w.path, executables.filter((e) => e.weights.some((x) => x.key === w.key)).map((e) => e.dir));
      continue;
    }
    host[w.key] = buffer;
  }
  return { host, damaged };
}
