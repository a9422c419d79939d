/**
 * One execution on the device thread: a batch of one model's requests
 * (picked by the scheduler) joined into one ONNX Runtime run, and every
 * request answered from it in one message.
 *
 * Buffers: a request running alone is fed to ONNX Runtime in place (unless
 * it must be padded to a compiled batch size, or is misaligned for its type);
 * the requests of a coalesced batch are copied once into the joined input.
 * A request whose edge asked for a frame gets its outputs copied once into the one
 * buffer laid out as it asked (frameOutputs, below: for gRPC the response is
 * framed around them there), so the edge sends it as it is; others (REST,
 * hooks, meta sub-calls) get tensors whose buffers are
 * their own: a lone request's are ONNX Runtime's outputs (or views of them),
 * a coalesced request's rows are copied out of the batch's. A lone request's
 * shared-memory outputs are computed by ONNX Runtime into the region itself.
 * Every copy is tabled at the top of shared/request-path.ts.
 *
 * Between the wire's tensors and the binding's (native/ort.ts), below: the requests of a batch
 * joined into each input (padding to a compiled batch size), in reused staging memory (`Staging`),
 * and each request's rows cut out of the outputs, written where its edge asked (`frameOutputs`).
 * Both sides use the wire layout, BYTES included (length-prefixed elements), so a lone request's
 * tensors go to ONNX Runtime as they came.
 */
import type { ExecutionAnswers, FromDevice, InferCommand, WeightLoad } from '../../shared/channels/device.js';
import type { ExecutionOutcome } from './execution-costs.js';
import type { CostModel } from '../../shared/backlog.js';
import { type InferenceResult, type OutputFrame, type RegionSlice, type WireTensor } from '../../shared/channels/inference.js';
import { nowMs } from '../../shared/timers.js';
import { errors, type StowageError } from '../../shared/errors.js';
import { bindWeights, plainRun, reopenExhausted, type Executable } from './sessions.js';
import type { DeviceModels, LoadedModel } from './models.js';
import { byOnnxType, dtypeInfo, tensorBytes } from '../../shared/dtypes.js';
import { joinBytesElements, splitBytesElements } from '../../shared/bytes-elements.js';
import { modelOf, type ModelSpec, type TensorSpec } from '../../shared/model-spec.js';
import {
  hostOutput, isDeviceSlice, isOrtError, isOutOfMemory, type DeviceSlice, type HostTensor, type OrtOutput, type OrtSession, type OrtTensor,
} from '../../native/ort.js';
import { concatRows, concatRowsArray, sliceRows, sliceRowsArray } from './batch-layout.js';
import type { RegionMappings } from './regions.js';
import type { Scheduler } from './scheduler.js';
import type { UploadsAhead } from './uploads-ahead.js';

export interface ExecutionContext {
  deviceId: number;
  models: DeviceModels;
  scheduler: Scheduler<InferCommand>;
  regions: RegionMappings;
  /** Reused memory for joined and realigned inputs (free again once an execution ends). */
  staging: Staging;
  /** To the main thread (warnings). */
  send: (msg: FromDevice) => void;
  /**
   * An execution's answers, each to the thread its request came from with its output buffers
   * transferred, and the execution counted (execution-costs.ts), in one synchronous step.
   */
  executed: (answers: ExecutionAnswers, outcome: ExecutionOutcome) => void;
  /** Answer one request with an error. */
  fail: (id: number, err: unknown) => void;
  /** Learned execution costs: a run expected shorter than `inlineRunBelowMs` runs on this thread. */
  costs: CostModel;
  inlineRunBelowMs: number;
  /** Backend cuda: every input goes through (pinned) staging, a lone request's too. */
  stageInputs: boolean;
  /**
   * Weight uploads beside each run, for the cold models queued next (uploads-ahead.ts); null when off or without a
   * weight cache.
   */
  uploadsAhead: UploadsAhead | null;
  /** The run in flight, if any: the requests riding in it (a cancelled one leaves), and its session to terminate. */
  running: { ids: Set<number>; session: OrtSession } | null;
  /**
   * After a run failed: the error that takes the device out of service when the failure poisoned
   * its GPU's context (out-of-service.ts), else null.
   */
  outOfService: (err: unknown) => StowageError | null;
}

