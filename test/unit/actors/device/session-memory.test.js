// The GPU memory of a model's sessions, as the device actor measures it around a load (the GPU's
// free memory before and after), and the error when the GPU runs out: driven here by a fake
// free-memory reading and the binding's own errors for ONNX Runtime's statuses (ortFailure), since
// CI has no GPU (test/gpu/server.test.js runs it on one).
import test from 'ava';
import { SessionMemory } from '../../../../dist/actors/device/session-memory.js';
import { initOrt, ortAddon } from '../../../../dist/native/ort.js';
import { Status } from '../../../../dist/shared/errors.js';

const MiB = 2 ** 20;

/** The binding's error for ONNX Runtime's status ORT_FAIL with `message`. */
const failure = (/** @type {string} */ message) => {
  initOrt();
  return ortAddon().ortFailure(1, message);
};

test('each load is measured as the free memory it took; the figures name the loaded sessions', (t) => {
  let free = 10_000 * MiB;
  const memory = new SessionMemory({ free: () => free, device: 1, gpu: 0, arenaBytes: 4096 * MiB, ortArenaLimitBytes: 0 });
  t.is(memory.describe(), 'no other model is loaded on it');
  const before = memory.free();
  free -= 900 * MiB; // the sessions and the warm-up's activations
  t.is(memory.record('resnet#1', before), 900 * MiB);
  const again = memory.free();
  free -= 100 * MiB;
  memory.record('mlp#2', again);
  t.is(memory.of('resnet#1'), 900 * MiB);
  t.is(memory.describe(), 'the 2 loaded models\' sessions hold 1000 MiB (the largest 900 MiB)');
  // Memory that came back during a load (another actor freeing) is not a negative session.
  const third = memory.free();
  free += 50 * MiB;
  t.is(memory.record('small#3', third), 0);
  memory.forget('mlp#2');
  memory.forget('small#3');
  t.is(memory.of('mlp#2'), undefined);
  t.is(memory.describe(), 'the 1 loaded model\'s sessions hold 900 MiB (the largest 900 MiB)');

  const err = memory.exhausted('wide', 'warming it up', failure('CUDA failure 2: out of memory ; GPU=0 ; expr=cudaMalloc((void**)&p, size);'));
  t.is(err?.code, 'STOWAGE_DEVICE_MEMORY_EXHAUSTED');
  t.is(err?.status, Status.RESOURCE_EXHAUSTED);
  t.is(err?.message, 'model "wide": GPU 0 (device 1) ran out of memory warming it up: 9050 MiB free now, the weight arena holds 4096 MiB, the 1 loaded model\'s sessions hold 900 MiB (the largest 900 MiB); lower runtime.mem_fraction or runtime.weight_cache_fraction (or set runtime.cuda.weight_cache_bytes) to leave sessions more room, or serve fewer models on this GPU. ONNX Runtime: CUDA failure 2: out of memory ; GPU=0 ; expr=cudaMalloc((void**)&p, size);');
  // cuDNN 9's own words for the GPU's memory and the host's.
  t.regex(memory.exhausted('wide', 'running it', failure('CUDNN failure 4004: CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED ; GPU=0'))?.message ?? '', /GPU 0 \(device 1\) ran out of memory running it/);
  const host = memory.exhausted('wide', 'running it', failure('CUDNN failure 4003: CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ; GPU=0'));
  t.is(host?.code, 'STOWAGE_DEVICE_MEMORY_EXHAUSTED');
  t.regex(host?.message ?? '', /the host ran out of memory running it for GPU 0 \(device 1\): the failure is host memory's, not the GPU's/);
  // ONNX Runtime's arena says the same words over the GPU and the host: said as it is, not as the GPU's.
  const arena = memory.exhausted('wide', 'running it', failure('Failed to allocate memory for requested buffer of size 1024'));
  t.regex(arena?.message ?? '', /an ONNX Runtime memory arena refused a buffer running it on GPU 0 \(device 1\); its message does not say whether the GPU's or the host's: 9050 MiB free on the GPU now/);
  t.notRegex(arena?.message ?? '', /GPU 0 \(device 1\) ran out of memory/);
  const limited = new SessionMemory({ free: () => free, device: 0, gpu: 0, arenaBytes: 0, ortArenaLimitBytes: 64 * MiB });
  t.regex(limited.exhausted('wide', 'running a batch of 8', failure('CUDA failure 2: out of memory ; GPU=0'))?.message ?? '', /ONNX Runtime's arena is limited to 64 MiB per session \(runtime\.cuda\.ort_arena_limit_bytes\): raise it, or serve fewer models/);
  // Under that limit the arena's refusal is the GPU arena's (what test/gpu's 64 KiB arena hits).
  t.regex(limited.exhausted('wide', 'loading it', failure('Available memory of 65536 is smaller than requested bytes of 131072'))?.message ?? '', /GPU 0 \(device 0\) ran out of memory loading it: .*limited to 64 MiB per session/);
  t.is(limited.exhausted('wide', 'running a batch of 8', failure('Non-zero status code returned while running Conv node')), null, 'any other failure keeps its own error');
  t.is(limited.exhausted('wide', 'running a batch of 8', new Error('out of memory')), null, 'words alone are not the binding\'s verdict');
  // Below a MiB the figure is not rounded to 0 MiB (the GPU test's 64 KiB limit read "0 MiB" on the H100).
  const tiny = new SessionMemory({ free: () => free, device: 0, gpu: 0, arenaBytes: 0, ortArenaLimitBytes: 64 * 1024 });
  t.regex(tiny.exhausted('wide', 'warming it up', failure('CUDA failure 2: out of memory ; GPU=0'))?.message ?? '', /limited to 64 KiB per session/);
});
