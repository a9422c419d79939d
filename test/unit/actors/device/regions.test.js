// Shared-memory regions on the device thread: the output tensor ONNX Runtime computes into is the
// region's own memory, and only where that is safe (aligned, large enough, numeric).
import { closeSync, openSync } from 'node:fs';
import test from 'ava';
import { RegionMappings } from '../../../../dist/actors/device/regions.js';
import { allocateDeviceMemory } from '../../../../dist/native/ort.js';
import { createRegion, destroyRegion, readRegion } from '../../../../dist/client/shared-memory.js';
import { present } from '../../../helpers/checks.js';

const key = `/stowage_unit_regions_${process.pid}`;
/** @type {number | undefined} */
let fd;
test.before(() => {
  createRegion(key, 4096);
  fd = openSync(`/dev/shm${key}`, 'r+');
});
test.after.always(() => {
  if (fd !== undefined) closeSync(fd);
  destroyRegion(key);
});

/**
 * @param {number} offset
 * @param {number} byteSize
 * @returns {import('../../../../dist/shared/channels/inference.js').RegionSlice}
 */
const slice = (offset, byteSize) => ({ regionId: 1, name: 'r', key, fd: present(fd), regionOffset: 0, regionByteSize: 4096, offset, byteSize });

test('an output target is the region\'s own memory: what is written into it is in the region', (t) => {
  const regions = new RegionMappings();
  const target = /** @type {Uint8Array} */ (present(regions.outputTarget('FP32', [2, 3], slice(64, 24)), 'an output target'));
  t.is(target.byteLength, 24, 'exactly the output\'s bytes');
  new Float32Array(target.buffer, target.byteOffset, 6).set([1, 2, 3, 4, 5, 6]);
  t.deepEqual([...new Float32Array(Uint8Array.from(readRegion(key, 64, 24)).buffer)], [1, 2, 3, 4, 5, 6]);
  const written = regions.written({ name: 'y', datatype: 'FP32', shape: [2, 3], data: new Uint8Array(24) }, slice(64, 24));
  t.is(written.data.byteLength, 0, 'nothing goes back inline');
  t.is(written.shm?.offset, 64);
});

test('no output target where ONNX Runtime cannot write in place: misaligned, too small, BYTES', (t) => {
  const regions = new RegionMappings();
  t.is(regions.outputTarget('FP32', [2, 3], slice(66, 24)), null, 'misaligned for FP32');
  t.is(regions.outputTarget('FP32', [2, 3], slice(64, 20)), null, 'smaller than the output');
  t.is(regions.outputTarget('BYTES', [2], slice(64, 64)), null, 'BYTES');
  t.truthy(regions.outputTarget('UINT8', [3], slice(65, 3)), 'bytes need no alignment');
});

// CUDA regions (backend cuda) without a GPU: the CPU device's memory stands in for the client's
// GPU allocation and for this device's scratch, so every rule of where a CUDA tensor is read and
// written, and every copy, runs here; opening a real IPC handle runs in test/gpu/cuda-shm.test.js.

const cudaMemory = () => allocateDeviceMemory(4096, 'cpu');

/**
 * A device on GPU 0 whose "IPC handles" open the given memory.
 * @param {import('../../../../dist/native/ort.js').DeviceMemory} memory
 */
function cudaRegions(memory, { refuse = false } = {}) {
  /** @type {string[]} */
  const opened = [];
  const regions = new RegionMappings(0, {
    openIpc: (handle, bytes, device) => {
      if (refuse) throw new Error('invalid resource handle (CUDA error 400)');
      opened.push(`${device} ${bytes} ${handle.length}`);
      return memory;
    },
    allocate: (bytes) => allocateDeviceMemory(bytes, 'cpu'),
  });
  return { regions, opened };
}

/**
 * @param {number} offset
 * @param {number} byteSize
 * @param {number} [gpu]
 * @returns {import('../../../../dist/shared/channels/inference.js').RegionSlice}
 */
const cudaSlice = (offset, byteSize, gpu = 0) => ({ regionId: 7, name: 'gpu_input', key: 'cuda:7', fd: -1, regionOffset: 0, regionByteSize: 4096, offset, byteSize, cuda: { gpu, handle: new Uint8Array(64) } });

/** @param {import('../../../../dist/native/ort.js').DeviceMemory} memory @param {number} offset @param {number} count */
function floatsAt(memory, offset, count) {
  const out = new Float32Array(count);
  memory.copyToHost(out, offset);
  return [...out];
}