/** Whether `data` lies in this execution's staging memory (it stays on the device). */
function isStaging(data: ArrayBufferView | ArrayBuffer, ctx: ExecutionContext): boolean {
  const buffer = ArrayBuffer.isView(data) ? data.buffer : data;
  return ctx.staging.owns(buffer);
}

/**
 * The requests whose shared-memory objects still cover their slices (regions.ts); the others are
 * answered with the error here, so a client that shrank its region fails only its own request.
 */
function withRegionsIntact(batch: InferCommand[], ctx: ExecutionContext): InferCommand[] {
  return batch.filter((t) => {
    try {
      for (const input of t.inputs) if (input.shm) ctx.regions.check(`input ${JSON.stringify(input.name)}`, input.shm);
      t.outputRegions.forEach((slice, k) => {
        if (slice) ctx.regions.check(`output ${JSON.stringify(t.outputs[k])}`, slice);
      });
      return true;
    } catch (err) {
      ctx.fail(t.id, err);
      return false;
    }
  });
}

/** Whether two slices share bytes of one shared-memory object (regions of one key may overlap). */
function overlap(a: RegionSlice, b: RegionSlice): boolean {
  const start = (x: RegionSlice) => x.regionOffset + x.offset;
  return a.key === b.key && start(a) < start(b) + b.byteSize && start(b) < start(a) + a.byteSize;
}

/** Where a slice starts within its shared-memory object. */
const startOf = (x: RegionSlice) => x.regionOffset + x.offset;

/**
 * The outputs ONNX Runtime can write straight into shared memory, by name: the region's memory for
 * the whole run's output. A lone request: each output with a region whose whole shape the graph
 * fixes (`shaped`; the batch axis is the request's rows). A coalesced batch (no padding rows): an
 * output whose batch axis leads, when every request has a slice for it in one registered region
 * and the slices follow one another, in the batch's order, each exactly as long as its rows — the
 * run's output is then the requests' outputs laid end to end (a client placing its requests' outputs
 * at consecutive offsets of one region). Never over the bytes of an input: ONNX Runtime may read an
 * input after it has started writing outputs. Null when there is none.
 */
function directOutputs(batch: readonly InferCommand[], declared: readonly TensorSpec[], shaped: ReadonlySet<string>, rows: number, regions: RegionMappings): Map<string, Uint8Array | DeviceSlice> | null {
  let direct: Map<string, Uint8Array | DeviceSlice> | null = null;
  const overInput = (slice: RegionSlice) => batch.some((t) => t.inputs.some((input) => input.shm && overlap(input.shm, slice)));
  for (const spec of declared) {
    if (!shaped.has(spec.name)) continue;
    const slices = batch.map((t) => t.outputRegions[t.outputs.indexOf(spec.name)] ?? null);
    if (slices.some((slice) => !slice || overInput(slice))) continue;
    const [first] = slices as RegionSlice[];
    let slice = first;
    if (batch.length > 1) {
      const rowBytes = spec.batchDim === 0 ? tensorBytes(spec.datatype, spec.shape.map((d, i) => (i === 0 ? 1 : d))) : null;
      if (rowBytes === null) continue;
      let end = startOf(first);
      const laidEndToEnd = (slices as RegionSlice[]).every((s, i) => {
        const bytes = batch[i].rows * rowBytes;
        const follows = s.regionId === first.regionId && startOf(s) === end && bytes <= s.byteSize;
        end += bytes;
        return follows;
      });
      if (!laidEndToEnd) continue;
      slice = { ...first, byteSize: end - startOf(first) };
    }
    const shape = spec.shape.map((d, i) => (i === spec.batchDim ? rows : d));
    const target = regions.outputTarget(spec.datatype, shape, slice);
    if (target) (direct ??= new Map()).set(spec.name, target);
  }
  return direct;
}

/**
 * A coalesced batch in the order of its requests' first output slices, when they all have one in
 * one region: the order in which a client laid them out, which arrival need not keep (any order
 * of a batch answers the same; this one lets directOutputs find the slices end to end).
 */
