// Shared-memory regions on the device thread: the output tensor ONNX Runtime computes into is the
// region's own memory, and only where that is safe (aligned, large enough, numeric).
import { closeSync, openSync } from 'node:fs';
import test from 'ava';
import { RegionMappings } from '../../../../dist/actors/device/regions.js';
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
const slice = (offset, byteSize) => ({ regionId: 1, key, fd: present(fd), regionOffset: 0, regionByteSize: 4096, offset, byteSize });

test('an output target is the region\'s own memory: what is written into it is in the region', (t) => {
  const regions = new RegionMappings();
  const target = present(regions.outputTarget('FP32', [2, 3], slice(64, 24)), 'an output target');
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
