/**
 * Dynamic model control: watch the repository (file events, debounced, plus a poll every
 * `model_poll_seconds` as a safety net for filesystems that drop events) and let the repository
 * act on what changed. Looks never overlap: an event during a look triggers one more look after it.
 * A watch follows a directory, not a path: when the repository directory is replaced (removed
 * and restored, a mount remounted) the next look, by poll, watches the new one.
 */
import { statSync, watch, type FSWatcher } from 'node:fs';
import type { Logger } from 'pino';
import type { ModelRepository } from './repository.js';

/** Quiet time after the last file event before looking: a bundle is written in several steps. */
const DEBOUNCE_MS = 300;

export function watchRepository(repository: ModelRepository, dir: string, pollSeconds: number, logger: Logger): () => void {
  let running = false;
  let again = false;
  let debounce: NodeJS.Timeout | undefined;
  let watcher: FSWatcher | undefined;
  /** The directory (device and inode) the watcher follows. */
  let watched: string | undefined;
  const identity = () => {
    try {
      const s = statSync(dir);
      return `${s.dev}:${s.ino}`;
    } catch {
      return undefined;
    }
  };
  const arm = () => {
    const now = identity();
    if (now === watched) return;
    watcher?.close();
    watcher = undefined;
    watched = now;
    if (!now) return; // gone: the poll looks until it is back
    try {
      watcher = watch(dir, { recursive: true }, () => {
        clearTimeout(debounce);
        debounce = setTimeout(() => void look(), DEBOUNCE_MS);
      });
      watcher.on('error', (err) => {
        logger.warn({ err }, `watching ${dir} failed; polling every ${pollSeconds} s until it can be watched again`);
        watcher?.close();
        watcher = undefined;
        watched = undefined;
      });
    } catch (err) {
      logger.warn({ err }, `cannot watch ${dir}; polling every ${pollSeconds} s only`);
    }
  };
  const look = async () => {
    if (running) {
      again = true;
      return;
    }
    running = true;
    try {
      do {
        again = false;
        await repository.sync().catch((err: Error) => logger.error({ err }, `repository sync failed: ${err.message}`));
        arm();
      } while (again);
    } finally {
      running = false;
    }
  };
  arm();
  const poll = setInterval(() => void look(), pollSeconds * 1000);
  poll.unref();
  return () => {
    clearTimeout(debounce);
    clearInterval(poll);
    watcher?.close();
  };
}