function inRegionOrder(batch: InferCommand[]): InferCommand[] {
  if (batch.length < 2) return batch;
  const first = (t: InferCommand) => t.outputRegions[0] ?? null;
  const region = first(batch[0])?.regionId;
  if (region === undefined || !batch.every((t) => first(t)?.regionId === region)) return batch;
  return [...batch].sort((a, b) => startOf(first(a)!) - startOf(first(b)!));
}

/**
 * Where ONNX Runtime writes each output of this run: a lone request's shared-memory slice
 * (`direct`), a buffer of the lone request's own when it takes its outputs as tensors (they are
 * transferred as they are), or reused staging memory (framed for the edge, written into regions
 * or cut into requests' rows afterwards). An output whose shape the graph leaves open (or BYTES)
 * is named only: ONNX Runtime allocates it.
 */
function outputTargets(wanted: readonly string[], batch: readonly InferCommand[], spec: ModelSpec, shaped: ReadonlySet<string>, runBatch: number,
  direct: Map<string, Uint8Array | DeviceSlice> | null, stage: (bytes: number) => Uint8Array): (string | OrtTensor)[] {
  const lone = batch.length === 1 ? batch[0] : null;
  return wanted.map((name) => {
    const t = spec.outputs.find((o) => o.name === name);
    if (!t || !shaped.has(name)) return name;
    const dims = t.shape.map((d, i) => (i === t.batchDim ? runBatch : d));
    const bytes = tensorBytes(t.datatype, dims);
    if (bytes === null) return name;
    const type = dtypeInfo(t.datatype).onnxType;
    const region = direct?.get(name);
    if (region) return { name, type, dims, data: region };
    const k = lone ? lone.outputs.indexOf(name) : -1;
    const ownTensor = lone !== null && !lone.frame && k >= 0 && !lone.outputRegions[k];
    return { name, type, dims, data: ownTensor ? new Uint8Array(bytes) : stage(bytes) };
  });
}

/**
 * A run through the executable's CUDA graph for this batch size (cuda-graphs.ts); null when it
 * cannot take one, and the run goes on plainly. A graph run that fails turns graphs off for the
 * executable (said in its status) and the batch runs plainly, unless the failure poisoned the GPU:
 * then the device is out of service, and that is the batch's answer.
 */
function runGraph(ctx: ExecutionContext, executable: Executable, inputs: OrtTensor[], targets: (string | OrtTensor)[], runBatch: number, epoch: number): OrtOutput[] | null {
  const graphs = executable.graphs!;
  if (targets.some((t) => typeof t === 'string')) return null;
  try {
    return graphs.run(inputs, targets as OrtTensor[], runBatch, epoch);
  } catch (err) {
    const answer = verdict(ctx, err);
    if (answer !== err) throw answer;
    graphs.turnOff(`a run through its graph failed: ${(err as Error).message}`);
    return null;
  }
}

/**
 * An output ONNX Runtime wrote into a CUDA region: its declared type and one request's shape (`rows` on the batch
 * axis), no bytes.
 */
function gpuOutputRecord(declared: TensorSpec, out: OrtOutput, batchDim: number, rows: number): WireTensor {
  return { name: out.name, datatype: declared.datatype, shape: out.dims.map((d, i) => (i === batchDim ? rows : d)), data: new Uint8Array(0) };
}

