/**
 * The device actor: one worker thread per device. It alone touches the
 * device: it owns the ONNX Runtime sessions of every model loaded on it, the
 * per-model queues, and the scheduler that picks what runs next and how many
 * requests ride in one execution.
 *
 * The loop: admit everything in the inbox (loads and unloads run here, in
 * arrival order; requests join their model's queue), then run one batch, then
 * yield to the event loop so that requests that arrived during the run are
 * admitted and can coalesce into the next batch. `session.run` blocks this
 * thread for the whole execution, which is exactly when queues fill.
 *
 * Weights: with the on-demand cache on, every model's sessions are weightless
 * and its weights are fed from this device's arena (weights/weight-cache.ts).
 * Before a batch runs, its model's weights are made resident if they are not:
 * the batch waits for that one copy, and the model is charged for it.
 *
 * Buffers: input bytes arrive transferred (this thread owns them) and are fed
 * to ONNX Runtime in place when a request runs alone, or copied once into the
 * joined batch; each execution's outputs go back in one message, transferred.
 */
import { parentPort, workerData } from 'node:worker_threads';
import type * as ort from 'onnxruntime-node';
import type { ModelSpec } from '../bundle/model-spec.js';
import { dtypeInfo } from '../dtypes.js';
import { errors, toErrorData, type StowageError } from '../errors.js';
import { mapSharedMemory } from '../native/shm.js';
import type { RegionSlice } from '../shared-memory.js';
import { Arena } from '../weights/arena.js';
import { WeightCache, type ResidencyOutcome } from '../weights/weight-cache.js';
import { CostModel } from './cost-model.js';
import { openExecutable, readTensor, tensorSources, weightFeeds, type Executable } from './executables.js';
import { batchInput, requestOutput } from './ort-tensors.js';
import { nowMs, type DeviceInit, type FromDevice, type InferCommand, type HostUpdate, type InferResult, type ModelPolicyUpdate, type Residency, type ToDevice, type WeightLoad, type WeightMemory, type WireTensor } from './messages.js';
import { Scheduler, type ShedReason, type Ticket } from './scheduler.js';

if (!parentPort) throw new Error('device-worker.js runs as a worker thread');

// onnxruntime-common turns float16 data into a Float16Array when the global exists (Node 24 has it),
// but the Node binding cannot read a Float16Array and fails with "not enough space". Without the
// global, float16 tensors stay Uint16Array both ways, which is also our wire layout. This thread only.
delete (globalThis as { Float16Array?: unknown }).Float16Array;
const port = parentPort;
const init = workerData as DeviceInit;
const config = init.scheduler;

interface LoadedModel {
  spec: ModelSpec;
  /** Sessions by compiled batch size; key 0 is the single dynamic-batch session. */
  sessions: Map<number, Executable>;
  /** Position of the batch axis in each input and output tensor, by name (-1: none). */
  batchDims: Map<string, number>;
}

/** Loaded model versions by instance key (`name#generation`). */
const models = new Map<string, LoadedModel>();
const costs = new CostModel(config.ema_halflife_seconds * 1000);
const scheduler = new Scheduler<InferCommand>({
  discipline: config.discipline,
  maxQueueDepth: config.max_queue_depth,
  maxWaitMs: config.dispatch_timeout_seconds * 1000,
  costs,
  now: nowMs,
});
/** Policies changed at run time (SetModelPolicy), by model name; they outlive reloads. */
const policyUpdates = new Map<string, ModelPolicyUpdate>();
/** Residencies changed at run time (SetModelResidency), by model name; they outlive reloads. */
const residencyUpdates = new Map<string, Residency>();
/** Host buffers the main thread offered with the control message being handled, and those read from disk meanwhile. */
let hostOffer: Record<string, SharedArrayBuffer> = {};
let hostCreated: Record<string, SharedArrayBuffer> = {};
/** The device's weights: an arena of the budget's size and what is resident in it; null when the cache is off. */
const weightCache = init.weights
  ? new WeightCache(new Arena(init.weights.budgetBytes, { preallocate: init.weights.preallocate }), {
    readTensor,
    // Host copies are shared by every device of the process: use the main thread's, or make one it can share.
    hostBuffer: (source) => {
      const offered = hostOffer[source.key];
      if (offered) return { bytes: new Uint8Array(offered), fresh: false };
      const buffer = new SharedArrayBuffer(source.byteLength);
      hostCreated[source.key] = buffer;
      return { bytes: new Uint8Array(buffer), fresh: true };
    },
    compactionInterval: init.weights.compactionInterval,
    thrashWindowMs: init.weights.thrashWindowSeconds * 1000,
  })
  : null;

