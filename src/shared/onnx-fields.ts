/**
 * onnx.proto's field numbers, for the parts of an ONNX file Stowage reads and writes without a
 * protobuf library (shared/protobuf-wire.ts): the compiler splitting weights off a graph
 * (actors/compiler/split-weights.ts) and `bundle create` reading a graph's declared tensors
 * (cli/graph-file.ts). From https://github.com/onnx/onnx/blob/main/onnx/onnx.proto; one table, so
 * the two readers cannot disagree.
 */

// ModelProto
export const MODEL_GRAPH = 7;
// GraphProto
export const GRAPH_NODE = 1;
export const GRAPH_INITIALIZER = 5;
export const GRAPH_INPUT = 11;
export const GRAPH_OUTPUT = 12;
// TensorProto
export const TENSOR_DIMS = 1;
export const TENSOR_DATA_TYPE = 2;
export const TENSOR_FLOAT_DATA = 4;
export const TENSOR_NAME = 8;
export const TENSOR_RAW_DATA = 9;
export const TENSOR_DATA_LOCATION = 14;
// ValueInfoProto
export const VALUE_INFO_NAME = 1;
export const VALUE_INFO_TYPE = 2;
// NodeProto
export const NODE_INPUT = 1;
export const NODE_OP_TYPE = 4;
export const NODE_ATTRIBUTE = 5;
export const NODE_DOMAIN = 7;
// AttributeProto, and its AttributeType INT
export const ATTR_NAME = 1;
export const ATTR_I = 3;
export const ATTR_TYPE = 20;
export const ATTR_TYPE_INT = 2;
// TypeProto, TypeProto.Tensor, TensorShapeProto and its Dimension
export const TYPE_TENSOR = 1;
export const TYPE_TENSOR_ELEM_TYPE = 1;
export const TYPE_TENSOR_SHAPE = 2;
export const SHAPE_DIM = 1;
export const DIM_VALUE = 1;
export const DIM_DENOTATION = 3;
// TensorProto.DataType
export const ONNX_FLOAT = 1;
export const ONNX_INT64 = 7;
