/**
 * Weight uploads beside execution (runtime.upload_beside_execution): while the
 * device runs one model's batch, the weights of the cold models queued next
 * are copied in (weight-cache.ts beginUpload), so that a cold model behind
 * other work is on the device by its turn instead of its batch waiting for
 * the copy.
 *
 * Which: the models with queued requests in the order the scheduler would
 * pick them (scheduler.ts upcoming), at most MAX_UPLOADS_AHEAD in flight. An
 * upload may evict only models that neither run nor wait ahead of it; the
 * first that finds no such room ends the round, so a model further back never
 * takes the room the one before it needs.
 *
 * When (execution.ts): on a GPU the copies are issued before the run, on the
 * arena's upload stream, and the copy engine moves them while the run's
 * kernels go; in host memory (backend cpu) the device thread copies after it
 * has handed the run to one of libuv's threads, so the copy takes the device
 * thread's idle time, not the run's. A run made on the device thread itself
 * (backend cpu, shorter than inline_run_below_ms) has no uploads beside it.
 */
import { MAX_UPLOADS_AHEAD } from '../../shared/constants.js';
import type { InferCommand } from '../../shared/channels/device.js';
import type { InstanceKey } from '../../shared/model-spec.js';
import type { Scheduler } from './scheduler.js';
import type { WeightCache } from './weight-cache.js';

export class UploadsAhead {
  readonly #cache: WeightCache<InstanceKey>;
  readonly #scheduler: Scheduler<InferCommand>;
  readonly #warn: (err: unknown) => void;
  /** Whether uploads are issued before the run (a GPU's upload stream) or made while it runs (host memory). */
  readonly issuedBeforeRun: boolean;
  /** Set by the first upload that fails: the device goes on loading each model at its turn, said once. */
  #failed = false;

  constructor(cache: WeightCache<InstanceKey>, scheduler: Scheduler<InferCommand>, warn: (err: unknown) => void) {
    this.#cache = cache;
    this.#scheduler = scheduler;
    this.#warn = warn;
    this.issuedBeforeRun = cache.arena.device !== 'cpu';
  }

  /** Beside `running`'s batch: start uploads for the cold models queued next; how many started. */
  start(running: InstanceKey): number {
    if (this.#failed) return 0;
    const cache = this.#cache;
    const keep = new Set<InstanceKey>([running]);
    let started = 0;
    try {
      for (const instance of this.#scheduler.upcoming()) {
        if (cache.uploadsInFlight >= MAX_UPLOADS_AHEAD) break;
        if (!keep.has(instance)) {
          const outcome = cache.beginUpload(instance, keep);
          if (outcome === 'no room') break;
          if (outcome === 'started') started++;
        }
        keep.add(instance);
      }
    } catch (err) {
      // The copy was refused: models load at their turn from now on, as with the switch off (a
      // device whose copies fail is likely failing; its runs say so).
      this.#failed = true;
      this.#warn(err);
    }
    return started;
  }
}