function memory(): WeightMemory | null {
  if (!weightCache) return null;
  return { residentBytes: weightCache.residentBytes, logicalBytes: weightCache.logicalResidentBytes, budgetBytes: weightCache.budget };
}

/** Where a model's weights live at rest: SetModelResidency's, else the node file's, else system. */
function residencyOf(name: string): Residency {
  if (!weightCache) return 'device';
  return residencyUpdates.get(name) ?? config.models[name]?.residency ?? 'system';
}

/** The cache's outcome as the main thread reports it (instances become model names); thrash is logged there too. */
function weightLoad(outcome: ResidencyOutcome): WeightLoad {
  if (outcome.thrash) {
    const t = outcome.thrash;
    send({
      type: 'warning',
      message: `weight cache thrashing on device ${init.deviceId}: the ${t.models} models used in the last ${t.windowSeconds} s need ${t.bytes} bytes of weights, more than the budget of ${t.budget}; raise runtime.cpu_device_memory_bytes or spread the models over more devices`,
      fields: { device: init.deviceId, models: t.models, bytes: t.bytes, budget: t.budget, windowSeconds: t.windowSeconds },
    });
  }
  return {
    hit: outcome.hit,
    loadedBytes: outcome.loadedBytes,
    diskBytes: outcome.diskBytes,
    loadMs: outcome.loadMs,
    evicted: outcome.evicted.map((i) => models.get(i)?.spec.name ?? i.slice(0, i.lastIndexOf('#'))),
  };
}

/** Mappings of registered shared-memory regions, by region id (a view keeps its mapping alive). */
const regionMappings = new Map<number, ArrayBuffer>();

/** A view of a shared-memory slice: the device reads inputs from it and writes outputs into it. */
function sliceView(slice: RegionSlice): Uint8Array {
  let mapping = regionMappings.get(slice.regionId);
  if (!mapping) {
    mapping = mapSharedMemory(slice.key, slice.fd, slice.regionOffset, slice.regionByteSize);
    regionMappings.set(slice.regionId, mapping);
  }
  return new Uint8Array(mapping, slice.offset, slice.byteSize);
}

/** An input's bytes: inline, or read in place from shared memory (copied only if misaligned for its type). */
function inputBytes(t: WireTensor): WireTensor {
  if (!t.shm) return t;
  const view = sliceView(t.shm);
  const width = dtypeInfo(t.datatype).elementBytes;
  return { ...t, data: width > 1 && view.byteOffset % width !== 0 ? view.slice() : view };
}

/** Messages not yet admitted, in arrival order. */
const inbox: ToDevice[] = [];
let pumping = false;

function send(msg: FromDevice, transfer: ArrayBuffer[] = []): void {
  port.postMessage(msg, transfer);
}

function fail(id: number, err: unknown): void {
  send({ type: 'failed', id, error: toErrorData(err) });
}

/** Write an output into its shared-memory slice; what goes back to the main thread carries no bytes. */
function writeToRegion(out: WireTensor, slice: RegionSlice): WireTensor {
  if (out.data.byteLength > slice.byteSize) {
    throw errors.sharedMemoryInvalid(`output ${JSON.stringify(out.name)}: shared_memory_byte_size ${slice.byteSize} is less than the ${out.data.byteLength} bytes of the result`);
  }
  sliceView(slice).set(out.data);
  return { ...out, data: new Uint8Array(0), shm: slice };
}

async function releaseAll(executables: Iterable<Executable> | undefined): Promise<void> {
  for (const e of executables ?? []) await e.session.release().catch(() => undefined);
}

/** The model's scheduling policy: the node file's, with run-time changes on top. */
function policyOf(spec: ModelSpec): { weight: number; maxBatchRows: number } {
  const update = policyUpdates.get(spec.name);
  const cap = update?.maxBatchSize ?? config.models[spec.name]?.max_batch_size ?? Infinity;
  return {
    weight: update?.weight ?? config.models[spec.name]?.weight ?? 1,
    // Most rows one execution may carry; 1 when there is no batch axis to concatenate along.
    maxBatchRows: spec.batchAxis === null ? 1 : Math.min(spec.maxBatchSize, cap),
  };
}

