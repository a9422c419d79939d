"""Make the tiny ONNX models the tests use (test/fixtures/models/*).

- dtypes/model.onnx: one Identity per datatype ONNX Runtime's Node binding can
  feed (every KServe datatype but BF16), so the codec is checked end to end.
- fixed/model.b1.onnx, model.b4.onnx: y = 2x with a fixed batch dimension per
  file, the seeds' "one executable per compiled batch size" layout.
- echo/model.onnx: Identity on f32[n,1024], for messages far above gRPC's
  default 4 MiB limit.
- negate/model.onnx: y = -x on f32[3], a model without a batch axis.
- double/model.onnx: y = 2x on f32[n,1024], the same interface as echo: a second
  version of a model, for reload tests.
- stepped/model.onnx: y = x on f32[n,2], through Range(0, 4, max(x)), so a run on zeros fails
  (a zero step): a model only the bundle's warm-up data (warmup/x.bin) can warm up.
- convnet/model.onnx: a small ResNet-style network (3x32x32 image -> 10
  scores; conv, batch-norm folded, residual blocks, global pooling) with fixed
  random weights: heavy enough that batching matters, for the coalescing tests
  and benchmark.
- graphs/*.onnx: plain ONNX files (no bundle) for `bundle create`: named.onnx names its batch
  axis and denotes every other axis; the others each hold one thing create must refuse
  (unsupported.onnx an operator ONNX Runtime lacks, bf16.onnx and float8.onnx outputs Node or
  KServe cannot carry, clash.onnx an input and an output of one name, unbatched.onnx no batch
  axis, ragged.onnx a batch axis on some tensors only).
- graphs/expand.onnx: y = Expand(x, shape): an output as large as the shape the caller gives, so a
  run can ask ONNX Runtime's allocator for more memory than there is (the out-of-memory tests).

Run:  python tools/make_test_models.py   (needs onnx)
"""
import pathlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = pathlib.Path(__file__).resolve().parents[1] / "test" / "fixtures" / "models"

DTYPES = {  # manifest dtype -> ONNX element type
    "bool": TensorProto.BOOL, "u8": TensorProto.UINT8, "u16": TensorProto.UINT16,
    "u32": TensorProto.UINT32, "u64": TensorProto.UINT64, "i8": TensorProto.INT8,
    "i16": TensorProto.INT16, "i32": TensorProto.INT32, "i64": TensorProto.INT64,
    "f16": TensorProto.FLOAT16, "f32": TensorProto.FLOAT, "f64": TensorProto.DOUBLE,
    "bytes": TensorProto.STRING,
}


def save(model, path):
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, path)


def dtypes_model():
    nodes, inputs, outputs = [], [], []
    for name, elem in DTYPES.items():
        inputs.append(helper.make_tensor_value_info(f"in_{name}", elem, ["n", 3]))
        outputs.append(helper.make_tensor_value_info(f"out_{name}", elem, ["n", 3]))
        nodes.append(helper.make_node("Identity", [f"in_{name}"], [f"out_{name}"]))
    graph = helper.make_graph(nodes, "dtypes", inputs, outputs)
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
         OUT / "dtypes" / "model.onnx")


def fixed_models():
    for b in (1, 4):
        two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
        graph = helper.make_graph(
            [helper.make_node("Mul", ["x", "two"], ["y"])], f"double_b{b}",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [b, 3])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [b, 3])], [two])
        save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
             OUT / "fixed" / f"model.b{b}.onnx")


def echo_model():
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "echo",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 1024])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 1024])])
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
         OUT / "echo" / "model.onnx")


def double_model():
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "two"], ["y"])], "double",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 1024])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 1024])], [two])
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), OUT / "double" / "model.onnx")


def negate_model():
    graph = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["y"])], "negate",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
         OUT / "negate" / "model.onnx")


def stretch_model():
    # Its output's axis is symbolic in the graph ("m"), so the manifest's size for it is not checked
    # against anything: the fixture's manifest understates it (3; it is 2k = 4), as a careless one might.
    graph = helper.make_graph(
        [helper.make_node("Concat", ["x", "x"], ["y"], axis=1)], "stretch",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "k"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "m"])])
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), OUT / "stretch" / "model.onnx")


def stepped_model():
    zero = helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])
    start = helper.make_tensor("start", TensorProto.FLOAT, [], [0.0])
    limit = helper.make_tensor("limit", TensorProto.FLOAT, [], [4.0])
    graph = helper.make_graph([
        helper.make_node("ReduceMax", ["x"], ["step"], keepdims=0),
        helper.make_node("Range", ["start", "limit", "step"], ["steps"]),
        helper.make_node("ReduceSum", ["steps"], ["total"], keepdims=0),
        helper.make_node("Mul", ["total", "zero"], ["nothing"]),
        helper.make_node("Add", ["x", "nothing"], ["y"]),
    ], "stepped",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 2])], [zero, start, limit])
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), OUT / "stepped" / "model.onnx")
    # One batch row of x, [1, 1]: a step of 1.
    (OUT / "stepped" / "warmup").mkdir(exist_ok=True)
    np.array([1.0, 1.0], dtype="<f4").tofile(OUT / "stepped" / "warmup" / "x.bin")


