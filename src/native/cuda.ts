/**
 * CUDA for backend cuda, through the binding (cuda.cc): the CUDA libraries the CUDA execution
 * provider needs, loaded by path so that no LD_LIBRARY_PATH is needed; the GPUs this process sees
 * (CUDA_VISIBLE_DEVICES applies) as NVML describes them; host memory pinned for copies at the
 * bus's speed. Nothing is linked against CUDA: on a machine without it these calls answer errors
 * that say what is missing and the command that installs it.
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { ortAddon, ortLibraryPath, type NativeCudaDevices, type PinnedHost } from './ort.js';

export type { PinnedHost };

/** Where `npm run cuda:install` puts the CUDA libraries (tools/install-cuda.py). */
export const CUDA_INSTALL_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '.stowage', 'cuda', 'lib');
/** What a user runs to get the CUDA provider and its libraries. */
export const CUDA_INSTALL_COMMAND = 'npm run cuda:install';
/** The CUDA execution provider's own libraries, which ONNX Runtime loads from its own directory. */
export const PROVIDER_LIBRARIES = ['libonnxruntime_providers_shared.so', 'libonnxruntime_providers_cuda.so'] as const;

export interface CudaLibraries {
  /** Paths of the libraries loaded. */
  loaded: string[];
}

/**
 * The directories searched for the CUDA libraries: `STOWAGE_CUDA_LIBRARY_PATH` (colon-separated)
 * first, then the install directory, then the loader's own path.
 */
export function cudaLibraryDirs(env: NodeJS.ProcessEnv = process.env): string[] {
  const given = (env.STOWAGE_CUDA_LIBRARY_PATH ?? '').split(':').filter((d) => d.length > 0);
  return [...given, CUDA_INSTALL_DIR];
}

/**
 * Load the CUDA libraries into the process (once; every thread shares them) after checking that
 * the provider's own libraries sit beside ONNX Runtime's. Throws an error naming what is missing
 * and the command that installs it.
 */
export function loadCuda(dirs: string[] = cudaLibraryDirs()): CudaLibraries {
  const ortDir = path.dirname(ortLibraryPath());
  const absent = PROVIDER_LIBRARIES.filter((f) => !existsSync(path.join(ortDir, f)));
  if (absent.length > 0) {
    throw new Error(`backend cuda: ONNX Runtime's CUDA provider is not installed (${absent.join(', ')} missing from ${ortDir}); run ${CUDA_INSTALL_COMMAND}`);
  }
  const { loaded, missing } = ortAddon().cudaLoad(dirs);
  if (missing.length > 0) {
    throw new Error(`backend cuda: CUDA libraries missing or unloadable: ${missing.join('; ')}. Searched ${dirs.join(', ')} and the loader's path; run ${CUDA_INSTALL_COMMAND} (or set STOWAGE_CUDA_LIBRARY_PATH to where they are)`);
  }
  return { loaded };
}

/** One GPU this process sees. */
export interface GpuInfo {
  /** Its CUDA ordinal in this process (after CUDA_VISIBLE_DEVICES). */
  ordinal: number;
  name: string;
  uuid: string;
  pciBusId: string;
  memoryTotalBytes: number;
  memoryUsedBytes: number;
  utilization: number;
  powerWatts: number;
  powerLimitWatts: number;
  energyJoules: number;
}

export interface GpuReport {
  gpus: GpuInfo[];
  /** e.g. "580.159.04" (NVML), or "" without NVML. */
  driverVersion: string;
  /** The CUDA version the driver serves and the runtime loaded, as "13.0". */
  driverCuda: string;
  runtimeCuda: string;
  /** cuDNN's version as "9.19.0", or "" when not loaded. */
  cudnn: string;
  /** Why NVML's figures are missing, when they are. */
  nvmlError?: string;
}

function cudaVersion(v: number): string {
  return v > 0 ? `${Math.floor(v / 1000)}.${Math.floor((v % 1000) / 10)}` : '';
}

function cudnnVersionOf(v: number): string {
  // cuDNN 9 encodes major*10000 + minor*100 + patch.
  return v > 0 ? `${Math.floor(v / 10000)}.${Math.floor((v % 10000) / 100)}.${v % 100}` : '';
}

/** The GPUs this process sees, described (loadCuda first). Throws when CUDA cannot count them. */
export function gpuReport(): GpuReport {
  const native: NativeCudaDevices = ortAddon().cudaDevices();
  if (native.error) throw new Error(`backend cuda: CUDA sees no GPU: ${native.error} (is the NVIDIA driver installed and a GPU visible to this container?)`);
  return {
    gpus: native.devices.map((d) => ({
      ordinal: d.ordinal,
      name: d.name ?? 'unknown GPU',
      uuid: d.uuid ?? '',
      pciBusId: d.pciBusId ?? '',
      memoryTotalBytes: d.memoryTotalBytes ?? 0,
      memoryUsedBytes: d.memoryUsedBytes ?? 0,
      utilization: d.utilization ?? 0,
      powerWatts: d.powerWatts ?? 0,
      powerLimitWatts: d.powerLimitWatts ?? 0,
      energyJoules: d.energyJoules ?? 0,
    })),
    driverVersion: native.driverVersion ?? '',
    driverCuda: cudaVersion(native.driverCudaVersion),
    runtimeCuda: cudaVersion(native.runtimeVersion),
    cudnn: cudnnVersionOf(native.cudnnVersion),
    ...(native.nvmlError ? { nvmlError: native.nvmlError } : {}),
  };
}

/** Free and total memory of GPU `ordinal` as CUDA counts them (makes this thread's context on it). */
export function gpuMemory(ordinal: number): { freeBytes: number; totalBytes: number } {
  return ortAddon().cudaMemoryInfo(ordinal);
}

/**
 * CUDA runtime errors that poison the process's context on a GPU ("sticky"): once one happened,
 * every later call on that GPU fails, so the device cannot serve again without a new process.
 * Uncorrectable ECC (214), an illegal address (700), a launch timeout (702), a device-side assert
 * (710), a hardware stack error (714), an illegal instruction (715), a misaligned address (716), an
 * invalid address space (717) or program counter (718), a launch failure (719).
 */
export const STICKY_CUDA_ERRORS: ReadonlySet<number> = new Set([214, 700, 702, 710, 714, 715, 716, 717, 718, 719]);

/**
 * CUDA's stream-capture errors (900 cudaErrorStreamCaptureUnsupported to 908
 * cudaErrorStreamCaptureWrongThread): a call refused, or a capture invalidated, because a graph
 * capture was open. They say nothing of the context, which works on: never a reason to take a
 * device out of service.
 */
export const CUDA_CAPTURE_ERRORS: ReadonlySet<number> = new Set([900, 901, 902, 903, 904, 905, 906, 907, 908]);

/**
 * Whether the process's context on GPU `ordinal` still works (after a failed run): the error a synchronisation meets, 0
 * when none.
 */
export function probeGpu(ordinal: number): { error: number; message: string } {
  return ortAddon().cudaProbe(ordinal);
}

/** Page-lock `view`'s memory for CUDA copies (loadCuda first); release() undoes it. */
export function pinHost(view: ArrayBufferView | ArrayBuffer): PinnedHost {
  const Pinned = ortAddon().PinnedHost;
  return new Pinned(view);
}
