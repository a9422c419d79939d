/**
 * Reused memory for an execution's joined and realigned inputs and the outputs it does not give
 * away, on the device actor's thread.
 *
 * Executions run one at a time, and ONNX Runtime uses its bound tensors only while a run lasts, so
 * the memory one execution staged in is free again when the next begins. Copying into
 * memory already mapped and warm costs a fraction of copying into a fresh allocation (page faults
 * and zeroing now, a collection to free it later): measured ≈19 GB/s against ≈2.4 GB/s for
 * 600 KiB on the 2-vCPU machine of docs/performance.md.
 */

/** Buffers larger than this are not kept between executions (a rare huge batch does not pin its memory). */
const MAX_KEPT_BYTES = 64 * 2 ** 20;

export class Staging {
  /** One buffer per `take` of an execution, in order: the same inputs reuse the same buffer. */
  readonly #kept: ArrayBuffer[] = [];
  /**
   * Backend cuda: the kept buffers' registrations (pinned, so ONNX Runtime's copies to the GPU run at the bus's speed).
   */
  readonly #pins: ({ release(): void } | undefined)[] = [];
  readonly #pin: ((buffer: ArrayBuffer) => { release(): void } | undefined) | undefined;

  /** `pin` registers a kept buffer for fast copies to the device (backend cuda). */
  constructor(pin?: (buffer: ArrayBuffer) => { release(): void } | undefined) {
    this.#pin = pin;
  }
  #next = 0;
  /** This execution's buffers too large to keep: staging all the same until the next begins. */
  readonly #loose = new Set<ArrayBuffer>();

  /**
   * `bytes` bytes for this execution, 8-byte aligned; valid until the next begins. The contents are
   * whatever the last execution left: the caller writes every byte it feeds.
   */
  take(bytes: number): Uint8Array {
    const i = this.#next++;
    let buffer = this.#kept[i];
    if (!buffer || buffer.byteLength < bytes) {
      buffer = new ArrayBuffer(bytes);
      if (bytes <= MAX_KEPT_BYTES) {
        this.#pins[i]?.release();
        this.#kept[i] = buffer;
        this.#pins[i] = this.#pin?.(buffer);
      } else this.#loose.add(buffer);
    }
    return new Uint8Array(buffer, 0, bytes);
  }

  /** Whether `buffer` is staging memory (it must not be given away: the next execution reuses it). */
  owns(buffer: ArrayBufferLike): boolean {
    return this.#kept.includes(buffer as ArrayBuffer) || this.#loose.has(buffer as ArrayBuffer);
  }

  /** A new execution begins: the last one's staged inputs and outputs are no longer read. */
  beginExecution(): void {
    this.#next = 0;
    this.#loose.clear();
  }

  /** Bytes held between executions. */
  get keptBytes(): number {
    return this.#kept.reduce((sum, b) => sum + (b?.byteLength ?? 0), 0);
  }
}
