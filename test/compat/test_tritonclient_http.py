"""NVIDIA's own Python HTTP client (tritonclient.http), unchanged, against the real server's REST
port: health and metadata, inference with JSON and with binary tensors (the same answers as
through gRPC), every datatype, the repository extension, statistics, system shared memory and
logging."""
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from helpers import images_input


@pytest.fixture()
def client(rest):
    c = httpclient.InferenceServerClient(rest)
    yield c
    c.close()


def images(heldout, n):
    return np.array(heldout["images"][:n], dtype=np.float32).reshape(n, 8, 8)


def test_health_metadata_and_config(client):
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.get_server_metadata()["name"] == "stowage"
    assert client.is_model_ready("digits")
    md = client.get_model_metadata("digits")
    assert md["inputs"] == [{"name": "image", "datatype": "FP32", "shape": [-1, 8, 8]}]
    assert client.get_model_config("digits")["max_batch_size"] == 32
    with pytest.raises(InferenceServerException, match="no_such_model"):
        client.get_model_metadata("no_such_model")


@pytest.mark.parametrize("binary", [False, True])
def test_inference_answers_as_grpc_does(client, server, heldout, binary):
    x = images(heldout, 5)
    inp = httpclient.InferInput("image", [5, 8, 8], "FP32")
    inp.set_data_from_numpy(x, binary_data=binary)
    outputs = [httpclient.InferRequestedOutput(name, binary_data=binary) for name in ("logits", "probabilities", "label")]
    result = client.infer("digits", [inp], outputs=outputs, request_id="h1")
    assert result.get_response()["id"] == "h1"
    g = grpcclient.InferenceServerClient(server)
    try:
        want = g.infer("digits", [images_input(heldout["images"][:5])])
    finally:
        g.close()
    for name in ("logits", "probabilities", "label"):
        np.testing.assert_array_equal(result.as_numpy(name), want.as_numpy(name))
    assert (result.as_numpy("label") == np.array(heldout["labels"][:5])).mean() >= 0.8


def test_every_datatype_round_trips_through_binary_tensors(client):
    md = client.get_model_metadata("dtypes")
    inputs, expected = [], {}
    rng = np.random.default_rng(3)
    for i in md["inputs"]:
        dt = i["datatype"]
        if dt == "BYTES":
            data = np.array([[b"", b"a", "ünï".encode()], [b"x" * 40, b"7", b"\x00z"]], dtype=np.object_)
        elif dt == "BOOL":
            data = rng.integers(0, 2, (2, 3)).astype(bool)
        else:
            np_type = {"FP16": np.float16, "FP32": np.float32, "FP64": np.float64}.get(dt) or np.dtype(dt.lower())
            data = (rng.standard_normal((2, 3)) * 20).astype(np_type)
        t = httpclient.InferInput(i["name"], [2, 3], dt)
        t.set_data_from_numpy(data, binary_data=True)
        inputs.append(t)
        expected[i["name"].replace("in_", "out_")] = data
    result = client.infer("dtypes", inputs)
    for name, want in expected.items():
        np.testing.assert_array_equal(result.as_numpy(name), want, err_msg=name)


def test_repository_load_unload_and_statistics(client):
    index = {m["name"]: m["state"] for m in client.get_model_repository_index()}
    assert index["digits"] == "READY"
    client.unload_model("digit_cells")
    assert not client.is_model_ready("digit_cells")
    client.load_model("digit_cells")
    assert client.is_model_ready("digit_cells")
    before = client.get_inference_statistics("digits")["model_stats"][0]["inference_stats"]["success"]["count"]
    inp = httpclient.InferInput("image", [2, 8, 8], "FP32")
    inp.set_data_from_numpy(np.ones((2, 8, 8), dtype=np.float32))
    client.infer("digits", [inp])
    after = client.get_inference_statistics("digits")["model_stats"][0]["inference_stats"]["success"]["count"]
    assert after == before + 1