/** Run one batch of one model's requests and answer them all in one message. */
export async function execute(whole: InferCommand[], ctx: ExecutionContext): Promise<void> {
  const { models, scheduler } = ctx;
  const started = nowMs();
  const batch = inRegionOrder(withRegionsIntact(whole, ctx));
  if (batch.length === 0) return;
  const instance = batch[0].instance;
  const model = models.get(instance);
  if (!model) {
    for (const t of batch) ctx.fail(t.id, errors.modelNotReady(modelOf(instance), 'UNAVAILABLE', `not loaded on device ${ctx.deviceId}`));
    return;
  }
  const rows = batch.reduce((sum, t) => sum + t.rows, 0);
  const { executable, runBatch } = executableFor(model, rows);
  let load: WeightLoad | null = null;
  try {
    if (!executable) throw errors.internal(`model ${model.spec.name} has no executable for ${rows} rows`);
    const t0 = process.hrtime.bigint();
    const openMs = await openSession(ctx, instance, executable);
    load = bringWeights(ctx, instance, executable);
    const run = prepareRun(ctx, batch, model, executable, rows, runBatch);
    const t1 = process.hrtime.bigint();
    const outputs = await runOnce(ctx, batch, model.spec, executable, run, runBatch);
    if (!outputs) return; // terminated: every request riding in it had gone
    const t2 = process.hrtime.bigint();
    const results = answersOf(ctx, batch, model, outputs, run, started);
    const t3 = process.hrtime.bigint();
    const timing = {
      computeInputNs: Number(t1 - t0),
      computeInferNs: Number(t2 - t1),
      computeOutputNs: Number(t3 - t2),
      ...(load && !load.hit ? { weightLoadMs: load.loadMs } : {}),
      ...(openMs > 0 ? { sessionOpenMs: openMs } : {}),
      batchRows: rows,
      executedBatchSize: runBatch,
      requests: batch.length,
    };
    // Each request's output buffers go with its answer, to the main thread or its edge's door (worker.ts).
    ctx.executed({ type: 'executed', results, timing }, { model: model.spec.name, timing, queued: scheduler.queued, load, memory: load && !load.hit ? models.memory() : null });
    scheduler.charge(instance, Math.max(runBatch, 1), Number(t2 - t1) / 1e6);
  } catch (err) {
    const answer = verdict(ctx, err);
    for (const t of batch) ctx.fail(t.id, answer);
  }
}

/** A dynamic executable runs the exact rows; per-size ones pad to the smallest compiled size that holds them. */
function executableFor(model: LoadedModel, rows: number): { executable: Executable | undefined; runBatch: number } {
  const { spec } = model;
  const dynamic = model.executables.get(0);
  if (dynamic) return { executable: dynamic, runBatch: spec.batchAxis === null ? 0 : rows };
  const runBatch = spec.compiledBatchSizes.find((size) => size >= rows) ?? rows;
  return { executable: model.executables.get(runBatch), runBatch };
}

/**
 * A session closed under the session budget opens again first (from the compile cache), and the
 * model pays for it as for a cold load; the ms it took (0: it was open). Memory that runs out even
 * after closing another idle session fails this batch RESOURCE_EXHAUSTED; the model stays READY.
 */
async function openSession(ctx: ExecutionContext, instance: InferCommand['instance'], executable: Executable): Promise<number> {
  let ms: number;
  try {
    ms = await ctx.models.sessions.use(executable.pooled);
  } catch (err) {
    throw ctx.models.sessionMemory?.exhausted(executable.model, 'opening its session again', err) ?? reopenExhausted(executable.model, err);
  }
  if (ms > 0) ctx.scheduler.chargeTime(instance, ms);
  return ms;
}

/**
 * The cold path: the batch waits while the model's weights come on (one copy), and the model pays
 * for it; the weights bound to the executable once per residency (a warm call binds nothing).
 */
function bringWeights(ctx: ExecutionContext, instance: InferCommand['instance'], executable: Executable): WeightLoad | null {
  const weightCache = ctx.models.weightCache;
  if (!weightCache) return null;
  const outcome = weightCache.ensureResident(instance);
  const load = ctx.models.weightLoad(outcome);
  if (!outcome.hit) ctx.scheduler.chargeTime(instance, outcome.loadMs);
  bindWeights(executable, weightCache.epoch(instance), (key) => weightCache.deviceData(key));
  return load;
}

/**
 * A run made ready: its inputs, where its outputs go, and which of them ONNX Runtime writes into shared memory itself.
 */
interface PreparedRun {
  inputs: OrtTensor[];
  targets: (string | OrtTensor)[];
  direct: Map<string, Uint8Array | DeviceSlice> | null;
}

