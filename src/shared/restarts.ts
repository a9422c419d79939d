/**
 * When a supervisor restarts an actor's worker that crashed (the device actors' handle,
 * actors/device/handle.ts; the edge threads', actors/edge/handle.ts), and when it gives up: after
 * `limit` crashes in a row with no sign of health between them, a worker that crashes again at
 * once would only burn the machine. What counts as health is the supervisor's to say (`healthy`):
 * a device that answered something, an edge that has listened long enough.
 */
export class ConsecutiveCrashes {
  readonly limit: number;
  #count = 0;

  constructor(limit: number) {
    this.limit = limit;
  }

  /** How many crashes in a row, this one included. */
  get count(): number {
    return this.#count;
  }

  /** A crash: whether to restart the worker (false once `limit` crashes came in a row). */
  crashed(): boolean {
    this.#count++;
    return this.#count < this.limit;
  }

  /** The worker showed it works: the count starts again. */
  healthy(): void {
    this.#count = 0;
  }
}
