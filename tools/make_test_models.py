"""Make the tiny ONNX models the tests use (test/fixtures/models/*).

- dtypes/model.onnx: one Identity per datatype ONNX Runtime's Node binding can
  feed (every KServe datatype but BF16), so the codec is checked end to end.
- fixed/model.b1.onnx, model.b4.onnx: y = 2x with a fixed batch dimension per
  file, the seeds' "one executable per compiled batch size" layout.
- echo/model.onnx: Identity on f32[n,1024], for messages far above gRPC's
  default 4 MiB limit.
- negate/model.onnx: y = -x on f32[3], a model without a batch axis.

Run:  python tools/make_test_models.py   (needs onnx)
"""
import pathlib

import onnx
from onnx import TensorProto, helper

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


def negate_model():
    graph = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["y"])], "negate",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
         OUT / "negate" / "model.onnx")


if __name__ == "__main__":
    dtypes_model()
    fixed_models()
    echo_model()
    negate_model()
    print(f"wrote {OUT}")
