/**
 * The datatype table: one row per tensor element type, naming it in every
 * vocabulary Stowage meets — the manifest (`f32`, the seeds' short names), the
 * KServe wire (`FP32`), Triton's model config (`TYPE_FP32`) and ONNX Runtime
 * (`float32`). Everything else looks types up here.
 */

/** KServe V2 datatype names, as they travel on the wire. */
export type Datatype =
  | 'BOOL' | 'UINT8' | 'UINT16' | 'UINT32' | 'UINT64'
  | 'INT8' | 'INT16' | 'INT32' | 'INT64'
  | 'FP16' | 'BF16' | 'FP32' | 'FP64' | 'BYTES';

/** Manifest dtype names (the seeds' vocabulary). */
export type ManifestDtype =
  | 'bool' | 'u8' | 'u16' | 'u32' | 'u64' | 'i8' | 'i16' | 'i32' | 'i64'
  | 'f16' | 'bf16' | 'f32' | 'f64' | 'bytes';

/** Which repeated field of InferTensorContents carries this type, if any. */
export type ContentsField =
  | 'bool_contents' | 'int_contents' | 'int64_contents' | 'uint_contents'
  | 'uint64_contents' | 'fp32_contents' | 'fp64_contents' | 'bytes_contents';

/** A typed-array class: how elements of a datatype sit in memory (FP16/BF16 as raw 16-bit words). */
export type TypedArrayClass =
  | Uint8ArrayConstructor | Int8ArrayConstructor | Uint16ArrayConstructor | Int16ArrayConstructor
  | Uint32ArrayConstructor | Int32ArrayConstructor | BigUint64ArrayConstructor | BigInt64ArrayConstructor
  | Float32ArrayConstructor | Float64ArrayConstructor;

export interface DtypeInfo {
  datatype: Datatype;
  /** ONNX's TensorProto.DataType enum value (how initializers in a .onnx file are typed). */
  onnxType: number;
  manifest: ManifestDtype;
  /** Triton model_config DataType enum name. */
  tritonType: string;
  /** ONNX Runtime's tensor type name; null where onnxruntime-node cannot hold the type. */
  ortType: string | null;
  /** Bytes per element; 0 for BYTES, whose elements are length-prefixed. */
  elementBytes: number;
  /** Typed field in InferTensorContents; null for FP16/BF16, which travel only as raw bytes. */
  contentsField: ContentsField | null;
  /** The typed array that holds the elements; null for BYTES. */
  typedArray: TypedArrayClass | null;
}

const TABLE: DtypeInfo[] = [
  { datatype: 'BOOL', onnxType: 9, manifest: 'bool', tritonType: 'TYPE_BOOL', ortType: 'bool', elementBytes: 1, contentsField: 'bool_contents', typedArray: Uint8Array },
  { datatype: 'UINT8', onnxType: 2, manifest: 'u8', tritonType: 'TYPE_UINT8', ortType: 'uint8', elementBytes: 1, contentsField: 'uint_contents', typedArray: Uint8Array },
  { datatype: 'UINT16', onnxType: 4, manifest: 'u16', tritonType: 'TYPE_UINT16', ortType: 'uint16', elementBytes: 2, contentsField: 'uint_contents', typedArray: Uint16Array },
  { datatype: 'UINT32', onnxType: 12, manifest: 'u32', tritonType: 'TYPE_UINT32', ortType: 'uint32', elementBytes: 4, contentsField: 'uint_contents', typedArray: Uint32Array },
  { datatype: 'UINT64', onnxType: 13, manifest: 'u64', tritonType: 'TYPE_UINT64', ortType: 'uint64', elementBytes: 8, contentsField: 'uint64_contents', typedArray: BigUint64Array },
  { datatype: 'INT8', onnxType: 3, manifest: 'i8', tritonType: 'TYPE_INT8', ortType: 'int8', elementBytes: 1, contentsField: 'int_contents', typedArray: Int8Array },
  { datatype: 'INT16', onnxType: 5, manifest: 'i16', tritonType: 'TYPE_INT16', ortType: 'int16', elementBytes: 2, contentsField: 'int_contents', typedArray: Int16Array },
  { datatype: 'INT32', onnxType: 6, manifest: 'i32', tritonType: 'TYPE_INT32', ortType: 'int32', elementBytes: 4, contentsField: 'int_contents', typedArray: Int32Array },
  { datatype: 'INT64', onnxType: 7, manifest: 'i64', tritonType: 'TYPE_INT64', ortType: 'int64', elementBytes: 8, contentsField: 'int64_contents', typedArray: BigInt64Array },
  { datatype: 'FP16', onnxType: 10, manifest: 'f16', tritonType: 'TYPE_FP16', ortType: 'float16', elementBytes: 2, contentsField: null, typedArray: Uint16Array },
  // onnxruntime-node has no bfloat16 tensor: BF16 passes the codec but a bundle using it is refused at load.
  { datatype: 'BF16', onnxType: 16, manifest: 'bf16', tritonType: 'TYPE_BF16', ortType: null, elementBytes: 2, contentsField: null, typedArray: Uint16Array },
  { datatype: 'FP32', onnxType: 1, manifest: 'f32', tritonType: 'TYPE_FP32', ortType: 'float32', elementBytes: 4, contentsField: 'fp32_contents', typedArray: Float32Array },
  { datatype: 'FP64', onnxType: 11, manifest: 'f64', tritonType: 'TYPE_FP64', ortType: 'float64', elementBytes: 8, contentsField: 'fp64_contents', typedArray: Float64Array },
  { datatype: 'BYTES', onnxType: 8, manifest: 'bytes', tritonType: 'TYPE_STRING', ortType: 'string', elementBytes: 0, contentsField: 'bytes_contents', typedArray: null },
];

const BY_DATATYPE = new Map<string, DtypeInfo>(TABLE.map((d) => [d.datatype, d]));
const BY_MANIFEST = new Map<string, DtypeInfo>(TABLE.map((d) => [d.manifest, d]));
const BY_ONNX = new Map<number, DtypeInfo>(TABLE.map((d) => [d.onnxType, d]));
const BY_ORT = new Map<string, DtypeInfo>(TABLE.filter((d) => d.ortType).map((d) => [d.ortType as string, d]));

export const MANIFEST_DTYPES: readonly string[] = TABLE.map((d) => d.manifest);
export const DATATYPES: readonly string[] = TABLE.map((d) => d.datatype);

export function byDatatype(name: string): DtypeInfo | undefined {
  return BY_DATATYPE.get(name);
}

export function byManifestDtype(name: string): DtypeInfo | undefined {
  return BY_MANIFEST.get(name);
}

export function byOnnxType(type: number): DtypeInfo | undefined {
  return BY_ONNX.get(type);
}

export function byOrtType(name: string): DtypeInfo | undefined {
  return BY_ORT.get(name);
}

export function dtypeInfo(datatype: Datatype): DtypeInfo {
  return BY_DATATYPE.get(datatype) as DtypeInfo;
}

/** Bytes of a tensor of `dims`, or null for a type whose elements have no fixed width (BYTES). */
export function tensorBytes(datatype: Datatype, dims: readonly number[]): number | null {
  const width = dtypeInfo(datatype).elementBytes;
  return width === 0 ? null : dims.reduce((a, b) => a * b, 1) * width;
}
