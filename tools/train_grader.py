"""Train the example ordinal model and export it as the `severity_grader` bundle.

In the seeds' spirit: a "severity" grade read from an image, where grades are ordered. Here the
image is one of scikit-learn's 8x8 digits and its grade is the digit's value (0..9). The network
is CORAL ordinal regression (Cao, Mirjalili, Raschka 2020): one shared score s(x) from a small
MLP, and nine logits s(x) + b_k, one per boundary "grade > k" with ordered biases. The
executable emits those logits; the bundle's model.js turns them into the grade by counting the
leading positive logits, stopping at the first that is not (an early break that is awkward in a
static graph and plain in JavaScript).

Same split as tools/train_digits.py (random_state=0, stratified, 25% held out).
Run:  python tools/train_grader.py   (needs numpy, scikit-learn, onnx)
"""
import json
import pathlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

ROOT = pathlib.Path(__file__).resolve().parents[1]
BUNDLE = ROOT / "bundles" / "severity_grader"
RESULT = ROOT / "test" / "fixtures" / "grader_heldout.json"
GRADES = 10
HIDDEN = 64


def split():
    digits = load_digits()
    x = digits.images.reshape(len(digits.images), -1).astype(np.float32) / 16.0
    return train_test_split(x, digits.target, test_size=0.25, random_state=0, stratify=digits.target)


def train(x, y, epochs=4000, lr=0.01, seed=0):
    """Full-batch Adam on the CORAL loss (binary cross-entropy over the 9 boundaries)."""
    rng = np.random.default_rng(seed)
    params = {
        "w1": rng.standard_normal((64, HIDDEN)) * np.sqrt(2 / 64),
        "b1": np.zeros(HIDDEN),
        "w2": rng.standard_normal((HIDDEN, 1)) * np.sqrt(1 / HIDDEN),
        "bias": np.linspace(2, -2, GRADES - 1),                      # ordered boundary biases
    }
    moments = {k: (np.zeros_like(v), np.zeros_like(v)) for k, v in params.items()}
    levels = (y[:, None] > np.arange(GRADES - 1)[None, :]).astype(np.float64)
    n = len(x)
    for step in range(1, epochs + 1):
        h_pre = x @ params["w1"] + params["b1"]
        h = np.maximum(h_pre, 0)
        s = h @ params["w2"]                                         # shared score (n, 1)
        p = 1 / (1 + np.exp(-(s + params["bias"])))                  # (n, 9)
        g = (p - levels) / n                                         # d loss / d logits
        g_s = g.sum(1, keepdims=True)
        g_h = g_s @ params["w2"].T * (h_pre > 0)
        grads = {"w1": x.T @ g_h, "b1": g_h.sum(0), "w2": h.T @ g_s, "bias": g.sum(0)}
        for k, grad in grads.items():
            m, v = moments[k]
            m[...] = 0.9 * m + 0.1 * grad
            v[...] = 0.999 * v + 0.001 * grad * grad
            params[k] -= lr * (m / (1 - 0.9 ** step)) / (np.sqrt(v / (1 - 0.999 ** step)) + 1e-8)
    return tuple(params[k].astype(np.float32) for k in ("w1", "b1", "w2", "bias"))


def grade(logits):
    """The postprocess hook's rule: the count of leading positive logits."""
    out = np.zeros(len(logits), dtype=np.int64)
    for i, row in enumerate(logits):
        n = 0
        for k, v in enumerate(row):
            if v > 0:
                n = k + 1
            else:
                break
        out[i] = n
    return out


def export(w1, b1, w2, bias):
    inits = [
        numpy_helper.from_array(np.array([-1, 64], dtype=np.int64), "flat_shape"),
        numpy_helper.from_array(np.array(1 / 16, dtype=np.float32), "pixel_scale"),
        numpy_helper.from_array(w1, "fc1_weight"), numpy_helper.from_array(b1, "fc1_bias"),
        numpy_helper.from_array(w2, "score_weight"), numpy_helper.from_array(bias, "boundary_bias"),
    ]
    nodes = [
        helper.make_node("Reshape", ["image", "flat_shape"], ["flat"]),
        helper.make_node("Mul", ["flat", "pixel_scale"], ["scaled"]),
        helper.make_node("Gemm", ["scaled", "fc1_weight", "fc1_bias"], ["fc1"]),
        helper.make_node("Relu", ["fc1"], ["hidden"]),
        helper.make_node("MatMul", ["hidden", "score_weight"], ["score"]),
        helper.make_node("Add", ["score", "boundary_bias"], ["logits"]),
    ]
    graph = helper.make_graph(nodes, "severity_grader",
                              [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["n", 8, 8])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["n", GRADES - 1])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="stowage/tools/train_grader.py")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, BUNDLE / "model.onnx")


def main():
    x_train, x_test, y_train, y_test = split()
    params = train(x_train, y_train)
    w1, b1, w2, bias = params
    logits = np.maximum(x_test @ w1 + b1, 0) @ w2 + bias
    predicted = grade(logits)
    exact = float((predicted == y_test).mean())
    within_one = float((np.abs(predicted - y_test) <= 1).mean())
    BUNDLE.mkdir(parents=True, exist_ok=True)
    export(*params)
    RESULT.write_text(json.dumps({"exact": round(exact, 4), "within_one": round(within_one, 4),
                                  "grades": predicted.tolist()}) + "\n")
    print(f"held-out grades: {exact:.4f} exact, {within_one:.4f} within one grade")


if __name__ == "__main__":
    main()