def test_system_shared_memory_inputs_and_outputs(client):
    x = np.arange(64, dtype=np.float32).reshape(1, 8, 8) % 17
    handle_in = shm.create_shared_memory_region("h_in", "/stowage-http-in", x.nbytes)
    handle_out = shm.create_shared_memory_region("h_out", "/stowage-http-out", 40)
    try:
        shm.set_shared_memory_region(handle_in, [x])
        client.register_system_shared_memory("h_in", "/stowage-http-in", x.nbytes)
        client.register_system_shared_memory("h_out", "/stowage-http-out", 40)
        status = {r["name"]: r for r in client.get_system_shared_memory_status()}
        assert status["h_in"]["byte_size"] == x.nbytes
        inp = httpclient.InferInput("image", [1, 8, 8], "FP32")
        inp.set_shared_memory("h_in", x.nbytes)
        out = httpclient.InferRequestedOutput("probabilities")
        out.set_shared_memory("h_out", 40)
        result = client.infer("digits", [inp], outputs=[out])
        assert result.get_output("probabilities")["parameters"]["shared_memory_region"] == "h_out"
        probs = shm.get_contents_as_numpy(handle_out, np.float32, [1, 10])
        plain = httpclient.InferInput("image", [1, 8, 8], "FP32")
        plain.set_data_from_numpy(x)
        np.testing.assert_array_equal(probs, client.infer("digits", [plain]).as_numpy("probabilities"))
    finally:
        client.unregister_system_shared_memory()
        shm.destroy_shared_memory_region(handle_in)
        shm.destroy_shared_memory_region(handle_out)
    assert client.get_system_shared_memory_status() == []


def test_logging_settings(client):
    settings = client.get_log_settings()
    assert settings["log_info"] is True
    assert client.update_log_settings({"log_verbose_level": 1})["log_verbose_level"] == 1
    assert client.update_log_settings({"log_verbose_level": 0})["log_verbose_level"] == 0


def test_bad_requests_are_errors_that_say_why(client):
    inp = httpclient.InferInput("image", [1, 8, 8], "FP32")
    inp.set_data_from_numpy(np.ones((1, 8, 8), dtype=np.float32))
    with pytest.raises(InferenceServerException, match="no_such_model"):
        client.infer("no_such_model", [inp])
    wrong = httpclient.InferInput("pixels", [1, 8, 8], "FP32")
    wrong.set_data_from_numpy(np.ones((1, 8, 8), dtype=np.float32))
    with pytest.raises(InferenceServerException, match="pixels"):
        client.infer("digits", [wrong])
    assert client.is_server_ready()


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
@pytest.mark.parametrize("binary", [False, True])
def test_compressed_requests_answer_as_plain_ones(client, heldout, algorithm, binary):
    """tritonclient's request_compression_algorithm sends Content-Encoding: gzip or deflate."""
    x = images(heldout, 4)
    inp = httpclient.InferInput("image", [4, 8, 8], "FP32")
    inp.set_data_from_numpy(x, binary_data=binary)
    plain = client.infer("digits", [inp])
    packed = client.infer("digits", [inp], request_compression_algorithm=algorithm)
    for name in ("logits", "probabilities", "label"):
        np.testing.assert_array_equal(packed.as_numpy(name), plain.as_numpy(name))


def test_nan_and_infinity_travel_as_triton_writes_them(client):
    """JSON has no NaN or Infinity: Triton reads and writes the bare words, which Python's json takes."""
    inputs = []
    for i in client.get_model_metadata("dtypes")["inputs"]:
        dt = i["datatype"]
        t = httpclient.InferInput(i["name"], [1, 3], dt)
        if dt == "FP64":
            t.set_data_from_numpy(np.array([[np.nan, np.inf, -np.inf]], dtype=np.float64), binary_data=False)
        elif dt == "BYTES":
            t.set_data_from_numpy(np.array([[b"a", b"b", b"c"]], dtype=np.object_), binary_data=True)
        elif dt == "BOOL":
            t.set_data_from_numpy(np.array([[True, False, True]]), binary_data=True)
        else:
            np_type = {"FP16": np.float16, "FP32": np.float32}.get(dt) or np.dtype(dt.lower())
            t.set_data_from_numpy(np.ones((1, 3), dtype=np_type), binary_data=True)
        inputs.append(t)
    result = client.infer("dtypes", inputs, outputs=[httpclient.InferRequestedOutput("out_f64", binary_data=False)])
    out = result.as_numpy("out_f64")
    assert np.isnan(out[0, 0]) and out[0, 1] == np.inf and out[0, 2] == -np.inf


def test_cuda_shared_memory_cleanup_as_perf_analyzer_calls_it(client):
    """perf_analyzer --shared-memory cleans up over HTTP with unregister: nothing registered, a no-op."""
    client.unregister_cuda_shared_memory()
    assert client.get_cuda_shared_memory_status() == []
    assert "binary_tensor_data" in client.get_server_metadata()["extensions"]
