"""NVIDIA's own Python client, unchanged, against the real server."""
import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2

from helpers import expect_error, images_input


@pytest.fixture()
def client(server):
    c = grpcclient.InferenceServerClient(server)
    yield c
    c.close()


def test_health_and_server_metadata(client):
    assert client.is_server_live()
    assert client.is_server_ready()
    md = client.get_server_metadata(as_json=True)
    assert md["name"] == "stowage"
    assert md["extensions"] == ["model_repository", "model_configuration", "system_shared_memory", "binary_tensor_data", "parameters", "statistics", "logging"]


def test_repository_index_and_model_readiness(client):
    index = client.get_model_repository_index(as_json=True)
    states = {m["name"]: m["state"] for m in index["models"]}
    assert states == {"digit_cells": "READY", "digit_finder": "READY", "digits": "READY", "digits_u8": "READY",
                      "dtypes": "READY", "severity_grader": "READY"}
    assert client.is_model_ready("digits")


def test_model_metadata_and_config(client):
    md = client.get_model_metadata("digits", as_json=True)
    assert md["platform"] == "onnxruntime_onnx"
    assert md["versions"] == ["1"]
    assert md["inputs"] == [{"name": "image", "datatype": "FP32", "shape": ["-1", "8", "8"]}]
    assert [o["name"] for o in md["outputs"]] == ["logits", "probabilities", "label"]
    config = client.get_model_config("digits", as_json=True)["config"]
    assert config["name"] == "digits"
    assert config["platform"] == "onnxruntime_onnx"
    assert config["max_batch_size"] == 32
    assert config["input"][0]["data_type"] == "TYPE_FP32"
    assert config["input"][0]["dims"] == ["8", "8"]


def test_held_out_digits_are_classified_with_the_stated_accuracy(client, heldout):
    images, labels = heldout["images"], np.array(heldout["labels"])
    predicted = []
    for i in range(0, len(images), 32):
        result = client.infer("digits", [images_input(images[i:i + 32])],
                              outputs=[grpcclient.InferRequestedOutput("label")])
        predicted.append(result.as_numpy("label"))
    predicted = np.concatenate(predicted)
    assert predicted.dtype == np.int64
    accuracy = float((predicted == labels).mean())
    assert round(accuracy, 4) == heldout["accuracy"]
    assert accuracy > 0.95


def test_all_outputs_and_request_id(client, heldout):
    result = client.infer("digits", [images_input(heldout["images"][:3])], request_id="abc")
    assert result.get_response().id == "abc"
    probs = result.as_numpy("probabilities")
    assert probs.shape == (3, 10)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
    assert (result.as_numpy("label") == probs.argmax(axis=1)).all()
    assert result.as_numpy("logits").shape == (3, 10)


def test_every_datatype_round_trips(client):
    values = {
        "bool": (np.array([[True, False, True], [False, False, True]]), "BOOL"),
        "u8": (np.array([[0, 1, 255], [7, 8, 9]], dtype=np.uint8), "UINT8"),
        "u16": (np.array([[0, 1, 65535], [7, 8, 9]], dtype=np.uint16), "UINT16"),
        "u32": (np.array([[0, 1, 2**32 - 1], [7, 8, 9]], dtype=np.uint32), "UINT32"),
        "u64": (np.array([[0, 1, 2**64 - 1], [7, 8, 9]], dtype=np.uint64), "UINT64"),
        "i8": (np.array([[-128, 127, 0], [-1, 5, 6]], dtype=np.int8), "INT8"),
        "i16": (np.array([[-32768, 32767, 0], [-1, 5, 6]], dtype=np.int16), "INT16"),
        "i32": (np.array([[-2**31, 2**31 - 1, 0], [-1, 5, 6]], dtype=np.int32), "INT32"),
        "i64": (np.array([[-2**63, 2**63 - 1, 0], [-1, 5, 6]], dtype=np.int64), "INT64"),
        "f16": (np.array([[1.5, -2.0, 65504], [0, 0.25, 6e-5]], dtype=np.float16), "FP16"),
        "f32": (np.array([[1.5, -2.25, 3.4e38], [0, 1e-30, 7]], dtype=np.float32), "FP32"),
        "f64": (np.array([[1.5, -2.25, 1.7e308], [0, 1e-300, 7]], dtype=np.float64), "FP64"),
        "bytes": (np.array([[b"", b"a", "\u00fcnic\u00f8de".encode()], [b"x" * 300, b"7", b"z"]], dtype=np.object_), "BYTES"),
    }
    inputs = []
    for name, (array, datatype) in values.items():
        inp = grpcclient.InferInput(f"in_{name}", list(array.shape), datatype)
        inp.set_data_from_numpy(array)
        inputs.append(inp)
    result = client.infer("dtypes", inputs)
    for name, (array, _) in values.items():
        out = result.as_numpy(f"out_{name}")
        assert out.shape == array.shape, name
        assert (out == array).all(), name