function prepareRun(ctx: ExecutionContext, batch: InferCommand[], model: LoadedModel, executable: Executable, rows: number, runBatch: number): PreparedRun {
  const { regions } = ctx;
  const { spec, batchDims } = model;
  ctx.staging.beginExecution(); // executions run one at a time: the last one's staged inputs and outputs are free
  // Only inputs in shared memory are read through the regions (their scratch too): a batch without
  // any leaves them alone.
  const fromRegions = batch.some((t) => t.inputs.some((input) => input.shm));
  if (fromRegions) regions.beginExecution();
  const stage = (bytes: number) => ctx.staging.take(bytes);
  const padded = spec.batchAxis !== null && runBatch !== rows;
  // An input in CUDA shared memory goes to the run on the GPU: a lone request's as it is, a batch's
  // joined there when every request has it in a region (regions.ts); every other input is joined,
  // padded or staged on the host.
  const inputs = spec.inputs.map((input, i) => {
    const parts = batch.map((t) => t.inputs[i]);
    const batchDim = batchDims.get(input.name) ?? -1;
    if (!fromRegions) return batchInput(parts, batchDim, runBatch, stage, ctx.stageInputs);
    const onGpu = batch.length === 1 && !padded ? regions.deviceInput(parts[0]) : regions.joinedDeviceInput(parts, batchDim, runBatch);
    return onGpu ?? batchInput(parts.map((p) => regions.inputBytes(p, stage)), batchDim, runBatch, stage, ctx.stageInputs);
  });
  // Shared-memory outputs whose shapes are known now (a lone request's, or a coalesced batch's
  // laid end to end in one region): ONNX Runtime writes them into the region itself.
  const direct = padded || (batch.length > 1 && spec.batchAxis === null) ? null : directOutputs(batch, spec.outputs, executable.shapedOutputs, rows, regions);
  // The outputs every request of the batch asked for, computed once.
  const wanted = [...new Set(batch.flatMap((t) => t.outputs))];
  return { inputs, targets: outputTargets(wanted, batch, spec, executable.shapedOutputs, runBatch, direct, stage), direct };
}

/**
 * The run: through its CUDA graph when it has one, on this thread when it is expected shorter than
 * the hop to a libuv thread, else on a libuv thread while this one keeps admitting requests.
 * Null when it was terminated because every request riding in it had gone.
 */
async function runOnce(ctx: ExecutionContext, batch: InferCommand[], spec: ModelSpec, executable: Executable, run: PreparedRun, runBatch: number): Promise<OrtOutput[] | null> {
  const instance = batch[0].instance;
  // Its own binding on its session (shared with the other models of its graph): its weights are bound there.
  const { session, runs } = executable;
  const { inputs, targets } = run;
  const running = { ids: new Set(batch.map((t) => t.id)), session };
  const uploads = ctx.uploadsAhead;
  try {
    // On a GPU the uploads go on their own stream first, and copy while this run computes.
    if (uploads?.issuedBeforeRun) uploads.start(instance);
    const graphed = executable.graphs?.usable(runBatch) ? runGraph(ctx, executable, inputs, targets, runBatch, ctx.models.weightCache?.epoch(instance) ?? 0) : null;
    if (graphed) return graphed;
    if (ctx.costs.estimate(instance, Math.max(runBatch, 1)) < ctx.inlineRunBelowMs) {
      return runs.runSync(inputs, targets, plainRun(executable)); // shorter than the hop to a libuv thread
    }
    // The run goes on a libuv thread: this thread keeps admitting requests meanwhile.
    ctx.running = running;
    const pending = runs.run(inputs, targets, plainRun(executable));
    // In host memory this thread copies the next cold models' weights while the run goes.
    if (uploads && !uploads.issuedBeforeRun) uploads.start(instance);
    return await pending;
  } catch (err) {
    if (running.ids.size === 0) {
      // Terminated because every request riding in it had gone (worker.ts cancelRunning): nobody to answer.
      ctx.send({ type: 'warning', message: `model ${spec.name}: a run was terminated, every request riding in it having been cancelled`, fields: { model: spec.name, requests: batch.length } });
      return null;
    }
    // A poisoned GPU serves nothing more: said as the device's, for every request of the batch.
    const poisoned = ctx.outOfService(err);
    if (poisoned) throw poisoned;
    const message = (err as Error).message;
    // A new batch size's activations can be what the GPU has no room for: said with where the
    // GPU's memory went; on the CPU, what ONNX Runtime's allocator refused.
    const doing = spec.batchAxis === null ? 'running it' : `running a batch of ${runBatch}`;
    throw ctx.models.sessionMemory?.exhausted(spec.name, doing, err)
      ?? (isOutOfMemory(err) ? errors.deviceMemoryExhausted(spec.name, `device ${ctx.deviceId} ran out of memory ${doing}: ${message}`) : errors.executionFailed(spec.name, message));
  } finally {
    ctx.running = null;
  }
}