test('a CUDA region is opened once, on its own GPU whichever GPU this device drives; a handle that cannot be opened is INVALID_ARGUMENT saying why', (t) => {
  const memory = cudaMemory();
  const { regions, opened } = cudaRegions(memory);
  t.is(regions.openCuda(cudaSlice(0, 64)), memory);
  t.is(regions.openCuda(cudaSlice(256, 64)), memory);
  t.deepEqual(opened, ['cuda:0 4096 64'], 'opened once, on GPU 0, for the whole region');
  // A region on GPU 1, used by this device on GPU 0: opened on GPU 1, as Triton opens it (no peer access).
  const far = cudaRegions(memory);
  far.regions.openCuda({ ...cudaSlice(0, 64, 1), regionId: 8 });
  t.deepEqual(far.opened, ['cuda:1 4096 64']);
  const refused = cudaRegions(memory, { refuse: true }).regions;
  const err = t.throws(() => refused.openCuda(cudaSlice(0, 64)));
  t.is(/** @type {any} */ (err).code, 'STOWAGE_SHM_INVALID');
  t.regex(err?.message ?? '', /region on GPU 0: its IPC handle cannot be opened there .*CUDA error 400/);
  t.notThrows(() => regions.check('input "x"', cudaSlice(0, 64)), 'GPU memory cannot shrink: nothing to check per run');
});

