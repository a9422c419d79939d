/**
 * Shared-memory regions as the device thread sees them: each registered region
 * mapped once, from the descriptor the main thread holds open (threads share
 * descriptors), and kept mapped until the main thread says the region was
 * unregistered. A view keeps its mapping alive, so a request still reading an
 * unregistered region finishes safely (its mapping is unmapped by GC).
 *
 * A client can shrink the object under its region at any time (ftruncate): touching a mapped page
 * past the object's end raises SIGBUS, which ends the process. So every execution first checks,
 * per request, that each object it will read or write still covers its slice (`check`, one fstat),
 * and fails that request alone if not. What is left is the window between that check and the
 * end of the execution: an object shrunk during it still takes the process down. Clients own
 * their regions; the guarantee is that a region shrunk between requests is caught.
 *
 * CUDA regions (backend cuda, Triton's cudasharedmemory): a client's GPU allocation, opened from
 * its IPC handle on the GPU it is on, as Triton opens it (no peer access needed, which PCIe machines
 * without P2P lack; when registered, if this device drives the region's GPU, else the first time a
 * request brings it) and kept open until unregistered. A lone request's
 * input in one is bound to the run in place when it is on this GPU, or copied GPU to GPU once
 * into this device's scratch memory when it is on another. A batch whose requests all have an
 * input in CUDA regions, joined along a leading batch axis, is joined GPU to GPU in scratch memory
 * (padding rows zeroed); a batch that mixes them with inline inputs joins on the host. An output
 * is computed into its region in place when it can be (the same rules as system regions), else
 * copied there from the host.
 */
import { fstatSync } from 'node:fs';
import { dtypeInfo } from '../../shared/dtypes.js';
import { errors } from '../../shared/errors.js';
import { mapSharedMemory } from '../../native/shm.js';
import { allocateDeviceMemory, openIpcMemory, type DeviceMemory, type DeviceSlice, type IpcAllocation, type OrtTensor } from '../../native/ort.js';
import type { RegionSlice, WireTensor } from '../../shared/channels/inference.js';

/**
 * Where a CUDA region's tensor may be used in place: cudaMalloc's alignment. ONNX Runtime's CUDA
 * kernels get that from its own allocator and some load in wide vectors; a tensor less aligned
 * is copied into scratch memory, which has it, rather than risk a misaligned access (a fault
 * that poisons the GPU for the process).
 */
const CUDA_IN_PLACE_ALIGNMENT = 256;

/**
 * How a device reaches GPU memory: opening another process's from its IPC handle, and allocating
 * its own scratch (native/ort.ts; the unit tests stand the CPU device's memory in for both).
 */
export interface GpuMemoryAccess {
  openIpc: (handle: Uint8Array, bytes: number, device: `cuda:${number}`) => DeviceMemory;
  allocate: (bytes: number, device: `cuda:${number}`) => DeviceMemory;
  /** What the driver says of an opened handle's allocation (DeviceMemory.ipcAllocation). */
  allocation?: (memory: DeviceMemory) => IpcAllocation | null;
}

export class RegionMappings {
  /** Mappings of registered regions, by region id. */
  readonly #mappings = new Map<number, ArrayBuffer>();
  /** This device's GPU (CUDA ordinal); null on backend cpu, where CUDA regions cannot be registered. */
  readonly #gpu: number | null;
  readonly #access: GpuMemoryAccess;
  /** CUDA regions opened on this device's GPU, by region id. */
  readonly #cuda = new Map<number, DeviceMemory>();
  /**
   * GPU scratch for inputs copied from CUDA regions on other GPUs: one buffer per use in an execution, reused by the
   * next.
   */
  #scratch: DeviceMemory[] = [];
  #scratchUsed = 0;
  readonly #warn: (message: string) => void;

  /** `warn`: a region taken without the driver's measure of it (its log line). */
  constructor(gpu: number | null = null, access: GpuMemoryAccess = { openIpc: openIpcMemory, allocate: allocateDeviceMemory }, warn: (message: string) => void = () => {}) {
    this.#gpu = gpu;
    this.#access = access;
    this.#warn = warn;
  }

  /** A new execution begins: the last one's scratch is free again (runs are one at a time). */
  beginExecution(): void {
    this.#scratchUsed = 0;
  }