/** Run `fn` with the main thread's host buffers on offer; returns what changed in host RAM. */
async function withHostOffer(offer: Record<string, SharedArrayBuffer>, instances: () => string[], fn: () => Promise<void> | void): Promise<HostUpdate> {
  hostOffer = offer;
  hostCreated = {};
  try {
    await fn();
    return { created: hostCreated, holdings: Object.fromEntries(instances().map((i) => [i, weightCache?.hostKeys(i) ?? []])) };
  } finally {
    hostOffer = {}; // the buffers this actor uses are held by its cache entries, not by the offer
    hostCreated = {};
  }
}

async function load(id: number, instance: string, spec: ModelSpec, offer: Record<string, SharedArrayBuffer>): Promise<void> {
  const started = nowMs();
  const sessions = new Map<number, Executable>();
  let outcome: ResidencyOutcome | undefined;
  let host: HostUpdate;
  try {
    const options = { intraOpThreads: init.intraOpThreads, cacheDir: init.weights?.cacheDir ?? null };
    for (const file of spec.executables) sessions.set(file.batchSize ?? 0, await openExecutable(spec, file, options));
    // A `device` model comes on now, and fails its load if it cannot fit.
    host = await withHostOffer(offer, () => (weightCache ? [instance] : []), () => {
      outcome = weightCache?.add(instance, spec.name, residencyOf(spec.name), tensorSources(sessions.values()));
    });
  } catch (err) {
    await releaseAll(sessions.values());
    throw err;
  }
  const previous = models.get(instance); // only after a crash reload of the same instance
  const batchDims = new Map([...spec.inputs, ...spec.outputs].map((t) => [t.name, t.batchDim]));
  models.set(instance, { spec, sessions, batchDims });
  scheduler.setModel(instance, policyOf(spec));
  await releaseAll(previous?.sessions.values());
  const executables = [...sessions.values()];
  send({
    type: 'loaded',
    id,
    loadMs: nowMs() - started,
    compiled: { files: weightCache ? executables.length : 0, cacheHits: executables.filter((e) => e.cacheHit).length },
    weightBytes: weightCache?.weightBytes(instance) ?? 0,
    memory: memory(),
    load: outcome ? weightLoad(outcome) : null,
    host,
  });
}

async function unload(id: number, instance: string): Promise<void> {
  const model = models.get(instance);
  models.delete(instance);
  const name = model?.spec.name ?? instance;
  for (const t of scheduler.removeModel(instance)) fail(t.id, errors.modelNotReady(name, 'UNAVAILABLE', 'it was unloaded'));
  weightCache?.remove(instance);
  await releaseAll(model?.sessions.values());
  send({ type: 'unloaded', id, memory: memory() });
}

/** Put a request in its model's queue, or answer it at once (unknown model, full queue). */
function admit(cmd: InferCommand): void {
  const model = models.get(cmd.instance);
  if (!model) return fail(cmd.id, errors.modelNotReady(cmd.instance, 'UNAVAILABLE', `not loaded on device ${init.deviceId}`));
  const first = cmd.inputs[0];
  const batchDim = first ? model.batchDims.get(first.name) ?? -1 : -1;
  const rows = batchDim >= 0 ? first.shape[batchDim] : 1;
  try {
    scheduler.enqueue({ id: cmd.id, model: cmd.instance, rows, enqueuedAtMs: cmd.enqueuedAtMs, deadlineMs: cmd.deadlineMs, payload: cmd });
  } catch (err) {
    // The scheduler knows instances; the client knows the model's name.
    fail(cmd.id, (err as StowageError).code === 'STOWAGE_QUEUE_FULL' ? errors.queueFull(model.spec.name, config.max_queue_depth) : err);
  }
}

function shedError(ticket: Ticket<InferCommand>, reason: ShedReason): StowageError {
  const waitedMs = nowMs() - ticket.enqueuedAtMs;
  const name = models.get(ticket.model)?.spec.name ?? ticket.model;
  if (reason === 'waited') {
    return errors.deadlineExceeded(name, waitedMs, `queued longer than scheduler.dispatch_timeout_seconds (${config.dispatch_timeout_seconds})`);
  }
  if (reason === 'laxity') {
    return errors.deadlineExceeded(name, waitedMs, `${Math.round(ticket.deadlineMs - nowMs())} ms were left, less than the model's learned execution time; shed instead of run late`);
  }
  return errors.deadlineExceeded(name, waitedMs);
}

