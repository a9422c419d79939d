/**
 * A device whose GPU context is poisoned, on its device thread. After an illegal address, a launch
 * failure, an uncorrectable ECC error or a GPU off the bus, every later CUDA call in this process
 * on that GPU fails: the models stay loaded and every request to the device would fail for ever,
 * and a replacement worker thread would inherit the same context. So a failed run is looked at
 * (its CUDA error, or a probe of the device: native/cuda.ts), and a poisoned device is taken out:
 * this thread refuses everything from then on, and tells the main thread once (`outOfService`),
 * which stops routing to it, fails what it had pending, never restarts it, and ends the process
 * when no device is left in service (actors/device/handle.ts, node/server.ts).
 */
import { existsSync, renameSync } from 'node:fs';
import { errors, type StowageError } from '../../shared/errors.js';
import { isOrtError } from '../../native/ort.js';
import { CUDA_CAPTURE_ERRORS, probeGpu, STICKY_CUDA_ERRORS } from '../../native/cuda.js';

export interface Poisoned {
  cudaError: number;
  reason: string;
}

/**
 * What poisoned the GPU, from a failed call's error (a sticky CUDA error) or, failing that, a probe
 * of the GPU; null when it still works. A stream-capture error (another thread's graph capture was
 * open) poisons nothing, whether the call or the probe met it.
 */
export function poisonOf(err: unknown, probe: () => { error: number; message: string }): Poisoned | null {
  const cudaError = isOrtError(err) ? err.cudaError : undefined;
  if (cudaError !== undefined && CUDA_CAPTURE_ERRORS.has(cudaError)) return null;
  if (cudaError !== undefined && STICKY_CUDA_ERRORS.has(cudaError)) {
    return { cudaError, reason: `CUDA error ${cudaError} in a run: ${(err as Error).message}` };
  }
  const probed = probe();
  if (probed.error === 0 || CUDA_CAPTURE_ERRORS.has(probed.error)) return null;
  return { cudaError: probed.error, reason: `after a run failed (${(err as Error).message}), the GPU answers CUDA error ${probed.error}: ${probed.message}` };
}

/** One device's service: in, or out with why. */
export class DeviceService {
  readonly #deviceId: number;
  readonly #ordinal: number | null;
  readonly #tell: (poisoned: Poisoned) => void;
  /**
   * The error every request and call gets once the device is out; null while it serves. A field,
   * not a getter: every request reads it, and a device in service does nothing more for it here.
   * Set once, by `takeOut`.
   */
  readonly refusal: StowageError | null = null;

  /** `ordinal`: the GPU (null on backend cpu, whose runs poison nothing). `tell`: the main thread, once. */
  constructor(deviceId: number, ordinal: number | null, tell: (poisoned: Poisoned) => void) {
    this.#deviceId = deviceId;
    this.#ordinal = ordinal;
    this.#tell = tell;
  }

  /** After a run failed: the error that takes the device out, when the failure poisoned the GPU; else null. */
  afterFailedRun(err: unknown): StowageError | null {
    if (this.refusal) return this.refusal;
    if (this.#ordinal === null) return null;
    const ordinal = this.#ordinal;
    const poisoned = poisonOf(err, () => probeGpu(ordinal));
    return poisoned ? this.takeOut(poisoned) : null;
  }

  /** Take the device out of service (once): the main thread is told; the error is what its requests get. */
  takeOut(poisoned: Poisoned): StowageError {
    if (this.refusal) return this.refusal;
    const refusal = errors.deviceUnavailable(this.#deviceId, `it is out of service: ${poisoned.reason}`);
    (this as { refusal: StowageError | null }).refusal = refusal;
    this.#tell(poisoned);
    return refusal;
  }
}

/**
 * Fault injection, for the test of a poisoned device (test/adversarial/faults.test.js): when the
 * file STOWAGE_FAULT_DEVICE_STICKY names exists as a batch is about to run, the device that takes
 * it (renames it: one device only) is poisoned as an illegal address would poison its GPU. Unset
 * (production), there is no such step: null.
 */
const faultFile = process.env.STOWAGE_FAULT_DEVICE_STICKY;
export const injectedPoison = faultFile ? (deviceId: number) => poisonFromFile(faultFile, deviceId) : null;

function poisonFromFile(faultFile: string, deviceId: number): Poisoned | null {
  if (!existsSync(faultFile)) return null;
  try {
    renameSync(faultFile, `${faultFile}.taken-by-device-${deviceId}`);
  } catch {
    return null;
  }
  return { cudaError: 700, reason: `CUDA error 700 in a run: an illegal memory access was encountered (a fault injected by ${faultFile})` };
}
