/**
 * Between the wire's tensors and the binding's (native/ort.ts), on the device actor's thread: join
 * the requests of a batch into each input (padding to a compiled batch size), in reused staging
 * memory (`Staging`, below), and cut each request's rows out of the outputs, written where its edge
 * asked (`frameOutputs`, below). Both sides use the wire layout, BYTES included (length-prefixed
 * elements), so a lone request's tensors go to ONNX Runtime as they came.
 */
import { byOnnxType, dtypeInfo } from '../../shared/dtypes.js';
import { errors } from '../../shared/errors.js';
import { joinBytesElements, splitBytesElements } from '../../shared/bytes-elements.js';
import { concatRows, concatRowsArray, sliceRows, sliceRowsArray } from './batch-layout.js';
import type { OutputFrame, WireTensor } from '../../shared/channels/inference.js';
import { hostOutput, type HostTensor, type OrtOutput } from '../../native/ort.js';

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

/** Bytes of an output of `dims`, or null for a type whose elements have no fixed width (BYTES). */
export function outputBytes(datatype: WireTensor['datatype'], dims: readonly number[]): number | null {
  const width = dtypeInfo(datatype).elementBytes;
  return width === 0 ? null : dims.reduce((a, b) => a * b, 1) * width;
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
 * response around the outputs: protocol/infer-response-wire.ts) and sends the buffer as it is;
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
