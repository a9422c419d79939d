/**
 * Reading a bundle's own files (manifest.yaml, model.js, the ONNX files) without letting the
 * file decide how long that takes. A repository is a directory anyone with write access can drop
 * things into, and the readers run on threads that serve requests (the manifest on the main
 * thread) or that other models wait for (the compiler), so a bundle file must be:
 *
 * - inside its bundle once symbolic links are resolved: a link to another bundle's file, to
 *   /etc or to /dev/zero is refused, not followed;
 * - a regular file: a FIFO with no writer would block the reader forever, a device such as
 *   /dev/zero never ends;
 * - no bigger than its limit, checked on the open descriptor, and read no further than the size
 *   that was checked, so a file that grows while it is read cannot make the reader grow with it.
 *
 * The file is opened with O_NONBLOCK, so even a FIFO swapped in after the check cannot block the
 * open; fstat on the descriptor then sees what was really opened.
 */
import { closeSync, constants, fstatSync, openSync, readSync, realpathSync } from 'node:fs';
import path from 'node:path';
import { errors } from '../shared/errors.js';

/** manifest.yaml: a few kilobytes in practice. */
export const MAX_MANIFEST_BYTES = 1024 * 1024;
/** model.js: the hooks themselves; whatever they import is not a bundle file. */
export const MAX_HOOK_FILE_BYTES = 16 * 1024 * 1024;
/** A warm-up data file (manifest warmup.data): one batch row of one input. */
export const MAX_WARMUP_FILE_BYTES = 64 * 1024 * 1024;
/**
 * An ONNX file: one protobuf message, which cannot exceed 2 GiB (larger models keep their weights
 * in external data files, which ONNX Runtime reads itself). This is the format's limit, not a
 * setting.
 */
export const MAX_MODEL_FILE_BYTES = 2 ** 31 - 1;

function describe(size: number): string {
  return size >= 1024 * 1024 ? `${(size / 1024 / 1024).toFixed(1)} MiB` : `${size} bytes`;
}

/**
 * The real path of `name` in the bundle directory `dir`, checked: inside the bundle, a regular
 * file, at most `maxBytes`. Throws BUNDLE_INVALID naming the file and what is wrong.
 */
export function checkBundleFile(dir: string, name: string, maxBytes: number): { path: string; size: number } {
  const bundle = path.basename(dir);
  let real: string;
  let realDir: string;
  try {
    realDir = realpathSync(dir);
    real = realpathSync(path.join(dir, name));
  } catch (err) {
    throw errors.bundleInvalid(bundle, name, `cannot be opened: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
  const relative = path.relative(realDir, real);
  if (relative === '' || relative.startsWith('..') || path.isAbsolute(relative)) {
    throw errors.bundleInvalid(bundle, name, `is a symbolic link to ${real}, outside the bundle; a bundle's files must be inside its directory`);
  }
  const fd = openBundleFile(bundle, name, real);
  try {
    return { path: real, size: checkOpened(bundle, name, fd, maxBytes) };
  } finally {
    closeSync(fd);
  }
}

/** The whole of a bundle file, checked as checkBundleFile does. */
export function readBundleFile(dir: string, name: string, maxBytes: number): Buffer {
  const bundle = path.basename(dir);
  const { path: real } = checkBundleFile(dir, name, maxBytes);
  const fd = openBundleFile(bundle, name, real);
  try {
    const size = checkOpened(bundle, name, fd, maxBytes);
    const bytes = Buffer.allocUnsafe(size);
    let done = 0;
    while (done < size) {
      const n = readSync(fd, bytes, done, size - done, done);
      if (n === 0) break; // shrank while read: what was there is what the parser sees
      done += n;
    }
    return bytes.subarray(0, done);
  } finally {
    closeSync(fd);
  }
}

/**
 * Feed a file's bytes, in chunks, to `consume`, reading at most the size fstat reports when it is
 * opened (the compiler hashes ONNX files this way). Same checks as checkBundleFile on the
 * descriptor, so a file swapped for a FIFO or a device after the bundle was scanned is refused.
 */
export function readFileChunks(file: string, maxBytes: number, consume: (chunk: Uint8Array) => void): void {
  const bundle = path.basename(path.dirname(file));
  const name = path.basename(file);
  const fd = openBundleFile(bundle, name, file);
  try {
    const size = checkOpened(bundle, name, fd, maxBytes);
    const chunk = Buffer.allocUnsafe(Math.min(size, 4 * 1024 * 1024) || 1);
    let done = 0;
    while (done < size) {
      const n = readSync(fd, chunk, 0, Math.min(chunk.byteLength, size - done), done);
      if (n === 0) break;
      consume(chunk.subarray(0, n));
      done += n;
    }
  } finally {
    closeSync(fd);
  }
}

function openBundleFile(bundle: string, name: string, file: string): number {
  try {
    return openSync(file, constants.O_RDONLY | constants.O_NONBLOCK);
  } catch (err) {
    throw errors.bundleInvalid(bundle, name, `cannot be opened: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
}

function checkOpened(bundle: string, name: string, fd: number, maxBytes: number): number {
  const st = fstatSync(fd);
  if (!st.isFile()) {
    const kind = st.isFIFO() ? 'a named pipe' : st.isCharacterDevice() || st.isBlockDevice() ? 'a device' : st.isDirectory() ? 'a directory' : st.isSocket() ? 'a socket' : 'not a regular file';
    throw errors.bundleInvalid(bundle, name, `is ${kind}; a bundle's files must be regular files`);
  }
  if (st.size > maxBytes) {
    throw errors.bundleInvalid(bundle, name, `is ${describe(st.size)}, over the limit of ${describe(maxBytes)} for this file`);
  }
  return st.size;
}
