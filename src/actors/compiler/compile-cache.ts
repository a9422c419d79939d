/**
 * "Compiling" a bundle's ONNX file, once: ONNX Runtime optimises it at level
 * 'all' and saves the result; its weights are then taken out (split-weights.ts),
 * leaving a weightless `graph.onnx` that opens in about a millisecond. The
 * weights split off are the optimised ones (ORT reorders conv weights into
 * blocked layouts at that level), so runs fed them are as fast as the embedded
 * model (docs/weight-cache.md has the table).
 *
 * Weight tensors are stored by content: `tensors/<key>.bin`, where the key is
 * a SHA-256 of the tensor's datatype, dims and bytes. Models fine-tuned from
 * one backbone share those files, as they share host RAM and device blocks.
 *
 * The saved model is specific to the hardware and the runtime, so the cache
 * directory's entries are keyed by the source file's content hash, the ONNX
 * Runtime version, the backend and the CPU's features. A miss (or an entry
 * that does not read back whole) compiles again. Entries are written to a
 * temporary directory and renamed into place, so devices compiling the same
 * file at once, or a crash mid-write, never leave a half entry behind.
 *
 * A damaged entry (a disk error, a hand edit, a bad copy of the cache) is
 * detected and compiled again, never served: the index records the graph's
 * SHA-256, checked on every hit (the graph is weightless, so this is cheap),
 * and a tensor file must hash to its key when the compiler reads it into host
 * RAM (worker.ts; `tensorIntact`), which it does once per process per tensor.
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { threadId } from 'node:worker_threads';
import type { CompiledExecutable, WeightEntry } from '../../shared/channels/compiler.js';

export type { CompiledExecutable, WeightEntry };
import { splitWeights } from './split-weights.js';
import { MAX_MODEL_FILE_BYTES, readFileChunks } from '../../bundle/bundle-file.js';

/** Bump when the entry layout or the splitting rule changes: old entries then miss (5: small floats move out). */
const CACHE_FORMAT = 5;


interface IndexFile {
  format: number;
  source: string;
  /** SHA-256 of graph.onnx. */
  graph: string;
  weights: Omit<WeightEntry, 'path'>[];
}

function tensorPath(cacheDir: string, key: string): string {
  return path.join(cacheDir, 'tensors', `${key}.bin`);
}

/** Store a tensor's bytes under its key, unless a whole file is there already; atomic. */
function storeTensor(file: string, bytes: Uint8Array): void {
  try {
    if (statSync(file).size === bytes.byteLength) return;
  } catch {
    // not there yet
  }
  const tmp = `${file}.tmp-${process.pid}-${threadId}-${Math.random().toString(36).slice(2)}`;
  writeFileSync(tmp, bytes);
  renameSync(tmp, file);
}

let fingerprint: string | undefined;

/** The CPU's identity as far as compiled kernels care: architecture and instruction-set flags. */
export function hostFingerprint(): string {
  if (fingerprint) return fingerprint;
  let flags = '';
  try {
    const info = readFileSync('/proc/cpuinfo', 'utf8');
    flags = /^(?:flags|Features)\s*:\s*(.*)$/m.exec(info)?.[1] ?? '';
  } catch {
    // not Linux: the CPU model name stands in for its flags
  }
  fingerprint = `${os.arch()} ${flags || os.cpus()[0]?.model || 'unknown'}`;
  return fingerprint;
}

/** Names the runtime and the backend a graph is optimised for: part of the compile cache's key. */
export function runtimeName(version: string, backend: 'cpu' | 'cuda'): string {
  return `onnxruntime ${version} ${backend}`;
}

export function weightKey(datatype: string, dims: readonly number[], bytes: Uint8Array): string {
  return createHash('sha256').update(`${datatype}[${dims.join(',')}]`).update(bytes).digest('hex');
}

/** Do a tensor file's bytes (read into `bytes`) hash to its key? */
export function tensorIntact(w: Pick<WeightEntry, 'datatype' | 'dims' | 'key'>, bytes: Uint8Array): boolean {
  return weightKey(w.datatype, w.dims, bytes) === w.key;
}

/**
 * Throw away a damaged tensor file and the entries that name it, so the next compile of their
 * sources writes them again (storeTensor keeps a file of the right size, so it must go).
 */
export function discardDamaged(tensorFile: string, entryDirs: Iterable<string>): void {
  rmSync(tensorFile, { force: true });
  for (const dir of entryDirs) rmSync(dir, { recursive: true, force: true });
}