test('a CUDA region\'s device_id is checked against the GPU the driver says its allocation is on; one the driver cannot measure is taken at its byte_size, with a warning naming why', (t) => {
  /** @param {import('../../../../dist/native/ort.js').IpcAllocation} allocation */
  const withAllocation = (allocation) => {
    const memory = cudaMemory();
    /** @type {string[]} */
    const warnings = [];
    const regions = new RegionMappings(0, { openIpc: () => memory, allocate: (bytes) => allocateDeviceMemory(bytes, 'cpu'), allocation: () => allocation }, (m) => warnings.push(m));
    return { memory, regions, warnings };
  };
  // The client said GPU 1; the driver says GPU 0: refused, the opening closed again.
  const wrong = withAllocation({ gpu: 0, bytes: 4096, unmeasured: null });
  const err = t.throws(() => wrong.regions.openCuda(cudaSlice(0, 64, 1)));
  t.is(/** @type {any} */ (err).code, 'STOWAGE_SHM_INVALID');
  t.regex(err?.message ?? '', /region cuda:7: its IPC handle's allocation is on GPU 0, not on GPU 1 as its device_id says; register it with device_id 0/);
  t.throws(() => wrong.memory.copyToHost(new Uint8Array(4), 0), { message: /released/ });
  // Where the client said: taken, nothing said.
  const right = withAllocation({ gpu: 0, bytes: 4096, unmeasured: null });
  t.is(right.regions.openCuda(cudaSlice(0, 64)), right.memory);
  t.deepEqual(right.warnings, []);
  // The driver could not measure it (cuMemGetAddressRange on IPC-imported memory): taken at byte_size, said once.
  const unmeasured = withAllocation({ gpu: -1, bytes: 0, unmeasured: 'cuMemGetAddressRange failed (CUDA driver error 1)' });
  t.is(unmeasured.regions.openCuda(cudaSlice(0, 64)), unmeasured.memory);
  unmeasured.regions.openCuda(cudaSlice(256, 64));
  t.is(unmeasured.warnings.length, 1);
  t.regex(unmeasured.warnings[0], /region cuda:7 on GPU 0: the driver cannot measure its allocation \(cuMemGetAddressRange failed \(CUDA driver error 1\)\), so it is taken at the client's byte_size of 4096 bytes, as Triton takes it/);
});

test('a lone CUDA input on this GPU is bound in place; on another GPU, or misaligned, it is copied once into scratch', (t) => {
  const memory = cudaMemory();
  memory.copyFromHost(Float32Array.of(1, 2, 3, 4), 256);
  memory.copyFromHost(Float32Array.of(5, 6, 7, 8), 772); // 4 bytes past cudaMalloc's alignment
  const { regions } = cudaRegions(memory);
  const tensor = (/** @type {number} */ offset, /** @type {number} */ gpu) => ({ name: 'x', datatype: /** @type {const} */ ('FP32'), shape: [1, 4], data: new Uint8Array(0), shm: cudaSlice(offset, 16, gpu) });
  const inPlace = present(regions.deviceInput(tensor(256, 0)));
  const data = /** @type {import('../../../../dist/native/ort.js').DeviceSlice} */ (inPlace.data);
  t.is(data.memory, memory, 'the region\'s own memory');
  t.is(data.offset, 256);
  t.deepEqual(inPlace.dims, [1, 4]);
  regions.beginExecution();
  for (const [offset, gpu, want] of /** @type {const} */ ([[256, 1, [1, 2, 3, 4]], [772, 0, [5, 6, 7, 8]]])) {
    const copied = present(regions.deviceInput(tensor(offset, gpu)));
    const scratch = /** @type {import('../../../../dist/native/ort.js').DeviceSlice} */ (copied.data);
    t.not(scratch.memory, memory, `offset ${offset} on GPU ${gpu}: copied`);
    t.deepEqual(floatsAt(scratch.memory, scratch.offset, 4), [...want]);
  }
  t.is(regions.deviceInput({ name: 'x', datatype: 'FP32', shape: [1, 4], data: new Uint8Array(16) }), null, 'inline inputs are not its business');
  // Joined into a batch on the host instead: the bytes, copied out.
  const host = regions.inputBytes(tensor(256, 0), (bytes) => new Uint8Array(bytes));
  t.deepEqual([...new Float32Array(Uint8Array.from(host.data).buffer)], [1, 2, 3, 4]);
});

test('a CUDA output is computed into its region when on this GPU and aligned, else copied there from the host', (t) => {
  const memory = cudaMemory();
  const { regions } = cudaRegions(memory);
  const target = /** @type {import('../../../../dist/native/ort.js').DeviceSlice} */ (present(regions.outputTarget('FP32', [1, 4], cudaSlice(512, 16))));
  t.is(target.memory, memory);
  t.is(target.offset, 512);
  t.is(regions.outputTarget('FP32', [1, 4], cudaSlice(512, 16, 1)), null, 'another GPU\'s region: copied after the run');
  t.is(regions.outputTarget('FP32', [1, 4], cudaSlice(516, 16)), null, 'misaligned for in place');
  t.is(regions.outputTarget('FP32', [1, 8], cudaSlice(512, 16)), null, 'too small: writeOutput says so');
  const out = regions.writeOutput({ name: 'y', datatype: 'FP32', shape: [1, 4], data: new Uint8Array(Float32Array.of(9, 8, 7, 6).buffer) }, cudaSlice(1024, 16, 1));
  t.is(out.data.byteLength, 0);
  t.deepEqual(floatsAt(memory, 1024, 4), [9, 8, 7, 6]);
  t.throws(() => regions.writeOutput({ name: 'y', datatype: 'FP32', shape: [1, 8], data: new Uint8Array(32) }, cudaSlice(1024, 16)), { message: /shared_memory_byte_size 16 is less than the 32 bytes/ });
  regions.forget(7);
  t.throws(() => memory.copyToHost(new Uint8Array(4), 0), { message: /released/ }, 'unregistered: closed');
});

test('a device without a GPU refuses CUDA regions', (t) => {
  const regions = new RegionMappings();
  t.throws(() => regions.openCuda(cudaSlice(0, 64)), { message: /CUDA shared memory needs backend cuda/ });
});

test('a batch whose every request has its input in a CUDA region is joined on the GPU, padding rows zeroed; a mixed one is not', (t) => {
  const memory = cudaMemory();
  memory.copyFromHost(Float32Array.of(1, 2), 0);
  memory.copyFromHost(Float32Array.of(3, 4, 5, 6), 1024);
  const { regions } = cudaRegions(memory);
  const part = (/** @type {number} */ offset, /** @type {number} */ rows) => ({ name: 'x', datatype: /** @type {const} */ ('FP32'), shape: [rows, 2], data: new Uint8Array(0), shm: cudaSlice(offset, rows * 8) });
  const joined = present(regions.joinedDeviceInput([part(0, 1), part(1024, 2)], 0, 4));
  t.deepEqual(joined.dims, [4, 2], 'padded to the compiled size');
  const data = /** @type {import('../../../../dist/native/ort.js').DeviceSlice} */ (joined.data);
  t.deepEqual(floatsAt(data.memory, data.offset, 8), [1, 2, 3, 4, 5, 6, 0, 0]);
  const inline = { name: 'x', datatype: /** @type {const} */ ('FP32'), shape: [1, 2], data: new Uint8Array(8) };
  t.is(regions.joinedDeviceInput([part(0, 1), inline], 0, 2), null, 'mixed with an inline input: joined on the host');
  t.is(regions.joinedDeviceInput([part(0, 1), part(1024, 2)], 1, 3), null, 'a batch axis that is not the first: on the host');
});
