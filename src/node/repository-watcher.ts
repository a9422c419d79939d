/**
 * Dynamic model control: watch the repository (file events, debounced, plus a poll every
 * `model_poll_seconds` as a safety net for filesystems that drop events) and let the repository
 * act on what changed. Looks never overlap: an event during a look triggers one more look after it.
 */
import { watch, type FSWatcher } from 'node:fs';
import type { Logger } from 'pino';
import type { ModelRepository } from './repository.js';

/** Quiet time after the last file event before looking: a bundle is written in several steps. */
const DEBOUNCE_MS = 300;

export function watchRepository(repository: ModelRepository, dir: string, pollSeconds: number, logger: Logger): () => void {
  let running = false;
  let again = false;
  let debounce: NodeJS.Timeout | undefined;
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
      } while (again);
    } finally {
      running = false;
    }
  };
  let watcher: FSWatcher | undefined;
  try {
    watcher = watch(dir, { recursive: true }, () => {
      clearTimeout(debounce);
      debounce = setTimeout(() => void look(), DEBOUNCE_MS);
    });
    watcher.on('error', (err) => logger.warn({ err }, `watching ${dir} failed; polling every ${pollSeconds} s only`));
  } catch (err) {
    logger.warn({ err }, `cannot watch ${dir}; polling every ${pollSeconds} s only`);
  }
  const poll = setInterval(() => void look(), pollSeconds * 1000);
  poll.unref();
  return () => {
    clearTimeout(debounce);
    clearInterval(poll);
    watcher?.close();
  };
}
