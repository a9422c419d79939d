/**
 * Start something whose start-up can fail halfway (a node, a gateway-only process): on failure
 * it is stopped, releasing whatever it had started (ports, threads), before the error goes on.
 */
export async function startOrStop<T extends { stop(): Promise<void> }>(thing: T, start: (thing: T) => Promise<void>): Promise<T> {
  try {
    await start(thing);
  } catch (err) {
    await thing.stop();
    throw err;
  }
  return thing;
}
