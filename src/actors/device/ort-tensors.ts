/**
 * Converting between the wire's tensors and ONNX Runtime's, on the device actor's thread: join the
 * requests of a batch into each input (padding to a compiled batch size), and cut each request's
 * rows out of the outputs. BYTES tensors are strings to ONNX Runtime.
 */
import * as ort from 'onnxruntime-node';
import { byOrtType, dtypeInfo } from '../../shared/dtypes.js';
import { errors } from '../../shared/errors.js';
import { joinBytesElements, splitBytesElements } from '../../shared/bytes-elements.js';
import { concatRows, concatRowsArray, sliceRows, sliceRowsArray } from './batch-layout.js';
import type { WireTensor } from '../../shared/channels/inference.js';

const utf8 = new TextDecoder('utf-8', { fatal: true });
const utf8Encoder = new TextEncoder();

function decodeStrings(t: WireTensor): string[] {
  const parts = splitBytesElements(t.data);
  if (!parts) throw errors.invalidTensor(`input ${JSON.stringify(t.name)}: BYTES contents are not length-prefixed elements`);
  const elements = t.shape.reduce((a, b) => a * b, 1);
  if (parts.length !== elements) {
    throw errors.invalidTensor(`input ${JSON.stringify(t.name)}: shape needs ${elements} BYTES elements, the contents hold ${parts.length}`);
  }
  return parts.map((p, i) => {
    try {
      return utf8.decode(p);
    } catch {
      throw errors.invalidTensor(`input ${JSON.stringify(t.name)}: BYTES element ${i} is not valid UTF-8; ONNX Runtime's string tensors hold text only`);
    }
  });
}

/**
 * One input of the batch: the requests' tensors joined along the batch axis
 * and padded to `runBatch` rows, in memory from `stage` (staging.ts). A lone
 * request that needs no padding is fed as it came, without a copy.
 */
export function batchInput(parts: WireTensor[], batchDim: number, runBatch: number, stage: (bytes: number) => Uint8Array): ort.Tensor {
  const first = parts[0];
  const info = dtypeInfo(first.datatype);
  const dims = first.shape.slice();
  const rows = batchDim >= 0 ? parts.reduce((sum, p) => sum + p.shape[batchDim], 0) : 0;
  const joined = batchDim >= 0 && (parts.length > 1 || rows < runBatch);
  if (joined) dims[batchDim] = runBatch;
  if (info.ortType === 'string') {
    const strings = parts.map((p) => ({ items: decodeStrings(p), shape: p.shape })); // copy: BYTES elements into JS strings (ONNX Runtime's string tensors)
    return new ort.Tensor('string', joined ? concatRowsArray(strings, batchDim, runBatch, '') : strings[0].items, dims);
  }
  // A lone request's bytes may be a view of its gRPC message at any offset (message-buffers.ts): a
  // typed array needs them aligned, so a misaligned one is copied here, off the main thread.
  const bytes = joined ? concatRows(parts, batchDim, info.elementBytes, runBatch, stage) // copy: coalesced or padded rows, into staging
    : first.data.byteOffset % info.elementBytes === 0 ? first.data : realign(first.data, stage);
  const Typed = info.typedArray as Float32ArrayConstructor; // one of the numeric classes; BYTES returned above
  return new ort.Tensor(info.ortType as 'float32', new Typed(bytes.buffer, bytes.byteOffset, bytes.byteLength / info.elementBytes), dims);
}

function realign(data: Uint8Array, stage: (bytes: number) => Uint8Array): Uint8Array {
  const out = stage(data.byteLength);
  out.set(data); // copy: a lone inline input misaligned for its type, into staging
  return out;
}

/**
 * One request's rows of an output, as wire bytes: a view of the batch's buffer when the batch
 * axis leads, unless `own` asks for a buffer of the request's own (it goes on as a tensor while
 * other requests' rows stay behind).
 */
export function requestOutput(model: string, name: string, tensor: ort.Tensor, batchDim: number, from: number, rows: number, own = false): WireTensor {
  const info = byOrtType(tensor.type);
  if (!info) throw errors.executionFailed(model, `output ${JSON.stringify(name)} has type ${tensor.type}, which Stowage cannot send`);
  const dims = tensor.dims.map(Number);
  const whole = batchDim < 0 || (from === 0 && rows === dims[batchDim]);
  const shape = dims.slice();
  if (!whole) shape[batchDim] = rows;
  if (info.ortType === 'string') {
    const strings = tensor.data as string[];
    const mine = whole ? strings : sliceRowsArray(strings, dims, batchDim, from, rows);
    return { name, datatype: info.datatype, shape, data: joinBytesElements(mine.map((s) => utf8Encoder.encode(s))) }; // copy: JS strings into BYTES elements
  }
  const typed = tensor.data as Uint8Array;
  const bytes = new Uint8Array(typed.buffer, typed.byteOffset, typed.byteLength);
  return { name, datatype: info.datatype, shape, data: whole ? bytes : sliceRows(bytes, dims, batchDim, info.elementBytes, from, rows, own) };
}

