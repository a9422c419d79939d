"""The worked meta-model example: find and read the digits on a canvas.

Writes:
- bundles/digit_cells/model.onnx: stage one, a small model that measures the ink in each 8x8
  cell of a 32x32 canvas (average pooling over the grid). Its model.js-free output, one number
  per cell, is what bundles/digit_finder's run hook thresholds to find the digits.
- test/fixtures/digit_canvases.json: canvases holding 0 to 5 held-out digits (the same split as
  tools/train_digits.py) on a blank background, each in a cell of the 4x4 grid, with the digits'
  true values and boxes.

Run:  python tools/make_digit_finder.py   (needs numpy, scikit-learn, onnx)
"""
import json
import pathlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

ROOT = pathlib.Path(__file__).resolve().parents[1]
CELLS = 4          # the canvas is a 4x4 grid of 8x8 cells
SIZE = 8 * CELLS


def cells_model():
    nodes = [
        helper.make_node("Reshape", ["canvas", "nchw"], ["image"]),
        helper.make_node("AveragePool", ["image"], ["pooled"], kernel_shape=[8, 8], strides=[8, 8]),
        helper.make_node("Reshape", ["pooled", "flat"], ["ink"]),
    ]
    inits = [numpy_helper.from_array(np.array([-1, 1, SIZE, SIZE], dtype=np.int64), "nchw"),
             numpy_helper.from_array(np.array([-1, CELLS * CELLS], dtype=np.int64), "flat")]
    graph = helper.make_graph(nodes, "digit_cells",
                              [helper.make_tensor_value_info("canvas", TensorProto.FLOAT, ["n", SIZE, SIZE])],
                              [helper.make_tensor_value_info("ink", TensorProto.FLOAT, ["n", CELLS * CELLS])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="stowage/tools/make_digit_finder.py")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, ROOT / "bundles" / "digit_cells" / "model.onnx")


def canvases():
    digits = load_digits()
    _, x_test, _, y_test = train_test_split(digits.images, digits.target, test_size=0.25, random_state=0, stratify=digits.target)
    rng = np.random.default_rng(7)
    out = []
    for count in [0, 1, 2, 3, 4, 5, 5, 3]:
        canvas = np.zeros((SIZE, SIZE), dtype=np.float32)
        cells = sorted(rng.choice(CELLS * CELLS, size=count, replace=False).tolist())
        found = []
        for cell in cells:
            i = int(rng.integers(len(x_test)))
            r, c = divmod(cell, CELLS)
            canvas[8 * r:8 * r + 8, 8 * c:8 * c + 8] = x_test[i]
            found.append({"box": [8 * r, 8 * c, 8 * r + 8, 8 * c + 8], "digit": int(y_test[i])})
        out.append({"canvas": canvas.astype(int).tolist(), "digits": found})
    (ROOT / "test" / "fixtures" / "digit_canvases.json").write_text(json.dumps(out, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    (ROOT / "bundles" / "digit_cells").mkdir(parents=True, exist_ok=True)
    cells_model()
    canvases()
    print("wrote bundles/digit_cells/model.onnx and test/fixtures/digit_canvases.json")
