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
 */
import { fstatSync } from 'node:fs';
import { dtypeInfo } from '../../shared/dtypes.js';
import { errors } from '../../shared/errors.js';
import { mapSharedMemory } from '../../native/shm.js';
import type { RegionSlice, WireTensor } from '../../shared/channels/inference.js';

export class RegionMappings {
  /** Mappings of registered regions, by region id. */
  readonly #mappings = new Map<number, ArrayBuffer>();

  /**
   * Fails (INVALID_ARGUMENT) when the object under `slice` no longer covers it; `what` names the
   * tensor. Call it just before an execution that touches the slice.
   */
  check(what: string, slice: RegionSlice): void {
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

  /** A view of a slice: inputs are read from it and outputs written into it. */
  view(slice: RegionSlice): Uint8Array {
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
  outputTarget(datatype: WireTensor['datatype'], shape: readonly number[], slice: RegionSlice): Uint8Array | null {
    const info = dtypeInfo(datatype);
    if (info.elementBytes === 0) return null;
    const bytes = shape.reduce((a, b) => a * b, 1) * info.elementBytes;
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
    this.view(slice).set(out.data); // copy: an output into its shared-memory slice, when ONNX Runtime could not write it there
    return { ...out, data: new Uint8Array(0), shm: slice };
  }

  /** The region was unregistered: drop its mapping (views in use keep it alive). */
  forget(regionId: number): void {
    this.#mappings.delete(regionId);
  }
}
