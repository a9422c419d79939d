// mulberry32: a small seeded generator, so a fuzzer's finding can be replayed from its seed
// (bench/fuzz.js, bench/fuzz-rest.js).

/**
 * The generator's draws from `seed`: next() in [0, 1), int(n), pick(list), chance(p).
 * @param {number} seed
 */
export function generator(seed) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (/** @type {number} */ n) => Math.floor(next() * n);
  /**
   * @template T
   * @param {readonly T[]} list
   * @returns {T}
   */
  const pick = (list) => list[int(list.length)];
  return { next, int, pick, chance: (/** @type {number} */ p) => next() < p };
}
