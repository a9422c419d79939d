/**
 * Client-side system shared memory for Linux, without native code: the POSIX shared-memory object
 * `/name` that the server opens with shm_open is the file `/dev/shm/name`, so creating, writing
 * and reading a region is plain file I/O here. Register the region with
 * `InferenceClient.registerSystemSharedMemory`, then name it in inputs and outputs.
 */
import { closeSync, ftruncateSync, openSync, readSync, unlinkSync, writeSync } from 'node:fs';
import path from 'node:path';

export const SHM_DIR = '/dev/shm';

function fileOf(key: string): string {
  if (!/^\/[^/]+$/.test(key) || key === '/.' || key === '/..') {
    throw new Error(`shared-memory key ${JSON.stringify(key)} must be "/" followed by a name without "/"`);
  }
  return path.join(SHM_DIR, key.slice(1));
}

/** Create (or resize) the object `key` with `byteSize` zero bytes. */
export function createRegion(key: string, byteSize: number): void {
  const fd = openSync(fileOf(key), 'w+', 0o600);
  try {
    ftruncateSync(fd, byteSize);
  } finally {
    closeSync(fd);
  }
}

/** Write a typed array's bytes at `offset`. */
export function writeRegion(key: string, offset: number, data: ArrayBufferView): void {
  const fd = openSync(fileOf(key), 'r+');
  try {
    writeSync(fd, new Uint8Array(data.buffer, data.byteOffset, data.byteLength), 0, data.byteLength, offset);
  } finally {
    closeSync(fd);
  }
}

/** Read `byteSize` bytes at `offset` into a fresh buffer. */
export function readRegion(key: string, offset: number, byteSize: number): Uint8Array {
  const out = new Uint8Array(byteSize);
  const fd = openSync(fileOf(key), 'r');
  try {
    readSync(fd, out, 0, byteSize, offset);
  } finally {
    closeSync(fd);
  }
  return out;
}

/** Remove the object (mappings the server still holds stay valid until released). */
export function destroyRegion(key: string): void {
  unlinkSync(fileOf(key));
}
