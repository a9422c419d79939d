/**
 * The shared-memory addon (shm.cc, built into src/native/build by `npm install`) behind typed
 * functions whose errors are Stowage's. Loaded lazily: a server that never sees a shared-memory
 * region never loads it.
 */
import { createRequire } from 'node:module';
import { errors, quote, type StowageError } from '../shared/errors.js';

interface Addon {
  open(key: string): { fd: number; size: number };
  map(fd: number, offset: number, byteSize: number): ArrayBuffer;
  close(fd: number): void;
}

let addon: Addon | undefined;

function load(): Addon {
  if (!addon) {
    const require = createRequire(import.meta.url);
    try {
      // dist/native/shm.js -> src/native/build/Release/stowage_shm.node
      addon = require('../../src/native/build/Release/stowage_shm.node') as Addon;
    } catch (err) {
      throw errors.internal(`the shared-memory addon is not built (run npm run build:native): ${(err as Error).message}`);
    }
  }
  return addon;
}

function wrap(key: string, err: unknown): StowageError {
  const e = err as Error & { code?: string };
  if (e.code === 'EINVALKEY' || e.code === 'ENOTREG' || e.code === 'ETOOSMALL' || e.code === 'EARGS') return errors.sharedMemoryInvalid(`key ${quote(key)}: ${e.message}`);
  // A key naming no object is the client's mistake (404), not the server's: Triton answers it
  // INTERNAL (500) through the catch-all of its shared-memory manager, which says nothing to a client.
  if (e.code === 'ENOENT') return errors.sharedMemoryKeyNotFound(key);
  if (e.code === 'EOPEN' || e.code === 'EMAP') return errors.sharedMemoryOpenFailed(key, e.message);
  return err as StowageError;
}

/** Open the POSIX shared-memory object `key`; the descriptor keeps it alive until `closeSharedMemory`. */
export function openSharedMemory(key: string): { fd: number; size: number } {
  try {
    return load().open(key);
  } catch (err) {
    throw wrap(key, err);
  }
}

/**
 * Map `byteSize` bytes at `offset` of an opened object, read-write. The mapping lives as long as
 * the returned ArrayBuffer (or any view of it) is referenced, whatever happens to the descriptor.
 */
export function mapSharedMemory(key: string, fd: number, offset: number, byteSize: number): ArrayBuffer {
  try {
    return load().map(fd, offset, byteSize);
  } catch (err) {
    throw wrap(key, err);
  }
}

export function closeSharedMemory(fd: number): void {
  load().close(fd);
}