def test_malformed_requests_get_clear_errors_and_the_server_keeps_serving(client, heldout):
    wrong_shape = grpcclient.InferInput("image", [1, 64], "FP32")
    wrong_shape.set_data_from_numpy(np.zeros((1, 64), dtype=np.float32))
    expect_error(lambda: client.infer("digits", [wrong_shape]), "StatusCode.INVALID_ARGUMENT",
                 "expected shape [-1, 8, 8]", "got [1, 64]")

    wrong_dtype = grpcclient.InferInput("image", [1, 8, 8], "FP64")
    wrong_dtype.set_data_from_numpy(np.zeros((1, 8, 8), dtype=np.float64))
    expect_error(lambda: client.infer("digits", [wrong_dtype]), "StatusCode.INVALID_ARGUMENT",
                 "expected datatype FP32, got FP64")

    expect_error(lambda: client.infer("nope", [images_input(heldout["images"][:1])]),
                 "StatusCode.NOT_FOUND", 'unknown model "nope"')

    expect_error(lambda: client.infer("digits", [images_input(heldout["images"][:1])],
                                      outputs=[grpcclient.InferRequestedOutput("labels")]),
                 "StatusCode.INVALID_ARGUMENT", 'unknown output "labels"')

    # A byte size that disagrees with the shape: tritonclient checks that itself, so send the
    # request with its generated stub.
    request = service_pb2.ModelInferRequest(model_name="digits")
    tensor = request.inputs.add(name="image", datatype="FP32", shape=[1, 8, 8])
    assert tensor.name == "image"
    request.raw_input_contents.append(b"\0" * 255)
    with pytest.raises(grpc.RpcError) as info:
        client._client_stub.ModelInfer(request)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "expected 256 bytes" in info.value.details() and "got 255" in info.value.details()

    result = client.infer("digits", [images_input(heldout["images"][:1])])
    assert result.as_numpy("label")[0] == heldout["labels"][0]


def test_inference_statistics_count_exactly_what_was_sent(client, heldout):
    def counts():
        stats = client.get_inference_statistics("digits", as_json=True)["model_stats"][0]
        return int(stats.get("inference_count", 0)), int(stats["inference_stats"]["success"].get("count", 0))

    rows_before, requests_before = counts()
    sizes = [1, 5, 32, 2]
    for n in sizes:
        client.infer("digits", [images_input(heldout["images"][:n])])
    rows_after, requests_after = counts()
    assert rows_after - rows_before == sum(sizes)
    assert requests_after - requests_before == len(sizes)
    stats = client.get_inference_statistics("digits", as_json=True)["model_stats"][0]
    assert stats["version"] == "1"
    assert int(stats["execution_count"]) >= 1
    assert int(stats["last_inference"]) > 0


def test_async_infer_with_many_requests_in_flight(client, heldout):
    import queue
    done = queue.Queue()
    n = 64
    for i in range(n):
        client.async_infer("digits", [images_input(heldout["images"][i:i + 1])],
                           callback=lambda result, error, i=i: done.put((i, result, error)),
                           request_id=str(i), outputs=[grpcclient.InferRequestedOutput("label")])
    answers = [done.get(timeout=30) for _ in range(n)]
    assert all(error is None for _, _, error in answers), [e for _, _, e in answers if e]
    expected = solo_labels(client, heldout, n)
    for i, result, _ in answers:
        assert result.get_response().id == str(i)
        assert result.as_numpy("label")[0] == expected[i]


def test_a_burst_of_1000_async_requests_at_the_defaults_is_answered_none_refused(client, heldout):
    # Triton's own client firing a thousand requests at once on one connection: they queue and are
    # answered (the server sheds on bytes in flight and queue depth, not on a small count).
    import queue
    done = queue.Queue()
    n = 1000
    images = heldout["images"]
    for i in range(n):
        client.async_infer("digits", [images_input(images[i % len(images):i % len(images) + 1])],
                           callback=lambda result, error, i=i: done.put((i, result, error)),
                           request_id=str(i), outputs=[grpcclient.InferRequestedOutput("label")])
    answers = [done.get(timeout=120) for _ in range(n)]
    assert [str(e) for _, _, e in answers if e] == []
    assert sorted(int(r.get_response().id) for _, r, _ in answers) == list(range(n))


def solo_labels(client, heldout, n):
    """What the model answers for the first n images in plain requests of up to 32: the reference."""
    return np.concatenate([client.infer("digits", [images_input(heldout["images"][i:min(i + 32, n)])]).as_numpy("label")
                           for i in range(0, n, 32)])


