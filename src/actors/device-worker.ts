/**
 * The device actor: one worker thread per device. It alone touches the
 * device: it owns the ONNX Runtime sessions of every model loaded on it and
 * runs them one at a time, in the order requests arrive (the scheduler that
 * picks across models and coalesces batches replaces this FIFO later).
 *
 * Buffers: input bytes arrive transferred (this thread owns them) and are fed
 * to ONNX Runtime in place; output bytes are transferred back.
 */
import path from 'node:path';
import { parentPort, workerData } from 'node:worker_threads';
import * as ort from 'onnxruntime-node';
import type { ExecutableFile, ModelSpec } from '../bundle/model-spec.js';
import { checkSignature, type GraphTensor } from '../bundle/signature.js';
import { byOrtType, dtypeInfo } from '../dtypes.js';
import { errors, toErrorData } from '../errors.js';
import { joinBytesElements, splitBytesElements } from '../protocol/bytes-elements.js';
import { firstRows, firstRowsArray, padRows, padRowsArray } from './batch-layout.js';
import { nowMs, type DeviceInit, type FromDevice, type InferCommand, type ToDevice, type WireTensor } from './messages.js';

if (!parentPort) throw new Error('device-worker.js runs as a worker thread');

// onnxruntime-common turns float16 data into a Float16Array when the global exists (Node 24 has it),
// but the Node binding cannot read a Float16Array and fails with "not enough space". Without the
// global, float16 tensors stay Uint16Array both ways, which is also our wire layout. This thread only.
delete (globalThis as { Float16Array?: unknown }).Float16Array;
const port = parentPort;
const init = workerData as DeviceInit;

interface LoadedModel {
  spec: ModelSpec;
  /** Sessions by compiled batch size; key 0 is the single dynamic-batch session. */
  sessions: Map<number, ort.InferenceSession>;
  /** Position of the batch axis in each input and output tensor, by name (-1: none). */
  batchDims: Map<string, number>;
}

const models = new Map<string, LoadedModel>();
const queue: ToDevice[] = [];
let pumping = false;

function send(msg: FromDevice, transfer: ArrayBuffer[] = []): void {
  port.postMessage(msg, transfer);
}

const utf8 = new TextDecoder('utf-8', { fatal: true });
const utf8Encoder = new TextEncoder();

function decodeStrings(t: WireTensor): string[] {
  const parts = splitBytesElements(t.data);
  if (!parts) throw errors.invalidTensor(`input ${JSON.stringify(t.name)}: BYTES contents are not length-prefixed elements`);
  return parts.map((p, i) => {
    try {
      return utf8.decode(p);
    } catch {
      throw errors.invalidTensor(`input ${JSON.stringify(t.name)}: BYTES element ${i} is not valid UTF-8; ONNX Runtime's string tensors hold text only`);
    }
  });
}

/** Build the ONNX Runtime tensor for one input, padded along the batch axis to `runBatch` rows. */
function toOrtTensor(t: WireTensor, batchDim: number, runBatch: number): ort.Tensor {
  const info = dtypeInfo(t.datatype);
  const padded = batchDim >= 0 && t.shape[batchDim] < runBatch;
  const dims = t.shape.slice();
  if (padded) dims[batchDim] = runBatch;
  if (info.ortType === 'string') {
    let strings = decodeStrings(t);
    if (padded) strings = padRowsArray(strings, t.shape, batchDim, runBatch, '');
    return new ort.Tensor('string', strings, dims);
  }
  const bytes = padded ? padRows(t.data, t.shape, batchDim, info.elementBytes, runBatch) : t.data;
  const Typed = info.typedArray as Float32ArrayConstructor; // one of the numeric classes; BYTES returned above
  const data = new Typed(bytes.buffer, bytes.byteOffset, bytes.byteLength / info.elementBytes);
  return new ort.Tensor(info.ortType as 'float32', data, dims);
}

/** Turn one output into wire bytes, cutting padding rows off; returns the buffer to transfer. */
function toWire(model: string, name: string, tensor: ort.Tensor, batchDim: number, batch: number): WireTensor {
  const info = byOrtType(tensor.type);
  if (!info) throw errors.executionFailed(model, `output ${JSON.stringify(name)} has type ${tensor.type}, which Stowage cannot send`);
  const dims = tensor.dims.map(Number);
  const padded = batchDim >= 0 && dims[batchDim] > batch;
  const shape = dims.slice();
  if (padded) shape[batchDim] = batch;
  if (info.ortType === 'string') {
    let strings = tensor.data as string[];
    if (padded) strings = firstRowsArray(strings, dims, batchDim, batch);
    return { name, datatype: info.datatype, shape, data: joinBytesElements(strings.map((s) => utf8Encoder.encode(s))) };
  }
  const typed = tensor.data as Uint8Array;
  let bytes = new Uint8Array(typed.buffer, typed.byteOffset, typed.byteLength);
  if (padded) bytes = firstRows(bytes, dims, batchDim, info.elementBytes, batch);
  return { name, datatype: info.datatype, shape, data: bytes };
}

