/**
 * Holding weights apart from the executable: an ONNX model's initializers
 * become graph inputs, and their bytes come out as separate tensors. The
 * weightless graph is what a session compiles; the tensors are what the
 * weight cache moves onto the device and feeds to every run.
 *
 * The main graph's numeric initializers of WEIGHT_MIN_BYTES or more move out.
 * Smaller ones move out too when they are floats that only operators taking
 * any input at run time read (SMALL_FLOAT_READERS: a bias, a scale, a clip
 * bound): then variants of one architecture that differ only in a small bias
 * or a quantisation scale compile to equal graphs and share one session on a
 * device (actors/device/sessions.ts); they are bound once per residency, as
 * weights are, so they cost no feed per run. Int64 ones (shapes, axes,
 * indices: operators want those constant), other small ones and strings stay
 * in the graph.
 *
 * ONNX Runtime packs a constant GEMM weight once, when the session is made; a
 * weight fed as an input is packed on every run, which costs least when it is
 * already transposed (bench/gemm-weights.js: 1.37x against 1.82x the embedded
 * time at batch 8). So a moved weight used only as B of Gemm (or ORT's
 * FusedGemm) with transB 0 is stored transposed and those nodes get transB 1:
 * the same product, a cheaper layout to feed.
 */
import { byOnnxType, dtypeInfo, type Datatype } from '../../shared/dtypes.js';
import { readFields, readRepeatedVarints, readString, WIRE_LEN, WireWriter, type WireField } from '../../shared/protobuf-wire.js';
import {
  ATTR_I, ATTR_NAME, ATTR_TYPE, ATTR_TYPE_INT, DIM_VALUE, GRAPH_INITIALIZER, GRAPH_INPUT, GRAPH_NODE, MODEL_GRAPH,
  NODE_ATTRIBUTE, NODE_DOMAIN, NODE_INPUT, NODE_OP_TYPE, ONNX_FLOAT, ONNX_INT64, SHAPE_DIM, TENSOR_DATA_LOCATION,
  TENSOR_DATA_TYPE, TENSOR_DIMS, TENSOR_FLOAT_DATA, TENSOR_NAME, TENSOR_RAW_DATA, TYPE_TENSOR, TYPE_TENSOR_ELEM_TYPE,
  TYPE_TENSOR_SHAPE, VALUE_INFO_NAME, VALUE_INFO_TYPE,
} from '../../shared/onnx-fields.js';

/**
 * Below this many bytes an initializer stays in the executable, unless it is a float read only by SMALL_FLOAT_READERS.
 */
export const WEIGHT_MIN_BYTES = 128;

/**
 * Operators that read a float input at run time as readily as a constant (no shape, axis or
 * attribute taken from it at session creation): a small float initializer read only by these
 * moves out of the graph. ONNX's domain and ONNX Runtime's own fused forms of them.
 */
const SMALL_FLOAT_READERS = new Set([
  'Add', 'Sub', 'Mul', 'Div', 'Pow', 'Max', 'Min', 'Sum', 'Mean', 'Where', 'Clip', 'PRelu', 'Concat',
  'Equal', 'Less', 'Greater', 'LessOrEqual', 'GreaterOrEqual',
  'Conv', 'ConvTranspose', 'Gemm', 'MatMul', 'BatchNormalization', 'InstanceNormalization', 'LayerNormalization',
  'QuantizeLinear', 'DequantizeLinear',
  'FusedConv', 'FusedGemm', 'FusedMatMul', 'BiasGelu', 'SkipLayerNormalization',
]);
const FLOATS: ReadonlySet<Datatype> = new Set(['FP32', 'FP16', 'BF16', 'FP64']);

/**
 * Whether a weight of this type and size moves out when every node reading it is one of SMALL_FLOAT_READERS (else:
 * whether it moves at all).
 */
export function movesOut(datatype: Datatype, byteLength: number, readers: readonly string[]): boolean {
  if (datatype === 'INT64') return false;
  if (byteLength >= WEIGHT_MIN_BYTES) return true;
  return FLOATS.has(datatype) && readers.length > 0 && readers.every((op) => SMALL_FLOAT_READERS.has(op));
}