const sha256 = (bytes: Uint8Array) => createHash('sha256').update(bytes).digest('hex');

/**
 * Read an entry back: the entry, or undefined when there is none (or one of an older format), or
 * `{ damaged }` saying what is wrong with one that does not read back whole and intact.
 */
function readEntry(cacheDir: string, dir: string): CompiledExecutable | { damaged: string } | undefined {
  let index: IndexFile;
  try {
    index = JSON.parse(readFileSync(path.join(dir, 'index.json'), 'utf8')) as IndexFile;
  } catch (err) {
    return existsSync(dir) ? { damaged: `${path.join(dir, 'index.json')} does not read: ${(err as Error).message}` } : undefined;
  }
  if (index?.format !== CACHE_FORMAT) return undefined;
  const graphPath = path.join(dir, 'graph.onnx');
  try {
    if (sha256(readFileSync(graphPath)) !== index.graph) return { damaged: `${graphPath} does not hash to the index's ${index.graph}` };
    const weights = index.weights.map((w) => ({ ...w, path: tensorPath(cacheDir, w.key) }));
    const short = weights.find((w) => statSync(w.path).size !== w.byteLength);
    if (short) return { damaged: `${short.path} is not ${short.byteLength} bytes long` };
    return { dir, graphPath, graph: index.graph, weights, hit: true };
  } catch (err) {
    return { damaged: (err as Error).message };
  }
}

const isEntry = (e: ReturnType<typeof readEntry>): e is CompiledExecutable => e !== undefined && !('damaged' in e);

export interface CompileOptions {
  cacheDir: string;
  /** Names the runtime and backend (e.g. `onnxruntime 1.30.0 cpu`): part of the key. */
  runtime: string;
  /** Optimise `source` at level 'all' and save the optimised model to `target`. */
  optimise: (source: string, target: string) => Promise<void>;
}

/** The compiled form of an ONNX file: from the cache, or compiled now and stored. */
export async function compileExecutable(source: string, options: CompileOptions): Promise<CompiledExecutable> {
  // Read through the bundle-file checks again: the file may have become a FIFO or a device since the scan.
  const hash = createHash('sha256');
  readFileChunks(source, MAX_MODEL_FILE_BYTES, (chunk) => hash.update(chunk));
  const sourceHash = hash.digest('hex');
  const key = createHash('sha256').update(`${CACHE_FORMAT}\n${options.runtime}\n${hostFingerprint()}\n${sourceHash}`).digest('hex').slice(0, 32);
  const dir = path.join(options.cacheDir, key);
  const found = readEntry(options.cacheDir, dir);
  if (isEntry(found)) return found;
  rmSync(dir, { recursive: true, force: true }); // a partial, damaged or outdated entry
  const damaged = found?.damaged;

  const tmp = `${dir}.tmp-${process.pid}-${threadId}-${Math.random().toString(36).slice(2)}`;
  mkdirSync(tmp, { recursive: true });
  mkdirSync(path.join(options.cacheDir, 'tensors'), { recursive: true });
  try {
    const optimised = path.join(tmp, 'optimised.onnx');
    await options.optimise(source, optimised);
    // A plain Uint8Array over the file's bytes (no copy): Buffer's own slice is a view, Uint8Array's a copy, and
    // splitWeights relies on the latter.
    const file = readFileSync(optimised);
    const { graph, weights } = splitWeights(new Uint8Array(file.buffer, file.byteOffset, file.byteLength));
    const entries = weights.map((w) => {
      const key = weightKey(w.datatype, w.dims, w.data);
      storeTensor(tensorPath(options.cacheDir, key), w.data);
      return { name: w.name, datatype: w.datatype, dims: w.dims, byteLength: w.data.byteLength, key };
    });
    writeFileSync(path.join(tmp, 'graph.onnx'), graph);
    const index: IndexFile = { format: CACHE_FORMAT, source: path.resolve(source), graph: sha256(graph), weights: entries };
    writeFileSync(path.join(tmp, 'index.json'), JSON.stringify(index));
    rmSync(optimised);
    try {
      renameSync(tmp, dir);
    } catch (err) {
      // Another device compiled the same file meanwhile: its entry is as good as ours.
      if (!isEntry(readEntry(options.cacheDir, dir))) throw err;
    }
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
  const entry = readEntry(options.cacheDir, dir);
  if (!isEntry(entry)) throw new Error(`the compile cache entry ${dir} did not read back${entry ? `: ${entry.damaged}` : ''}`);
  return { ...entry, hit: false, ...(damaged ? { damaged } : {}) };
}
