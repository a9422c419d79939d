"""Train the example digit classifier and export it as the `digits` bundle.

The data set is the 8x8 handwritten digits that scikit-learn ships (1,797
images, pixel values 0..16), so nothing is downloaded. A small MLP
(64 -> 32 -> 10) is trained on 75% of it; the other 25% is held out, written
to test/fixtures/digits_heldout.json, and used by the tests to check the
accuracy through the server.

The ONNX graph is written with the `onnx` package's helpers so the file is
small and every node is visible:

    image f32[n,8,8] -> Reshape[n,64] -> Mul 1/16 -> Gemm+Relu -> Gemm -> logits f32[n,10]
                                                                      -> Softmax -> probabilities f32[n,10]
                                                                      -> ArgMax  -> label i64[n]

It also writes the same network into bundles/digits_u8, whose model.js accepts raw 8-bit images.

Run:  python tools/train_digits.py   (needs numpy, scikit-learn, onnx)
"""
import json
import pathlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier

ROOT = pathlib.Path(__file__).resolve().parents[1]
BUNDLE = ROOT / "bundles" / "digits"
HELDOUT = ROOT / "test" / "fixtures" / "digits_heldout.json"
SEED = 0


def train():
    digits = load_digits()
    x = digits.images.astype(np.float32)  # (1797, 8, 8), values 0..16
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=0.25, random_state=SEED, stratify=y)
    clf = MLPClassifier(hidden_layer_sizes=(32,), max_iter=2000, random_state=SEED)
    clf.fit(x_train.reshape(len(x_train), -1) / 16.0, y_train)
    return clf, x_test, y_test


def export(clf):
    w1, w2 = (w.astype(np.float32) for w in clf.coefs_)
    b1, b2 = (b.astype(np.float32) for b in clf.intercepts_)
    inits = [
        numpy_helper.from_array(np.array([-1, 64], dtype=np.int64), "flat_shape"),
        numpy_helper.from_array(np.array(1.0 / 16.0, dtype=np.float32), "pixel_scale"),
        numpy_helper.from_array(w1, "fc1_weight"),
        numpy_helper.from_array(b1, "fc1_bias"),
        numpy_helper.from_array(w2, "fc2_weight"),
        numpy_helper.from_array(b2, "fc2_bias"),
    ]
    nodes = [
        helper.make_node("Reshape", ["image", "flat_shape"], ["flat"]),
        helper.make_node("Mul", ["flat", "pixel_scale"], ["scaled"]),
        helper.make_node("Gemm", ["scaled", "fc1_weight", "fc1_bias"], ["fc1"]),
        helper.make_node("Relu", ["fc1"], ["hidden"]),
        helper.make_node("Gemm", ["hidden", "fc2_weight", "fc2_bias"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probabilities"], axis=1),
        helper.make_node("ArgMax", ["logits"], ["label"], axis=1, keepdims=0),
    ]
    graph = helper.make_graph(
        nodes, "digits_mlp",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["n", 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["n", 10]),
         helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["n", 10]),
         helper.make_tensor_value_info("label", TensorProto.INT64, ["n"])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="stowage/tools/train_digits.py")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, BUNDLE / "model.onnx")
    # bundles/digits_u8 serves the same network to clients that send raw 8-bit images.
    onnx.save(model, ROOT / "bundles" / "digits_u8" / "model.onnx")


def main():
    clf, x_test, y_test = train()
    pred = clf.predict(x_test.reshape(len(x_test), -1) / 16.0)
    accuracy = float((pred == y_test).mean())
    BUNDLE.mkdir(parents=True, exist_ok=True)
    export(clf)
    HELDOUT.write_text(json.dumps({
        "description": "held-out 25% of scikit-learn's 8x8 digits (random_state=0, stratified)",
        "accuracy": round(accuracy, 4),
        "images": x_test.astype(int).reshape(len(x_test), -1).tolist(),
        "labels": y_test.tolist(),
    }, separators=(",", ":")) + "\n")
    print(f"held-out accuracy {accuracy:.4f} on {len(y_test)} images")


if __name__ == "__main__":
    main()