/** One weight tensor taken out of a model. */
export interface WeightTensor {
  /** The graph input it now feeds. */
  name: string;
  datatype: Datatype;
  dims: number[];
  /** Row-major little-endian elements (a view into the model's bytes). */
  data: Uint8Array;
}

export interface SplitModel {
  /** The model with those initializers turned into graph inputs. */
  graph: Uint8Array;
  weights: WeightTensor[];
}

/** The tensor's bytes if it is a weight that should move out, else null. */
function weightBytes(fields: WireField[], elementBytes: number, count: number): Uint8Array | null {
  // external data: leave it to ORT
  if (fields.some((f) => f.field === TENSOR_DATA_LOCATION && f.varint !== 0)) return null;
  const raw = fields.find((f) => f.field === TENSOR_RAW_DATA && f.wireType === WIRE_LEN);
  if (raw) return raw.payload.length === count * elementBytes ? raw.payload : null;
  // float_data is packed little-endian floats: the same bytes raw_data would hold.
  const floats = fields.find((f) => f.field === TENSOR_FLOAT_DATA && f.wireType === WIRE_LEN);
  const type = fields.find((f) => f.field === TENSOR_DATA_TYPE)?.varint;
  if (floats && type === ONNX_FLOAT && floats.payload.length === count * 4) return floats.payload;
  return null; // other typed encodings are rare for weights; such a tensor stays embedded
}

/**
 * The tensor as a weight when it moves out (`readers`: the op types of the main graph's nodes reading it), else null.
 */
function asWeight(tensor: Uint8Array, readers: (name: string) => string[]): WeightTensor | null {
  const fields = readFields(tensor);
  const type = fields.find((f) => f.field === TENSOR_DATA_TYPE)?.varint ?? 0;
  const info = byOnnxType(type);
  if (!info || info.elementBytes === 0 || type === ONNX_INT64 || !info.ortType) return null;
  const dims = readRepeatedVarints(fields, TENSOR_DIMS);
  const count = dims.reduce((a, b) => a * b, 1);
  const small = count * info.elementBytes < WEIGHT_MIN_BYTES;
  if (small && !movesOut(info.datatype, count * info.elementBytes, readers(readString(fields, TENSOR_NAME) ?? ''))) return null;
  const data = weightBytes(fields, info.elementBytes, count);
  const name = readString(fields, TENSOR_NAME);
  if (!data || !name) return null;
  return { name, datatype: info.datatype, dims, data };
}

/** A graph input declaring the weight's exact type and shape. */
function inputFor(w: WeightTensor, onnxType: number): Uint8Array {
  const shape = new WireWriter();
  for (const d of w.dims) shape.bytes(SHAPE_DIM, new WireWriter().varint(DIM_VALUE, d).finish());
  const tensorType = new WireWriter().varint(TYPE_TENSOR_ELEM_TYPE, onnxType).bytes(TYPE_TENSOR_SHAPE, shape.finish()).finish();
  const type = new WireWriter().bytes(TYPE_TENSOR, tensorType).finish();
  return new WireWriter().string(VALUE_INFO_NAME, w.name).bytes(VALUE_INFO_TYPE, type).finish();
}

interface NodeInfo {
  field: WireField;
  op: string;
  inputs: string[];
  gemm: boolean;
  transB: number;
}

function nodeInfo(field: WireField): NodeInfo {
  const fields = readFields(field.payload);
  const dec = new TextDecoder();
  const op = readString(fields, NODE_OP_TYPE) ?? '';
  const domain = readString(fields, NODE_DOMAIN) ?? '';
  let transB = 0;
  for (const a of fields.filter((f) => f.field === NODE_ATTRIBUTE)) {
    const attr = readFields(a.payload);
    if (readString(attr, ATTR_NAME) === 'transB') transB = attr.find((x) => x.field === ATTR_I)?.varint ?? 0;
  }
  return {
    field,
    op,
    inputs: fields.filter((f) => f.field === NODE_INPUT).map((f) => dec.decode(f.payload)),
    gemm: (op === 'Gemm' && (domain === '' || domain === 'ai.onnx')) || (op === 'FusedGemm' && domain === 'com.microsoft'),
    transB,
  };
}