def convnet_model():
    rng = np.random.default_rng(0)
    nodes, inits = [], []

    def conv(x, cin, cout, stride, name, relu=True):
        w = (rng.standard_normal((cout, cin, 3, 3)) * np.sqrt(2.0 / (cin * 9))).astype(np.float32)
        b = np.zeros(cout, dtype=np.float32)
        inits.extend([numpy_helper.from_array(w, f"{name}_w"), numpy_helper.from_array(b, f"{name}_b")])
        nodes.append(helper.make_node("Conv", [x, f"{name}_w", f"{name}_b"], [f"{name}_conv"],
                                      kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[stride, stride]))
        if not relu:
            return f"{name}_conv"
        nodes.append(helper.make_node("Relu", [f"{name}_conv"], [f"{name}_out"]))
        return f"{name}_out"

    def block(x, c, name):
        h = conv(x, c, c, 1, f"{name}a")
        h = conv(h, c, c, 1, f"{name}b", relu=False)
        nodes.append(helper.make_node("Add", [x, h], [f"{name}_sum"]))
        nodes.append(helper.make_node("Relu", [f"{name}_sum"], [f"{name}_out"]))
        return f"{name}_out"

    x = conv("image", 3, 16, 1, "stem")
    x = block(x, 16, "b1")
    x = conv(x, 16, 32, 2, "down1")
    x = block(x, 32, "b2")
    x = conv(x, 32, 64, 2, "down2")
    x = block(x, 64, "b3")
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["pooled"]))
    nodes.append(helper.make_node("Flatten", ["pooled"], ["features"], axis=1))
    fc = (rng.standard_normal((64, 10)) * 0.1).astype(np.float32)
    inits.extend([numpy_helper.from_array(fc, "fc_w"), numpy_helper.from_array(np.zeros(10, np.float32), "fc_b")])
    nodes.append(helper.make_node("Gemm", ["features", "fc_w", "fc_b"], ["scores"]))
    graph = helper.make_graph(
        nodes, "convnet",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["n", 3, 32, 32])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["n", 10])], inits)
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), OUT / "convnet" / "model.onnx")


def graph_files():
    graphs = OUT.parent / "graphs"

    def value(name, elem, dims, denotations=()):
        info = helper.make_tensor_value_info(name, elem, dims)
        for dim, den in zip(info.type.tensor_type.shape.dim, denotations):
            dim.denotation = den
        return info

    def write(file, nodes, inputs, outputs, opset=17, initializers=()):
        model = helper.make_model(helper.make_graph(nodes, file, inputs, outputs, list(initializers)),
                                  opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 9
        graphs.mkdir(parents=True, exist_ok=True)
        onnx.save(model, graphs / f"{file}.onnx")  # not checked: some are wrong on purpose

    # y[n, k] = mean over h, w of image[n, c, h, w] times a fixed [c, k] matrix; label = argmax.
    weights = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4) / 10, "w")
    write("named", [
        helper.make_node("ReduceMean", ["image"], ["pooled"], axes=[2, 3], keepdims=0),
        helper.make_node("MatMul", ["pooled", "w"], ["scores"]),
        helper.make_node("ArgMax", ["scores"], ["label"], axis=1, keepdims=0),
    ], [value("image", TensorProto.FLOAT, ["batch", 3, 5, 5], ["DATA_BATCH", "DATA_CHANNEL", "h", "w"])],
        [value("scores", TensorProto.FLOAT, ["batch", 4], ["", "k"]), value("label", TensorProto.INT64, ["batch"])],
        initializers=[weights])
    x = [value("x", TensorProto.FLOAT, ["n", 3], ["", "k"])]
    write("unsupported", [helper.make_node("MysteryOp", ["x"], ["y"], name="mystery_node")], x,
          [value("y", TensorProto.FLOAT, ["n", 3], ["", "k"])])
    write("bf16", [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.BFLOAT16)], x,
          [value("y", TensorProto.BFLOAT16, ["n", 3], ["", "k"])])
    write("float8", [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT8E4M3FN)], x,
          [value("y", TensorProto.FLOAT8E4M3FN, ["n", 3], ["", "k"])], opset=19)
    write("clash", [helper.make_node("Neg", ["x"], ["y"])], x,
          [value("y", TensorProto.FLOAT, ["n", 3], ["", "k"]), value("x", TensorProto.FLOAT, ["n", 3], ["", "k"])])
    write("unbatched", [helper.make_node("Neg", ["x"], ["y"])], [value("x", TensorProto.FLOAT, [2, 3])],
          [value("y", TensorProto.FLOAT, [2, 3])])
    write("ragged", [helper.make_node("ReduceSum", ["x"], ["y"], keepdims=0)], x,
          [value("y", TensorProto.FLOAT, [])])
    write("expand", [helper.make_node("Expand", ["x", "shape"], ["y"])],
          [value("x", TensorProto.FLOAT, [1]), value("shape", TensorProto.INT64, [1])],
          [value("y", TensorProto.FLOAT, ["m"])])


if __name__ == "__main__":
    dtypes_model()
    fixed_models()
    echo_model()
    negate_model()
    double_model()
    stretch_model()
    stepped_model()
    convnet_model()
    graph_files()
    print(f"wrote {OUT}")