/**
 * Each request's answer: its rows of the batch's outputs, placed, written into its regions or handed over as they are.
 */
function answersOf(ctx: ExecutionContext, batch: InferCommand[], model: LoadedModel, outputs: OrtOutput[], run: PreparedRun, started: number): ({ id: number } & Omit<InferenceResult, 'timing'>)[] {
  const { regions } = ctx;
  const { spec, batchDims } = model;
  const { targets, direct } = run;
  const byName = new Map(outputs.map((o) => [o.name, o]));
  // ONNX Runtime's own buffers (outputs it allocated) cannot be transferred, nor can staging be given away.
  const movable = new Set(targets.filter((o): o is HostTensor => typeof o !== 'string' && !direct?.has(o.name) && !isDeviceSlice(o.data) && !isStaging(o.data, ctx)).map((o) => o.name));
  const results: ({ id: number } & Omit<InferenceResult, 'timing'>)[] = [];
  let from = 0;
  for (const t of batch) {
    try {
      const mine = t.outputs.map((o, k) => {
        const region = t.outputRegions[k];
        // Computed into CUDA shared memory: nothing to cut or copy, only the record of its rows.
        const inGpu = direct?.get(o);
        if (region && inGpu && isDeviceSlice(inGpu)) return regions.written(gpuOutputRecord(spec.outputs.find((d) => d.name === o)!, byName.get(o)!, batchDims.get(o) ?? -1, t.rows), region);
        // Tensors handed over as tensors are the request's own (inference.ts): a coalesced batch's
        // rows are copied out, and so is a lone request's output in memory that cannot move.
        const own = !t.frame && !region && (batch.length > 1 || !movable.has(o));
        const out = requestOutput(spec.name, byName.get(o)!, batchDims.get(o) ?? -1, from, t.rows, own);
        if (!region) return out;
        return direct?.has(o) ? regions.written(out, region) : regions.writeOutput(out, region);
      });
      const queueNs = Math.max(0, Math.round((started - t.enqueuedAtMs) * 1e6));
      results.push(t.frame ? { id: t.id, ...frameOutputs(mine, t.frame), queueNs } : { id: t.id, outputs: mine, queueNs });
    } catch (err) {
      // this request only: its region was too small, or a copy into a CUDA region failed
      ctx.fail(t.id, verdict(ctx, err));
    }
    from += t.rows;
  }
  return results;
}

/**
 * A failure outside the run itself (a cold model's copy onto the GPU, the wait for an upload beside
 * execution, a CUDA region's copy in or out, a run through a CUDA graph, a control call: a load, its
 * warm-up, a compaction, a prefetch) may have met a poisoned GPU as much as a run can: a CUDA error
 * goes to the device's verdict, which takes the device out when the context is poisoned (its error
 * is then the answer); any other failure is the answer as it is.
 */
export function verdict(ctx: Pick<ExecutionContext, 'outOfService'>, err: unknown): unknown {
  if (!isOrtError(err) || !err.cudaError) return err;
  return ctx.outOfService(err) ?? err;
}

function elementsOf(t: WireTensor): Uint8Array[] {
  const parts = splitBytesElements(t.data);
  if (!parts) throw errors.invalidTensor(`input ${JSON.stringify(t.name)}: BYTES contents are not length-prefixed elements`);
  const elements = t.shape.reduce((a, b) => a * b, 1);
  if (parts.length !== elements) {
    throw errors.invalidTensor(`input ${JSON.stringify(t.name)}: shape needs ${elements} BYTES elements, the contents hold ${parts.length}`);
  }
  return parts;
}

