// Small checks that also narrow a value's type for the type-checker (test/tsconfig.json is strict).

/**
 * `value`, which must be neither null nor undefined: throws (failing the test) naming `what` if it is.
 * @template T
 * @param {T} value
 * @param {string} [what]
 * @returns {NonNullable<T>}
 */
export function present(value, what = 'a value') {
  if (value === null || value === undefined) throw new Error(`expected ${what}, got ${value}`);
  return /** @type {NonNullable<T>} */ (value);
}

/**
 * A count a test can wait on: `add()` counts one, `reached(n)` resolves once the count is at
 * least n. Lets a test wait for its own load to have done something without polling.
 */
export function awaitableCount() {
  let value = 0;
  /** @type {{ n: number, resolve: () => void }[]} */
  const waiters = [];
  return {
    get value() {
      return value;
    },
    add() {
      value++;
      for (const w of [...waiters]) {
        if (value < w.n) continue;
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve();
      }
    },
    /** @param {number} n */
    reached(n) {
      return value >= n ? Promise.resolve() : new Promise((resolve) => waiters.push({ n, resolve: () => resolve(undefined) }));
    },
  };
}

/**
 * The relative L2 distance of `got` from `want`: ‖got − want‖ / ‖want‖ (0 for two zero vectors).
 * How the GPU suites and benches compare a GPU's answers with the CPU's, or with themselves.
 * @param {ArrayLike<number | bigint>} got
 * @param {ArrayLike<number | bigint>} want
 */
export function relativeL2(got, want) {
  let d = 0;
  let n = 0;
  for (let i = 0; i < want.length; i++) {
    d += (Number(got[i]) - Number(want[i])) ** 2;
    n += Number(want[i]) ** 2;
  }
  return Math.sqrt(d / Math.max(n, 1e-30));
}
