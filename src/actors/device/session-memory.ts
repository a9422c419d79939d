/**
 * GPU memory beyond the weight arena. A model's sessions hold device memory of their own: ONNX
 * Runtime's arena, cuBLAS and cuDNN workspaces, and the activations of every batch size they have
 * run (911 MiB for a weightless ResNet-50 warmed at 1, 8 and 32 on the H200: docs/gpu.md). That,
 * not the weights, is what limits how many models a GPU can hold, so it is measured rather than
 * guessed: on the device thread, the GPU's free memory before a model's load and after its
 * warm-up. The weight arena is one allocation made when the device starts, so weight loads do not
 * move the figure. Two device actors on one GPU (gpus: [0, 0]) loading at the same moment see each
 * other's allocations: their figures are then approximate.
 *
 * When the GPU (or ONNX Runtime's arena, under runtime.cuda.ort_arena_limit_bytes) runs out, the
 * load or run fails with STOWAGE_DEVICE_MEMORY_EXHAUSTED (RESOURCE_EXHAUSTED) saying where the
 * memory went and what to change, instead of ONNX Runtime's bare "out of memory".
 */
import { errors, type StowageError } from '../../shared/errors.js';
import { isOutOfMemory, type OrtError } from '../../native/ort.js';

/** Sizes in the messages: MiB, or KiB and bytes below one (a 64 KiB arena limit is not "0 MiB"). */
const mib = (bytes: number) => (bytes >= 2 ** 20 ? `${(bytes / 2 ** 20).toFixed(0)} MiB` : bytes >= 1024 ? `${(bytes / 1024).toFixed(0)} KiB` : `${bytes} bytes`);

export interface SessionMemoryOptions {
  /** The GPU's free bytes now (cudaMemGetInfo on the device's ordinal). */
  free: () => number;
  /** The device actor's id and the GPU's CUDA ordinal, for messages. */
  device: number;
  gpu: number;
  /** The weight arena's size (0 when the cache is off). */
  arenaBytes: number;
  /** runtime.cuda.ort_arena_limit_bytes (0: no limit). */
  ortArenaLimitBytes: number;
}

/** `Id`: what names a loaded instance (the device's InstanceKey; tests use plain strings). */
export class SessionMemory<Id extends string = string> {
  readonly #o: SessionMemoryOptions;
  /** Bytes measured per loaded instance. */
  readonly #held = new Map<Id, number>();

  constructor(options: SessionMemoryOptions) {
    this.#o = options;
  }

  /** The GPU's free bytes now: take it before a load, give it to `record` after. */
  free(): number {
    return this.#o.free();
  }

  /** What `instance`'s sessions took since `freeBefore`; kept until `forget`. */
  record(instance: Id, freeBefore: number): number {
    const bytes = Math.max(0, freeBefore - this.#o.free());
    this.#held.set(instance, bytes);
    return bytes;
  }

  /** What `instance`'s sessions took when it loaded; undefined before (or without) a measurement. */
  of(instance: Id): number | undefined {
    return this.#held.get(instance);
  }

  forget(instance: Id): void {
    this.#held.delete(instance);
  }

  /** The sessions measured so far on this device, largest first, for messages. */
  describe(): string {
    const all = [...this.#held.values()];
    if (all.length === 0) return 'no other model is loaded on it';
    const sum = all.reduce((a, b) => a + b, 0);
    return `the ${all.length} loaded ${all.length === 1 ? 'model\'s' : 'models\''} sessions hold ${mib(sum)} (the largest ${mib(Math.max(...all))})`;
  }

  /**
   * The error for `model` when the binding raised `err` while `doing`, if that is memory running
   * out (the binding's `outOfMemory`, native/ort.ts isOutOfMemory); null for any other failure
   * (the caller's error stands). Which memory, as the binding read it (`memory`): the GPU's, said
   * with where the GPU's memory went; the host's, said as the host's; an ONNX Runtime arena's whose
   * words do not say which device it is over: the GPU's when runtime.cuda.ort_arena_limit_bytes
   * caps the GPU arena (the limit is the likely refusal), else said as it is.
   */
  exhausted(model: string, doing: string, err: unknown): StowageError | null {
    if (!isOutOfMemory(err)) return null;
    const message = (err as Error).message;
    const o = this.#o;
    const memory = (err as OrtError).memory ?? 'gpu';
    if (memory === 'host') {
      return errors.deviceMemoryExhausted(model, `the host ran out of memory ${doing} for GPU ${o.gpu} (device ${o.device}): the failure is host memory's, not the GPU's (${mib(this.#o.free())} free on the GPU now). ${message}`);
    }
    const limit = o.ortArenaLimitBytes > 0
      ? `ONNX Runtime's arena is limited to ${mib(o.ortArenaLimitBytes)} per session (runtime.cuda.ort_arena_limit_bytes): raise it, or`
      : 'lower runtime.mem_fraction or runtime.weight_cache_fraction (or set runtime.cuda.weight_cache_bytes) to leave sessions more room, or';
    if (memory === 'arena' && o.ortArenaLimitBytes === 0) {
      return errors.deviceMemoryExhausted(model,
        `an ONNX Runtime memory arena refused a buffer ${doing} on GPU ${o.gpu} (device ${o.device}); its message does not say whether the GPU's or the host's: ${mib(this.#o.free())} free on the GPU now, the weight arena holds ${mib(o.arenaBytes)}, ${this.describe()}; if it is the GPU's, ${limit.replace(/, or$/, '')}, or serve fewer models on this GPU. ONNX Runtime: ${message}`);
    }
    return errors.deviceMemoryExhausted(model,
      `GPU ${o.gpu} (device ${o.device}) ran out of memory ${doing}: ${mib(this.#o.free())} free now, the weight arena holds ${mib(o.arenaBytes)}, ${this.describe()}; ${limit} serve fewer models on this GPU. ONNX Runtime: ${message}`);
  }
}