/**
 * One input of the batch: the requests' tensors joined along the batch axis and padded to
 * `runBatch` rows, in memory from `stage` (a `Staging`'s). A lone request that needs no padding is
 * fed as it came, without a copy.
 */
export function batchInput(parts: WireTensor[], batchDim: number, runBatch: number, stage: (bytes: number) => Uint8Array, alwaysStage = false): HostTensor {
  const first = parts[0];
  const info = dtypeInfo(first.datatype);
  const dims = first.shape.slice();
  const rows = batchDim >= 0 ? parts.reduce((sum, p) => sum + p.shape[batchDim], 0) : 0;
  const joined = batchDim >= 0 && (parts.length > 1 || rows < runBatch);
  if (joined) dims[batchDim] = runBatch;
  if (info.datatype === 'BYTES') {
    if (!joined) return { name: first.name, type: info.onnxType, dims, data: first.data };
    const items = parts.map((p) => ({ items: elementsOf(p), shape: p.shape }));
    // copy: a coalesced (or padded) BYTES input's elements, joined
    return { name: first.name, type: info.onnxType, dims, data: joinBytesElements(concatRowsArray(items, batchDim, runBatch, new Uint8Array(0))) };
  }
  // A lone request's bytes may be a view of its gRPC message at any offset (protocol/proto.ts): a
  // typed array needs them aligned, so a misaligned one is copied here, off the main thread.
  // `alwaysStage` (backend cuda): a lone input is copied into staging too, which is pinned, since
  // the GPU reads pinned memory at the bus's speed and a fresh pageable buffer at a fraction of it.
  // copy: coalesced or padded rows, into staging
  const bytes = joined ? concatRows(parts, batchDim, info.elementBytes, runBatch, stage)
    : !alwaysStage && first.data.byteOffset % info.elementBytes === 0 ? first.data : realign(first.data, stage);
  return { name: first.name, type: info.onnxType, dims, data: bytes };
}

function realign(data: Uint8Array, stage: (bytes: number) => Uint8Array): Uint8Array {
  const out = stage(data.byteLength);
  out.set(data); // copy: a lone input misaligned for its type (or any, on backend cuda), into staging
  return out;
}

/**
 * One request's rows of an output, as wire bytes: a view of the batch's buffer when the batch axis
 * leads, unless `own` asks for a buffer of the request's own (it goes on as a tensor, transferred,
 * while other requests' rows stay behind, or the buffer is ONNX Runtime's, which cannot move).
 */
export function requestOutput(model: string, out: OrtOutput, batchDim: number, from: number, rows: number, own = false): WireTensor {
  const info = byOnnxType(out.type);
  if (!info || (info.ortType === null && info.datatype !== 'BYTES')) throw errors.executionFailed(model, `output ${JSON.stringify(out.name)} has ONNX type ${out.type}, which Stowage cannot send`);
  const dims = out.dims;
  const whole = batchDim < 0 || (from === 0 && rows === dims[batchDim]);
  const shape = dims.slice();
  if (!whole) shape[batchDim] = rows;
  const { data } = hostOutput(out);
  const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  if (info.datatype === 'BYTES') {
    // The binding hands BYTES over as length-prefixed elements in a buffer of their own.
    if (whole) return { name: out.name, datatype: info.datatype, shape, data: bytes };
    const elements = splitBytesElements(bytes) ?? [];
    // copy: a request's BYTES rows
    return { name: out.name, datatype: info.datatype, shape, data: joinBytesElements(sliceRowsArray(elements, dims, batchDim, from, rows)) };
  }
  if (whole) {
    if (!own) return { name: out.name, datatype: info.datatype, shape, data: bytes };
    // copy: a lone request's output out of memory it cannot take along (ONNX Runtime's or staging)
    return { name: out.name, datatype: info.datatype, shape, data: bytes.slice() };
  }
  return { name: out.name, datatype: info.datatype, shape, data: sliceRows(bytes, dims, batchDim, info.elementBytes, from, rows, own) };
}