/** Run one batch of one model's requests and answer them all in one message. */
async function execute(batch: Ticket<InferCommand>[]): Promise<void> {
  const started = nowMs();
  const instance = batch[0].model;
  const model = models.get(instance);
  if (!model) {
    for (const t of batch) fail(t.id, errors.modelNotReady(instance, 'UNAVAILABLE', `not loaded on device ${init.deviceId}`));
    return;
  }
  const { spec, batchDims } = model;
  const name = spec.name;
  const rows = batch.reduce((sum, t) => sum + t.rows, 0);
  // A dynamic session runs the exact rows; per-size sessions pad to the smallest compiled size that holds them.
  let executable = model.sessions.get(0);
  let runBatch = spec.batchAxis === null ? 0 : rows;
  if (!executable) {
    runBatch = spec.compiledBatchSizes.find((size) => size >= rows) ?? rows;
    executable = model.sessions.get(runBatch);
  }
  // The outputs every request of the batch asked for, computed once.
  const wanted = [...new Set(batch.flatMap((t) => t.payload.outputs))];
  let load: WeightLoad | null = null;
  try {
    if (!executable) throw errors.internal(`model ${name} has no session for ${rows} rows`);
    const session = executable.session;
    const t0 = process.hrtime.bigint();
    let feeds: Record<string, ort.Tensor> = {};
    if (weightCache) {
      // The cold path: the batch waits while the model's weights come on (one copy), and the model pays for it.
      const outcome = weightCache.ensureResident(instance);
      load = weightLoad(outcome);
      if (!outcome.hit) scheduler.chargeTime(instance, outcome.loadMs);
      const epoch = weightCache.epoch(instance);
      if (executable.feeds?.epoch !== epoch) executable.feeds = { epoch, tensors: weightFeeds(executable, (key) => weightCache.deviceView(key)) };
      feeds = { ...executable.feeds.tensors };
    }
    spec.inputs.forEach((input, i) => {
      feeds[input.name] = batchInput(batch.map((t) => inputBytes(t.payload.inputs[i])), batchDims.get(input.name) ?? -1, runBatch);
    });
    const t1 = process.hrtime.bigint();
    let outputs: ort.InferenceSession.OnnxValueMapType;
    try {
      outputs = await session.run(feeds, wanted);
    } catch (err) {
      throw errors.executionFailed(name, (err as Error).message);
    }
    const t2 = process.hrtime.bigint();
    const results: InferResult[] = [];
    let from = 0;
    for (const t of batch) {
      try {
        results.push({
          id: t.id,
          outputs: t.payload.outputs.map((o, k) => {
            const out = requestOutput(name, o, outputs[o] as ort.Tensor, batchDims.get(o) ?? -1, from, t.rows);
            const region = t.payload.outputRegions[k];
            return region ? writeToRegion(out, region) : out;
          }),
          queueNs: Math.max(0, Math.round((started - t.enqueuedAtMs) * 1e6)),
        });
      } catch (err) {
        fail(t.id, err); // this request only: its region was too small
      }
      from += t.rows;
    }
    const t3 = process.hrtime.bigint();
    // Each distinct buffer is transferred once: requests' outputs may be views of one batch buffer.
    const transfer = [...new Set(results.flatMap((r) => r.outputs.map((o) => o.data.buffer as ArrayBuffer)))];
    send({
      type: 'executed',
      model: name,
      instance,
      results,
      timing: {
        computeInputNs: Number(t1 - t0),
        computeInferNs: Number(t2 - t1),
        computeOutputNs: Number(t3 - t2),
        batchRows: rows,
        executedBatchSize: runBatch,
        requests: batch.length,
      },
      queued: scheduler.queued,
      load,
      memory: load && !load.hit ? memory() : null,
    }, transfer);
    scheduler.charge(instance, Math.max(runBatch, 1), Number(t2 - t1) / 1e6);
  } catch (err) {
    for (const t of batch) fail(t.id, err);
  }
}