def test_streaming_with_callbacks_answers_every_request_and_errors_keep_the_stream(client, heldout):
    import queue
    answers = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        for i in range(5):
            client.async_stream_infer("digits", [images_input(heldout["images"][i:i + 1])], request_id=f"s{i}")
        client.async_stream_infer("nope", [images_input(heldout["images"][:1])], request_id="bad")
        client.async_stream_infer("digits", [images_input(heldout["images"][5:6])], request_id="s5")
        got = [answers.get(timeout=30) for _ in range(7)]
    finally:
        client.stop_stream()
    ok = {r.get_response().id: r for r, e in got if e is None}
    errs = [e for r, e in got if e is not None]
    assert sorted(ok) == [f"s{i}" for i in range(6)]
    assert len(errs) == 1 and 'unknown model "nope"' in errs[0].message()
    expected = solo_labels(client, heldout, 6)
    for i in range(6):
        assert ok[f"s{i}"].as_numpy("label")[0] == expected[i]


def test_load_and_unload_model(client, heldout):
    client.unload_model("dtypes")
    assert not client.is_model_ready("dtypes")
    states = {m["name"]: m for m in client.get_model_repository_index(as_json=True)["models"]}
    assert states["dtypes"]["state"] == "UNAVAILABLE" and states["dtypes"]["reason"] == "unloaded"
    client.load_model("dtypes")
    assert client.is_model_ready("dtypes")
    expect_error(lambda: client.load_model("no_such_model"), "StatusCode.NOT_FOUND", '"no_such_model"')


def test_log_settings(client):
    settings = client.get_log_settings().settings
    assert settings["log_info"].bool_param is True
    assert settings["log_verbose_level"].uint32_param == 0
    updated = client.update_log_settings({"log_verbose_level": 1}).settings
    assert updated["log_verbose_level"].uint32_param == 1
    client.update_log_settings({"log_verbose_level": 0})
    assert client.get_log_settings().settings["log_verbose_level"].uint32_param == 0


def test_hooked_examples_answer_correctly(client, heldout):
    """bundles/digits_u8 (preprocess) and bundles/severity_grader (postprocess) through tritonclient."""
    import json
    import pathlib
    raw = np.rint(np.asarray(heldout["images"][:32], dtype=np.float64) * 255 / 16).astype(np.uint8).reshape(32, 8, 8)
    image = grpcclient.InferInput("image", [32, 8, 8], "UINT8")
    image.set_data_from_numpy(raw)
    labels = client.infer("digits_u8", [image], outputs=[grpcclient.InferRequestedOutput("label")]).as_numpy("label")
    assert (labels == np.asarray(heldout["labels"][:32])).mean() >= 0.9
    md = client.get_model_metadata("digits_u8", as_json=True)
    assert md["inputs"][0]["datatype"] == "UINT8"

    grader = json.loads((pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "grader_heldout.json").read_text())
    grades = []
    for i in range(0, len(heldout["images"]), 32):
        grades.append(client.infer("severity_grader", [images_input(heldout["images"][i:i + 32])]).as_numpy("grade"))
    grades = np.concatenate(grades)
    assert grades.shape == (len(heldout["images"]), 1) and grades.dtype == np.int64
    assert grades[:, 0].tolist() == grader["grades"]
    wrong = grpcclient.InferInput("image", [1, 8, 8], "FP32")
    wrong.set_data_from_numpy(np.zeros((1, 8, 8), dtype=np.float32))
    expect_error(lambda: client.infer("digits_u8", [wrong]), "StatusCode.INVALID_ARGUMENT", "expected datatype UINT8, got FP32")


def test_meta_model_worked_example(client):
    """bundles/digit_finder through tritonclient: boxes exact, digits read, a blank canvas too."""
    import json
    import pathlib
    canvases = json.loads((pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "digit_canvases.json").read_text())
    right = total = 0
    for case in canvases:
        canvas = grpcclient.InferInput("canvas", [32, 32], "FP32")
        canvas.set_data_from_numpy(np.asarray(case["canvas"], dtype=np.float32))
        result = client.infer("digit_finder", [canvas])
        count = int(result.as_numpy("count")[0])
        assert count == len(case["digits"])
        assert result.as_numpy("boxes")[:count].tolist() == [d["box"] for d in case["digits"]]
        found = result.as_numpy("digits")[:count].tolist()
        right += sum(int(f == d["digit"]) for f, d in zip(found, case["digits"]))
        total += count
    assert any(not c["digits"] for c in canvases)
    assert right / total >= 0.9
    assert client.get_model_metadata("digit_finder", as_json=True)["platform"] == "ensemble"


def test_priority_argument_is_served_and_one_above_the_levels_refused(client, heldout):
    # tritonclient's own `priority` argument (a uint64 parameter): levels 1..3 by default.
    plain = client.infer("digits", [images_input(heldout["images"][:2])]).as_numpy("probabilities")
    for priority in (1, 2, 3, 0):
        result = client.infer("digits", [images_input(heldout["images"][:2])], priority=priority)
        np.testing.assert_array_equal(result.as_numpy("probabilities"), plain)
    expect_error(lambda: client.infer("digits", [images_input(heldout["images"][:1])], priority=9),
                 "StatusCode.INVALID_ARGUMENT", "priority 9 is above this server's 3 priority levels")