/** Buffers larger than this are not kept between executions (a rare huge batch does not pin its memory). */
const MAX_KEPT_BYTES = 64 * 2 ** 20;

/**
 * Reused memory for an execution's joined and realigned inputs and the outputs it does not give
 * away, on the device actor's thread.
 *
 * Executions run one at a time, and ONNX Runtime uses its bound tensors only while a run lasts, so
 * the memory one execution staged in is free again when the next begins. Copying into
 * memory already mapped and warm costs a fraction of copying into a fresh allocation (page faults
 * and zeroing now, a collection to free it later): measured ≈19 GB/s against ≈2.4 GB/s for
 * 600 KiB on the 2-vCPU machine of docs/performance.md.
 */
export class Staging {
  /** One buffer per `take` of an execution, in order: the same inputs reuse the same buffer. */
  readonly #kept: ArrayBuffer[] = [];
  /**
   * Backend cuda: the kept buffers' registrations (pinned, so ONNX Runtime's copies to the GPU run at the bus's speed).
   */
  readonly #pins: ({ release(): void } | undefined)[] = [];
  readonly #pin: ((buffer: ArrayBuffer) => { release(): void } | undefined) | undefined;

  /** `pin` registers a kept buffer for fast copies to the device (backend cuda). */
  constructor(pin?: (buffer: ArrayBuffer) => { release(): void } | undefined) {
    this.#pin = pin;
  }
  #next = 0;
  /** This execution's buffers too large to keep: staging all the same until the next begins. */
  readonly #loose = new Set<ArrayBuffer>();

  /**
   * `bytes` bytes for this execution, 8-byte aligned; valid until the next begins. The contents are
   * whatever the last execution left: the caller writes every byte it feeds.
   */
  take(bytes: number): Uint8Array {
    const i = this.#next++;
    let buffer = this.#kept[i];
    if (!buffer || buffer.byteLength < bytes) {
      buffer = new ArrayBuffer(bytes);
      if (bytes <= MAX_KEPT_BYTES) {
        this.#pins[i]?.release();
        this.#kept[i] = buffer;
        this.#pins[i] = this.#pin?.(buffer);
      } else this.#loose.add(buffer);
    }
    return new Uint8Array(buffer, 0, bytes);
  }

  /** Whether `buffer` is staging memory (it must not be given away: the next execution reuses it). */
  owns(buffer: ArrayBufferLike): boolean {
    return this.#kept.includes(buffer as ArrayBuffer) || this.#loose.has(buffer as ArrayBuffer);
  }

  /** A new execution begins: the last one's staged inputs and outputs are no longer read. */
  beginExecution(): void {
    this.#next = 0;
    this.#loose.clear();
  }

  /** Bytes held between executions. */
  get keptBytes(): number {
    return this.#kept.reduce((sum, b) => sum + (b?.byteLength ?? 0), 0);
  }
}

/**
 * A request's outputs written where its edge asked (shared/data-plane.ts, OutputLayout): one
 * buffer, `headroom` bytes free first and `gap` bytes free before each output, every output's
 * bytes copied in once. The edge fills the free bytes with its protocol's framing (for gRPC the
 * response around the outputs: protocol/codec.ts) and sends the buffer as it is;
 * this thread knows the sizes, never what goes there.
 *
 * `outputs` copied into one fresh buffer laid out as `frame` says; each returned as a view of it.
 */
export function frameOutputs(outputs: readonly WireTensor[], frame: OutputFrame): { outputs: WireTensor[]; framed: Uint8Array } {
  let total = frame.headroom;
  for (const t of outputs) total += frame.gap + t.data.byteLength;
  const framed = new Uint8Array(total);
  let at = frame.headroom;
  const views = outputs.map((t) => {
    at += frame.gap;
    framed.set(t.data, at); // copy: an output into the frame its edge asked for (the path's table counts it)
    const data = framed.subarray(at, at + t.data.byteLength);
    at += t.data.byteLength;
    return { ...t, data };
  });
  return { outputs: views, framed };
}
