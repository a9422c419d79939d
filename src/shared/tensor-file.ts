/**
 * Reading a weight tensor's bytes from its file in the compile cache
 * (`cache_dir/tensors/<key>.bin`) straight into memory the caller owns: host
 * RAM (the compiler, a device reading what it was not offered) or a device's
 * arena (`unpinned` models). Any thread.
 */
import { closeSync, openSync, readSync } from 'node:fs';
import { errors } from './errors.js';

export function readTensorFile(file: string, byteLength: number, into: Uint8Array): void {
  const fd = openSync(file, 'r');
  try {
    let done = 0;
    while (done < byteLength) {
      const n = readSync(fd, into, done, byteLength - done, done);
      if (n === 0) throw errors.internal(`${file} ended after ${done} of its ${byteLength} bytes`);
      done += n;
    }
  } finally {
    closeSync(fd);
  }
}