function sessionOptions(): ort.InferenceSession.SessionOptions {
  return {
    graphOptimizationLevel: 'all',
    executionProviders: ['cpu'],
    ...(init.intraOpThreads > 0 ? { intraOpNumThreads: init.intraOpThreads } : {}),
    // Spinning threads burn an idle core between requests (measured 471 ms vs 60 ms of CPU on an idle loop).
    extra: { session: { 'intra_op.allow_spinning': '0' } },
  };
}

async function createSession(spec: ModelSpec, file: ExecutableFile): Promise<ort.InferenceSession> {
  let session: ort.InferenceSession;
  try {
    session = await ort.InferenceSession.create(file.path, sessionOptions());
  } catch (err) {
    throw errors.bundleInvalid(spec.name, path.basename(file.path), `ONNX Runtime cannot load it: ${(err as Error).message}`);
  }
  try {
    checkSignature(spec, file, session.inputMetadata as readonly GraphTensor[], session.outputMetadata as readonly GraphTensor[]);
  } catch (err) {
    await session.release();
    throw err;
  }
  return session;
}

async function releaseAll(sessions: Iterable<ort.InferenceSession> | undefined): Promise<void> {
  for (const s of sessions ?? []) await s.release().catch(() => undefined);
}

async function load(id: number, spec: ModelSpec): Promise<void> {
  const started = nowMs();
  const sessions = new Map<number, ort.InferenceSession>();
  try {
    for (const file of spec.executables) sessions.set(file.batchSize ?? 0, await createSession(spec, file));
  } catch (err) {
    await releaseAll(sessions.values());
    throw err;
  }
  const previous = models.get(spec.name);
  const batchDims = new Map([...spec.inputs, ...spec.outputs].map((t) => [t.name, t.batchDim]));
  models.set(spec.name, { spec, sessions, batchDims });
  await releaseAll(previous?.sessions.values());
  send({ type: 'loaded', id, loadMs: nowMs() - started });
}

async function infer(cmd: InferCommand): Promise<void> {
  const started = nowMs();
  if (started > cmd.deadlineMs) throw errors.deadlineExceeded(cmd.model, started - cmd.enqueuedAtMs);
  const model = models.get(cmd.model);
  if (!model) throw errors.modelNotReady(cmd.model, 'UNAVAILABLE', `not loaded on device ${init.deviceId}`);
  const { spec, batchDims } = model;
  const t0 = process.hrtime.bigint();

  // The codec checked that every input agrees on the batch size and that it fits the largest compiled size.
  const first = cmd.inputs[0];
  const batch = spec.batchAxis === null || !first ? 0 : first.shape[batchDims.get(first.name) ?? 0];
  let session = model.sessions.get(0);
  let runBatch = batch;
  if (!session) {
    runBatch = spec.compiledBatchSizes.find((size) => size >= batch) ?? batch;
    session = model.sessions.get(runBatch);
    if (!session) throw errors.internal(`model ${spec.name} has no session for batch ${batch}`);
  }
  const feeds: Record<string, ort.Tensor> = {};
  for (const t of cmd.inputs) feeds[t.name] = toOrtTensor(t, batchDims.get(t.name) ?? -1, runBatch);
  const t1 = process.hrtime.bigint();
  let results: ort.InferenceSession.OnnxValueMapType;
  try {
    results = await session.run(feeds, cmd.outputs);
  } catch (err) {
    throw errors.executionFailed(spec.name, (err as Error).message);
  }
  const t2 = process.hrtime.bigint();
  const outputs = cmd.outputs.map((name) => toWire(spec.name, name, results[name] as ort.Tensor, batchDims.get(name) ?? -1, batch));
  const t3 = process.hrtime.bigint();
  // Transfer each distinct output buffer once (views may share one).
  const transfer = [...new Set(outputs.map((o) => o.data.buffer as ArrayBuffer))];
  send({
    type: 'inferred',
    id: cmd.id,
    outputs,
    timing: {
      queueNs: Math.max(0, Math.round((started - cmd.enqueuedAtMs) * 1e6)),
      computeInputNs: Number(t1 - t0),
      computeInferNs: Number(t2 - t1),
      computeOutputNs: Number(t3 - t2),
      executedBatchSize: runBatch,
    },
  }, transfer);
}

async function handle(msg: ToDevice): Promise<void> {
  try {
    switch (msg.type) {
      case 'load':
        return await load(msg.id, msg.spec);
      case 'unload': {
        const model = models.get(msg.model);
        models.delete(msg.model);
        await releaseAll(model?.sessions.values());
        return send({ type: 'unloaded', id: msg.id });
      }
      case 'infer':
        return await infer(msg);
      case 'cancel':
        return; // handled on arrival
      default: {
        const never: never = msg;
        throw errors.internal(`device actor got an unknown message ${JSON.stringify(never)}`);
      }
    }
  } catch (err) {
    send({ type: 'failed', id: (msg as { id: number }).id, error: toErrorData(err) });
  }
}

async function pump(): Promise<void> {
  if (pumping) return;
  pumping = true;
  while (queue.length) await handle(queue.shift() as ToDevice);
  pumping = false;
}

port.on('message', (msg: ToDevice) => {
  if (msg.type === 'cancel') {
    const at = queue.findIndex((m) => m.type === 'infer' && m.id === msg.id);
    if (at >= 0) queue.splice(at, 1);
    return;
  }
  queue.push(msg);
  void pump();
});

send({ type: 'started' });