  /**
   * A CUDA region, opened on its own GPU (opened now if it is not yet): INVALID_ARGUMENT when it
   * cannot be. A run on another GPU copies from it, or into it, across (copyFromDevice and the
   * copies of DeviceMemory go through the host where the GPUs have no peer access).
   */
  openCuda(slice: RegionSlice): DeviceMemory {
    const open = this.#cuda.get(slice.regionId);
    if (open) return open;
    if (!slice.cuda || this.#gpu === null) throw errors.sharedMemoryInvalid(`region ${slice.key}: CUDA shared memory needs backend cuda`);
    let memory: DeviceMemory;
    try {
      memory = this.#access.openIpc(slice.cuda.handle, slice.regionByteSize, `cuda:${slice.cuda.gpu}`);
    } catch (err) {
      throw errors.sharedMemoryInvalid(`CUDA shared-memory region on GPU ${slice.cuda.gpu}: its IPC handle cannot be opened there (is it a live cudaIpcGetMemHandle of memory the client still holds, and no larger than byte_size says?): ${(err as Error).message}`);
    }
    // The client's device_id is checked against where the driver says the allocation is: runs,
    // copies and the choice of in-place use all go by that GPU.
    const allocation = (this.#access.allocation ?? ((m) => m.ipcAllocation))(memory);
    if (allocation && allocation.gpu >= 0 && allocation.gpu !== slice.cuda.gpu) {
      memory.release();
      throw errors.sharedMemoryInvalid(`CUDA shared-memory region ${slice.key}: its IPC handle's allocation is on GPU ${allocation.gpu}, not on GPU ${slice.cuda.gpu} as its device_id says; register it with device_id ${allocation.gpu}`);
    }
    if (allocation?.unmeasured) {
      this.#warn(`CUDA shared-memory region ${slice.key} on GPU ${slice.cuda.gpu}: the driver cannot measure its allocation (${allocation.unmeasured}), so it is taken at the client's byte_size of ${slice.regionByteSize} bytes, as Triton takes it; a byte_size larger than the allocation would fault the GPU`);
    }
    this.#cuda.set(slice.regionId, memory);
    return memory;
  }

  /**
   * A lone request's input in a CUDA region, for the run as it is (no joining or padding): the
   * region's memory in place when it is on this GPU and aligned, else copied GPU to GPU once into
   * scratch memory on this GPU. Null for an input not in a CUDA region, or BYTES (copied to the host).
   */
  deviceInput(t: WireTensor): OrtTensor | null {
    const slice = t.shm;
    if (!slice?.cuda) return null;
    const info = dtypeInfo(t.datatype);
    if (info.elementBytes === 0) return null;
    const memory = this.openCuda(slice);
    const tensor = (data: DeviceSlice): OrtTensor => ({ name: t.name, type: info.onnxType, dims: t.shape, data });
    if (slice.cuda.gpu === this.#gpu && slice.offset % CUDA_IN_PLACE_ALIGNMENT === 0) return tensor({ memory, offset: slice.offset });
    const scratch = this.#takeScratch(slice.byteSize);
    // copy: a CUDA shared-memory input, GPU to GPU once (another GPU's, or misaligned)
    scratch.copyFromDevice(memory, slice.offset, 0, slice.byteSize);
    return tensor({ memory: scratch, offset: 0 });
  }

  /**
   * One input of a batch whose every request has it in a CUDA region, joined along a leading batch
   * axis into scratch memory on this GPU (each request's rows copied GPU to GPU once; the padding
   * rows up to `runBatch` zeroed), for the run as it is. Null when not all of them are, the batch
   * axis is not the first, or the type is BYTES: the batch then joins on the host.
   */
  joinedDeviceInput(parts: readonly WireTensor[], batchDim: number, runBatch: number): OrtTensor | null {
    if (batchDim !== 0 || !parts.every((p) => p.shm?.cuda)) return null;
    const first = parts[0];
    const info = dtypeInfo(first.datatype);
    if (info.elementBytes === 0) return null;
    const rowBytes = first.shape.slice(1).reduce((a, b) => a * b, 1) * info.elementBytes;
    const bytes = runBatch * rowBytes;
    const scratch = this.#takeScratch(bytes);
    let at = 0;
    for (const p of parts) {
      const slice = p.shm!;
      // copy: a coalesced request's CUDA shared-memory rows into the joined input, GPU to GPU
      scratch.copyFromDevice(this.openCuda(slice), slice.offset, at, slice.byteSize);
      at += slice.byteSize;
    }
    // copy: zeros for the padding rows (not the request's bytes)
    if (at < bytes) scratch.copyFromHost(new Uint8Array(bytes - at), at);
    return { name: first.name, type: info.onnxType, dims: [runBatch, ...first.shape.slice(1)], data: { memory: scratch, offset: 0 } };
  }

  #takeScratch(bytes: number): DeviceMemory {
    const at = this.#scratchUsed++;
    const have = this.#scratch[at];
    if (have && have.bytes >= bytes) return have;
    if (have) releaseOrLeave(have);
    // only reached once openCuda found a GPU
    const fresh = this.#access.allocate(Math.max(bytes, (have?.bytes ?? 0) * 2), `cuda:${this.#gpu ?? 0}`);
    this.#scratch[at] = fresh;
    return fresh;
  }

  /**
   * Fails (INVALID_ARGUMENT) when the object under `slice` no longer covers it; `what` names the
   * tensor. Call it just before an execution that touches the slice.
   */
  check(what: string, slice: RegionSlice): void {
    if (slice.cuda) return; // GPU memory cannot shrink under a registration; its bounds were checked against byte_size
    const needed = slice.regionOffset + slice.offset + slice.byteSize;
    let size: number;
    try {
      size = fstatSync(slice.fd).size;
    } catch (err) {
      throw errors.sharedMemoryInvalid(`${what}: shared-memory key ${JSON.stringify(slice.key)} cannot be checked: ${(err as Error).message}`);
    }
    if (size < needed) {
      throw errors.sharedMemoryInvalid(`${what}: shared-memory key ${JSON.stringify(slice.key)} was shrunk to ${size} bytes after its region was registered; the request needs bytes up to ${needed}. Re-register the region after resizing it`);
    }
  }

  /** A view of a system region's slice: inputs are read from it and outputs written into it. */
  view(slice: RegionSlice): Uint8Array {
    if (slice.cuda) throw errors.internal(`region ${slice.key} is GPU memory, which cannot be viewed from the host`);
    let mapping = this.#mappings.get(slice.regionId);
    if (!mapping) {
      mapping = mapSharedMemory(slice.key, slice.fd, slice.regionOffset, slice.regionByteSize);
      this.#mappings.set(slice.regionId, mapping);
    }
    return new Uint8Array(mapping, slice.offset, slice.byteSize);
  }

  /**
   * An input's bytes: inline, or read in place from shared memory. A slice misaligned for its type
   * is copied into `stage` (the execution's staging memory), since a typed array cannot be made over it.
   */
  inputBytes(t: WireTensor, stage: (bytes: number) => Uint8Array): WireTensor {
    if (!t.shm) return t;
    if (t.shm.cuda) {
      const bytes = stage(t.shm.byteSize);
      // copy: a CUDA shared-memory input joined into a batch on the host
      this.openCuda(t.shm).copyToHost(bytes, t.shm.offset);
      return { ...t, data: bytes };
    }
    const view = this.view(t.shm);
    const width = dtypeInfo(t.datatype).elementBytes;
    if (width <= 1 || view.byteOffset % width === 0) return { ...t, data: view };
    const aligned = stage(view.byteLength);
    aligned.set(view); // copy: a shared-memory input misaligned for its type, into staging
    return { ...t, data: aligned };
  }

  /**
   * The memory of `slice` itself as an output's buffer, for a lone request whose output's shape is
   * known before the run: ONNX Runtime then computes the output straight into the region and
   * `writeOutput`'s copy is not needed (`written`). Null when it cannot: BYTES, a slice too small
   * (writeOutput then fails the request with the sizes) or misaligned for the element type.
   */
  outputTarget(datatype: WireTensor['datatype'], shape: readonly number[], slice: RegionSlice): Uint8Array | DeviceSlice | null {
    const info = dtypeInfo(datatype);
    if (info.elementBytes === 0) return null;
    const bytes = shape.reduce((a, b) => a * b, 1) * info.elementBytes;
    if (slice.cuda) {
      // On this GPU and aligned: ONNX Runtime writes it there; else it is copied there after the run.
      if (slice.cuda.gpu !== this.#gpu || bytes > slice.byteSize || slice.offset % CUDA_IN_PLACE_ALIGNMENT !== 0) return null;
      return { memory: this.openCuda(slice), offset: slice.offset };
    }
    const view = this.view(slice);
    if (bytes > view.byteLength || view.byteOffset % info.elementBytes !== 0) return null;
    return view.subarray(0, bytes);
  }

  /** An output ONNX Runtime computed into its slice (`outputTarget`): only the record goes back. */
  written(out: WireTensor, slice: RegionSlice): WireTensor {
    return { ...out, data: new Uint8Array(0), shm: slice };
  }

  /** Write an output into its slice; what goes back to the main thread carries no bytes. */
  writeOutput(out: WireTensor, slice: RegionSlice): WireTensor {
    if (out.data.byteLength > slice.byteSize) {
      throw errors.sharedMemoryInvalid(`output ${JSON.stringify(out.name)}: shared_memory_byte_size ${slice.byteSize} is less than the ${out.data.byteLength} bytes of the result`);
    }
    // copy: an output into its CUDA shared-memory slice, host to GPU
    if (slice.cuda) this.openCuda(slice).copyFromHost(out.data, slice.offset);
    // copy: an output into its shared-memory slice, when ONNX Runtime could not write it there
    else this.view(slice).set(out.data);
    return { ...out, data: new Uint8Array(0), shm: slice };
  }

  /** The region was unregistered: drop its mapping (views in use keep it alive). */
  forget(regionId: number): void {
    this.#mappings.delete(regionId);
    const cuda = this.#cuda.get(regionId);
    if (!cuda) return;
    this.#cuda.delete(regionId);
    releaseOrLeave(cuda);
  }
}

/**
 * Free device memory now, or, while a session's tensor still views it (a binding kept from the last run), when
 * collected.
 */
function releaseOrLeave(memory: DeviceMemory): void {
  try {
    memory.release();
  } catch {
    // Still viewed: the last view's collection frees it.
  }
}