/** Change where a model's weights live at rest, on every loaded version of it. */
function setResidency(model: string, residency: Residency): void {
  if (!weightCache) throw errors.unsupported('SetModelResidency needs the on-demand weight cache, which is off (runtime.weight_cache_fraction is 0): every model is resident');
  const previous = residencyOf(model);
  residencyUpdates.set(model, residency);
  try {
    for (const [instance, m] of models) if (m.spec.name === model) weightCache.setResidency(instance, residency);
  } catch (err) {
    residencyUpdates.set(model, previous);
    for (const [instance, m] of models) if (m.spec.name === model) weightCache.setResidency(instance, previous);
    throw err;
  }
}

async function handleControl(msg: Extract<ToDevice, { type: 'load' | 'unload' | 'status' | 'setPolicy' | 'setResidency' | 'compact' | 'prefetch' }>): Promise<void> {
  try {
    switch (msg.type) {
      case 'load':
        return await load(msg.id, msg.instance, msg.spec, msg.hostOffer);
      case 'unload':
        return await unload(msg.id, msg.instance);
      case 'status':
        return send({
          type: 'statusReport',
          id: msg.id,
          instances: [...models].map(([instance, m]) => ({
            instance,
            model: m.spec.name,
            queued: scheduler.queuedFor(instance),
            costs: costs.snapshot(instance),
            ...policyOf(m.spec),
            residency: weightCache?.residencyOf(instance) ?? 'device',
            resident: weightCache ? weightCache.isResident(instance) : true,
            weightBytes: weightCache?.weightBytes(instance) ?? 0,
          })),
        });
      case 'setPolicy': {
        policyUpdates.set(msg.model, { ...policyUpdates.get(msg.model), ...msg.policy });
        for (const [instance, m] of models) if (m.spec.name === msg.model) scheduler.setModel(instance, policyOf(m.spec));
        return send({ type: 'policySet', id: msg.id });
      }
      case 'setResidency': {
        const instancesOf = () => [...models].filter(([, m]) => m.spec.name === msg.model).map(([i]) => i);
        const host = await withHostOffer(msg.hostOffer, instancesOf, () => setResidency(msg.model, msg.residency));
        return send({ type: 'residencySet', id: msg.id, memory: memory(), host });
      }
      case 'prefetch': {
        // Best effort: a model that cannot come on now comes on with its first request instead.
        const outcome = weightCache?.has(msg.instance) ? weightCache.ensureResident(msg.instance) : undefined;
        return send({ type: 'prefetched', id: msg.id, load: outcome ? weightLoad(outcome) : null, memory: memory() });
      }
      case 'compact': {
        if (!weightCache) throw errors.unsupported('CompactMemory needs the on-demand weight cache, which is off (runtime.weight_cache_fraction is 0)');
        const movedBytes = weightCache.compact();
        return send({ type: 'compacted', id: msg.id, movedBytes, memory: memory() });
      }
    }
  } catch (err) {
    fail(msg.id, err);
  }
}

const yieldToEventLoop = () => new Promise<void>((resolve) => setImmediate(resolve));

async function pump(): Promise<void> {
  if (pumping) return;
  pumping = true;
  try {
    for (;;) {
      while (inbox.length) {
        const msg = inbox.shift() as ToDevice;
        switch (msg.type) {
          case 'infer':
            admit(msg);
            break;
          case 'load':
          case 'unload':
          case 'status':
          case 'setPolicy':
          case 'setResidency':
          case 'compact':
          case 'prefetch':
            await handleControl(msg);
            break;
          case 'cancel':
          case 'forgetRegion':
            break; // handled on arrival
          default: {
            const never: never = msg;
            throw errors.internal(`device actor got an unknown message ${JSON.stringify(never)}`);
          }
        }
      }
      const { batch, shed } = scheduler.next();
      for (const s of shed) fail(s.ticket.id, shedError(s.ticket, s.reason));
      if (batch.length === 0) break;
      await execute(batch);
      await yieldToEventLoop();
    }
  } finally {
    pumping = false;
  }
}

port.on('message', (msg: ToDevice) => {
  if (msg.type === 'forgetRegion') {
    regionMappings.delete(msg.regionId);
    return;
  }
  if (msg.type === 'cancel') {
    // Queued: removed and never runs. Running: finishes, and the main thread drops its result.
    const at = inbox.findIndex((m) => m.type === 'infer' && m.id === msg.id);
    if (at >= 0) inbox.splice(at, 1);
    else scheduler.cancel(msg.id);
    return;
  }
  inbox.push(msg);
  void pump();
});

send({ type: 'started' });
