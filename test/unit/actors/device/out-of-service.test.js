// When a failed run has poisoned its GPU's context: by its CUDA error (the binding reads it from
// ONNX Runtime's status: ortFailure), or by a probe of the GPU after it. On the CPU the probe is a
// stand-in; test/gpu holds the real one.
import test from 'ava';
import { DeviceService, poisonOf } from '../../../../dist/actors/device/out-of-service.js';
import { verdict } from '../../../../dist/actors/device/execution.js';
import { initOrt, ortAddon } from '../../../../dist/native/ort.js';

const failure = (/** @type {string} */ message) => {
  initOrt();
  return ortAddon().ortFailure(1, message);
};
const works = () => ({ error: 0, message: '' });

test('a sticky CUDA error in the run\'s status poisons the GPU; the probe is not needed then', (t) => {
  let probed = 0;
  const probe = () => {
    probed++;
    return works();
  };
  for (const code of [700, 716, 719, 214]) {
    const poisoned = poisonOf(failure(`Non-zero status code returned while running Conv node. Status Message: CUDA failure ${code}: some fault ; GPU=0 ; expr=cudaStreamSynchronize(stream);`), probe);
    t.is(poisoned?.cudaError, code);
    t.regex(poisoned?.reason ?? '', new RegExp(`CUDA error ${code} in a run`));
  }
  t.is(probed, 0);
});

test('any other failure asks the GPU: poisoned when the probe fails, not when it works', (t) => {
  const oom = failure('CUDA failure 2: out of memory ; GPU=0');
  t.is(poisonOf(oom, works), null, 'out of memory: the context is fine');
  t.is(poisonOf(new Error('Got invalid dimensions for input: x'), works), null);
  const gone = poisonOf(new Error('CUBLAS failure 13: CUBLAS_STATUS_EXECUTION_FAILED'), () => ({ error: 999, message: 'unknown error' }));
  t.is(gone?.cudaError, 999);
  t.regex(gone?.reason ?? '', /after a run failed \(CUBLAS failure 13: CUBLAS_STATUS_EXECUTION_FAILED\), the GPU answers CUDA error 999: unknown error/);
});

test('a device is taken out once: the main thread told once, every later request refused with why', (t) => {
  /** @type {unknown[]} */
  const told = [];
  const cpu = new DeviceService(3, null, (p) => told.push(p));
  t.is(cpu.afterFailedRun(failure('CUDA failure 700: x')), null, 'backend cpu: no GPU to poison');
  t.is(cpu.refusal, null);
  const service = new DeviceService(1, 0, (p) => told.push(p));
  const first = service.takeOut({ cudaError: 700, reason: 'CUDA error 700 in a run: an illegal memory access was encountered' });
  t.is(first.code, 'STOWAGE_DEVICE_UNAVAILABLE');
  t.is(first.message, 'device 1 is unavailable: it is out of service: CUDA error 700 in a run: an illegal memory access was encountered');
  service.takeOut({ cudaError: 719, reason: 'later' });
  t.is(told.length, 1, 'told once');
  t.is(service.refusal?.message, first.message, 'the first reason stands');
  t.is(service.afterFailedRun(new Error('anything'))?.message, first.message);
});

test('a stream-capture error (900-908) poisons nothing: another thread\'s capture was open, the context works on', (t) => {
  let probed = 0;
  const probe = () => {
    probed++;
    return works();
  };
  for (const code of [900, 901, 904, 908]) {
    t.is(poisonOf(failure(`CUDA failure ${code}: operation not permitted when stream is capturing ; GPU=0`), probe), null, `run failed with ${code}`);
  }
  t.is(probed, 0, 'not even probed');
  // A probe that meets a capture (it is held off captures: native cuda.h captureLock) is no verdict either.
  t.is(poisonOf(new Error('CUBLAS failure 13'), () => ({ error: 900, message: 'operation not permitted when stream is capturing' })), null);
});

test('a failure outside the run (a weight copy, an upload\'s wait, a region\'s copy) with a CUDA error goes to the device\'s verdict; others are answered as they are', (t) => {
  /** @type {unknown[]} */
  const asked = [];
  const out = new Error('device 0 is unavailable: it is out of service');
  const ctx = { outOfService: (/** @type {unknown} */ err) => { asked.push(err); return /** @type {any} */ (out); } };
  const sticky = failure('CUDA failure 700: an illegal memory access was encountered');
  t.is(verdict(ctx, sticky), out, 'poisoned: the device\'s refusal is the answer');
  const plain = new Error('model "m": region too small');
  t.is(verdict(ctx, plain), plain);
  t.deepEqual(asked, [sticky], 'only the CUDA failure was judged');
  const healthy = { outOfService: () => null };
  t.is(verdict(healthy, sticky), sticky, 'the GPU works: the failure itself is the answer');
});
