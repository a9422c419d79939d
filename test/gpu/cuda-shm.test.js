// CUDA shared memory (Triton's cudasharedmemory extension) on a real GPU: this test process plays
// the client, allocating GPU memory with cudaMalloc and handing the server its CUDA IPC handle, as
// tritonclient.utils.cuda_shared_memory does. Inputs bound in place, copied GPU to GPU when
// misaligned, joined on the GPU when coalesced; outputs computed into the region or copied there;
// status, unregister, REST, and the handles the server must refuse.
// Skipped, saying why, without a GPU (CI).
import path from 'node:path';
import { ControlClient } from '../../dist/client/control.js';
import { allocateDeviceMemory } from '../../dist/native/ort.js';
import { gpuTest } from '../helpers/gpu.js';
import { mlpExpected, random, writeCatalog } from '../helpers/mlp-catalog.js';
import { startServer, tempDir } from '../helpers/server.js';
import { grpcError } from '../helpers/errors.js';

const SIZES = [64, 256, 8];
const REGION = 1 << 20;

gpuTest('CUDA shared memory: inputs and outputs in the client\'s GPU memory answer as inline, over gRPC and REST', async (t) => {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const [model] = writeCatalog(path.join(temp.dir, 'repo'), { count: 1, sizes: SIZES });
  const server = await startServer({ model_repo: path.join(temp.dir, 'repo'), global: { runtime: { backend: 'cuda', cuda: { tf32: false } } } }, { root: temp.dir });
  t.teardown(() => server.stop());
  const metadata = await server.client.call('ServerMetadata', {});
  t.true(metadata.extensions.includes('cuda_shared_memory'));

  const input = allocateDeviceMemory(REGION, 'cuda:0');
  const output = allocateDeviceMemory(REGION, 'cuda:0');
  await server.client.registerCudaSharedMemory('in', input.ipcHandle(), 0, REGION);
  await server.client.registerCudaSharedMemory('out', output.ipcHandle(), 0, REGION);
  t.deepEqual(await server.client.cudaSharedMemoryStatus(), {
    in: { name: 'in', deviceId: 0, byteSize: REGION },
    out: { name: 'out', deviceId: 0, byteSize: REGION },
  });

  const next = random(46);
  const rowBytes = SIZES[0] * 4;
  const outBytes = SIZES[SIZES.length - 1] * 4;
  /**
   * One request: `rows` rows written at `inAt` of the input region, its output asked at `outAt`; checked.
   * @param {number} rows @param {number} inAt @param {number} outAt
   */
  const call = async (rows, inAt, outAt) => {
    const x = Float32Array.from({ length: rows * SIZES[0] }, () => next() * 2 - 1);
    input.copyFromHost(x, inAt);
    const reply = await server.client.infer(model.name, [{ name: 'x', datatype: 'FP32', shape: [rows, SIZES[0]], sharedMemory: { region: 'in', byteSize: rows * rowBytes, offset: inAt } }],
      { outputs: [{ name: 'y', sharedMemory: { region: 'out', byteSize: rows * outBytes, offset: outAt } }] });
    t.is(/** @type {Float32Array} */ (reply.outputs[0].data).length, 0, 'nothing inline');
    const y = new Float32Array(rows * SIZES[SIZES.length - 1]);
    output.copyToHost(y, outAt);
    for (let r = 0; r < rows; r++) {
      const want = mlpExpected(model.layers, x.subarray(r * SIZES[0], (r + 1) * SIZES[0]));
      const got = y.subarray(r * want.length, (r + 1) * want.length);
      const bad = Array.from(want).findIndex((w, j) => !(Math.abs(got[j] - w) <= 1e-4 * (1 + Math.abs(w))));
      if (bad >= 0) return `rows ${rows} at ${inAt} -> ${outAt}: row ${r} output ${bad} is ${got[bad]}, want ${want[bad]}`;
    }
    return null;
  };
  // With CUDA graphs on (the suite's second pass), a request whose tensors are in regions runs
  // through the graph, copied GPU to GPU into its buffers and out (until 2026-11-30 it ran plainly).
  const graphs = process.env.INFERENCE_SERVER_RUNTIME_CUDA_GRAPHS === 'true';
  const control = new ControlClient(server.address);
  t.teardown(() => control.close());
  const graphRuns = async () => {
    const status = (await control.call('ModelControlStatus', { name: model.name, fresh: true })).models[0];
    return Number(/\((\d+) runs? through/.exec(status.cuda_graphs ?? '')?.[1] ?? NaN);
  };
  const before = graphs ? await graphRuns() : 0;
  // In place (aligned, this GPU), then misaligned input (copied on the GPU) and output (copied from the host).
  t.is(await call(1, 0, 0), null);
  if (graphs) t.is(await graphRuns(), before + 1, 'the lone request in regions ran through its graph');
  t.is(await call(3, 4096, 8192), null);
  t.is(await call(2, 4096 + 4, 8192 + 4), null);
  // Sixteen at once: coalesced into batches joined on the GPU, each output where it asked.
  const answers = await Promise.all(Array.from({ length: 16 }, (_, i) => call(1 + (i % 3), 65536 + i * 4 * rowBytes, 131072 + i * 4 * outBytes)));
  t.deepEqual(answers.filter((a) => a !== null), []);

  // REST: the handle base64-encoded, as Triton takes it.
  const other = allocateDeviceMemory(4096, 'cuda:0');
  const rest = await fetch(`${server.rest}/v2/cudasharedmemory/region/rest_in/register`, {
    method: 'POST', body: JSON.stringify({ raw_handle: { b64: Buffer.from(other.ipcHandle()).toString('base64') }, device_id: 0, byte_size: 4096 }),
  });
  t.is(rest.status, 200, await rest.text());
  const status = await (await fetch(`${server.rest}/v2/cudasharedmemory/region/rest_in/status`)).json();
  t.deepEqual(status, [{ name: 'rest_in', device_id: 0, byte_size: 4096 }]);

  // Refused: a handle nobody exported, a GPU the server does not run on, a region larger than its allocation.
  const garbage = await grpcError(t, server.client.registerCudaSharedMemory('bad', new Uint8Array(64), 0, 4096));
  t.is(garbage.code, 3);
  t.regex(garbage.details, /its IPC handle cannot be opened there/);
  const elsewhere = await grpcError(t, server.client.registerCudaSharedMemory('far', other.ipcHandle(), 7, 4096));
  t.regex(elsewhere.details, /device_id 7 is not a GPU this server runs on/);
  // Kept alive until the server has opened its handle: an allocation collected first would be freed.
  const small = allocateDeviceMemory(4096, 'cuda:0');
  t.teardown(() => small.release());
  const tooBig = await grpcError(t, server.client.registerCudaSharedMemory('big', small.ipcHandle(), 0, 1 << 30));
  t.regex(tooBig.details, /holds \d+ bytes, fewer than the region's byte_size/);

  await server.client.unregisterCudaSharedMemory('');
  t.deepEqual(await server.client.cudaSharedMemoryStatus(), {});
  const gone = await grpcError(t, server.client.infer(model.name, [{ name: 'x', datatype: 'FP32', shape: [1, SIZES[0]], sharedMemory: { region: 'in', byteSize: rowBytes } }]));
  t.regex(gone.details, /"in"/);
});