/** The node with its transB attribute set to 1 (everything else copied as it was). */
function withTransB(node: WireField): Uint8Array {
  const out = new WireWriter();
  for (const f of readFields(node.payload)) {
    if (f.field === NODE_ATTRIBUTE && readString(readFields(f.payload), ATTR_NAME) === 'transB') continue;
    out.raw(f.raw);
  }
  out.bytes(NODE_ATTRIBUTE, new WireWriter().string(ATTR_NAME, 'transB').varint(ATTR_I, 1).varint(ATTR_TYPE, ATTR_TYPE_INT).finish());
  return out.finish();
}

/** A row-major [rows, cols] matrix of `width`-byte elements, transposed. */
function transpose(data: Uint8Array, rows: number, cols: number, width: number): Uint8Array {
  const out = new Uint8Array(data.byteLength);
  const Words = width === 8 ? BigUint64Array : width === 4 ? Uint32Array : width === 2 ? Uint16Array : Uint8Array;
  // The elements read as words need their offset aligned for them: a weight at an odd place in the file is copied
  // first. copy: a misaligned weight into aligned memory (transposing writes `out` anyway)
  const from = data.byteOffset % width === 0 ? data : new Uint8Array(data);
  const src = new Words(from.buffer as ArrayBuffer, from.byteOffset, from.byteLength / width);
  const dst = new Words(out.buffer);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) dst[c * rows + r] = src[r * cols + c];
  return out;
}

/** Take the weights out of a serialized ONNX model. */
export function splitWeights(model: Uint8Array): SplitModel {
  const modelFields = readFields(model);
  const graphField = modelFields.find((f) => f.field === MODEL_GRAPH && f.wireType === WIRE_LEN);
  if (!graphField) throw new Error('not an ONNX model: it has no graph');
  const graphFields = readFields(graphField.payload);
  const declaredInputs = new Set(graphFields.filter((f) => f.field === GRAPH_INPUT).map((f) => readString(readFields(f.payload), VALUE_INFO_NAME)));

  const nodes = graphFields.filter((f) => f.field === GRAPH_NODE).map(nodeInfo);
  const readers = (name: string) => nodes.filter((n) => n.inputs.includes(name)).map((n) => n.op);
  const moving = new Map<WireField, WeightTensor>();
  for (const f of graphFields) {
    const weight = f.field === GRAPH_INITIALIZER && f.wireType === WIRE_LEN ? asWeight(f.payload, readers) : null;
    if (weight) moving.set(f, weight);
  }
  // Weights used only as B of transB-0 GEMMs: stored transposed, and those nodes set transB 1.
  const rewritten = new Set<WireField>();
  for (const weight of moving.values()) {
    if (weight.dims.length !== 2 || declaredInputs.has(weight.name)) continue;
    const uses = nodes.filter((n) => n.inputs.includes(weight.name));
    const asB = uses.every((n) => n.gemm && n.transB === 0 && n.inputs.indexOf(weight.name) === 1 && n.inputs.lastIndexOf(weight.name) === 1);
    if (uses.length === 0 || !asB) continue;
    const [rows, cols] = weight.dims;
    weight.data = transpose(weight.data, rows, cols, dtypeInfo(weight.datatype).elementBytes);
    weight.dims = [cols, rows];
    for (const n of uses) rewritten.add(n.field);
  }

  const weights: WeightTensor[] = [];
  const graph = new WireWriter();
  const newInputs: Uint8Array[] = [];
  for (const f of graphFields) {
    if (rewritten.has(f)) {
      graph.bytes(GRAPH_NODE, withTransB(f));
      continue;
    }
    const weight = moving.get(f);
    if (!weight) {
      graph.raw(f.raw);
      continue;
    }
    weights.push(weight);
    // An initializer already listed as an input (IR < 4 style) keeps that declaration.
    if (!declaredInputs.has(weight.name)) newInputs.push(inputFor(weight, dtypeInfo(weight.datatype).onnxType));
  }
  for (const input of newInputs) graph.bytes(GRAPH_INPUT, input);

  const out = new WireWriter();
  for (const f of modelFields) {
    if (f === graphField) out.bytes(MODEL_GRAPH, graph.finish());
    else out.raw(f.raw);
  }
  return { graph: out.finish(), weights };
}
