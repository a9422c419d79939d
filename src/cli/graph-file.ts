/**
 * What an ONNX file says about its inputs and outputs beyond what ONNX Runtime's Node binding
 * reports: each tensor's ONNX element type (the binding refuses a whole graph over one type it
 * cannot hold, without naming the tensor) and each dimension's `denotation` (onnx.proto's
 * Dimension field 3). ONNX cannot name a fixed dimension (dim_param and dim_value are one of),
 * but it can denote one: the standard DATA_BATCH, DATA_CHANNEL, DATA_TIME and DATA_FEATURE, or,
 * as `tools/export` writes them, the manifest's axis letter itself. `bundle create` reads them
 * so that a self-describing graph needs no --axes.
 */
import { readFields, readString, WIRE_LEN } from '../shared/protobuf-wire.js';
import { MODEL_GRAPH, GRAPH_INPUT, GRAPH_OUTPUT, VALUE_INFO_NAME, VALUE_INFO_TYPE, TYPE_TENSOR, TYPE_TENSOR_ELEM_TYPE, TYPE_TENSOR_SHAPE, SHAPE_DIM, DIM_DENOTATION } from '../shared/onnx-fields.js';


const sub = (fields: ReturnType<typeof readFields>, field: number) => fields.find((f) => f.field === field && f.wireType === WIRE_LEN)?.payload;

export interface GraphFileTensor {
  readonly name: string;
  readonly side: 'input' | 'output';
  /** onnx.proto's TensorProto.DataType; 0 when the file does not say. */
  readonly elemType: number;
  /** Each dimension's denotation, '' where there is none. */
  readonly denotations: readonly string[];
}

/** The graph's declared inputs (initializers included, in old files) and outputs. */
export function readGraphFile(model: Uint8Array): GraphFileTensor[] {
  const out: GraphFileTensor[] = [];
  const graph = sub(readFields(model), MODEL_GRAPH);
  if (!graph) return out;
  for (const f of readFields(graph)) {
    if ((f.field !== GRAPH_INPUT && f.field !== GRAPH_OUTPUT) || f.wireType !== WIRE_LEN) continue;
    const info = readFields(f.payload);
    const name = readString(info, VALUE_INFO_NAME);
    const type = sub(info, VALUE_INFO_TYPE);
    const tensor = type && readFields(sub(readFields(type), TYPE_TENSOR) ?? new Uint8Array());
    if (name === undefined || !tensor) continue;
    const shape = sub(tensor, TYPE_TENSOR_SHAPE);
    out.push({
      name,
      side: f.field === GRAPH_INPUT ? 'input' : 'output',
      elemType: tensor.find((x) => x.field === TYPE_TENSOR_ELEM_TYPE)?.varint ?? 0,
      denotations: shape ? readFields(shape).filter((d) => d.field === SHAPE_DIM).map((d) => readString(readFields(d.payload), DIM_DENOTATION) ?? '') : [],
    });
  }
  return out;
}
