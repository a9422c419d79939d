"""NVIDIA's Python client, unchanged, through a gateway-only process in front of a node."""
import queue

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from helpers import expect_error, images_input


@pytest.fixture()
def client(gateway):
    c = grpcclient.InferenceServerClient(gateway)
    yield c
    c.close()


def test_the_gateway_serves_the_nodes_models_with_their_metadata(client):
    assert client.is_server_live() and client.is_server_ready()
    assert client.get_server_metadata(as_json=True)["name"] == "stowage-gateway"
    states = {m["name"]: m["state"] for m in client.get_model_repository_index(as_json=True)["models"]}
    assert states["digits"] == "READY" and states["severity_grader"] == "READY"
    assert client.is_model_ready("digits")
    md = client.get_model_metadata("digits", as_json=True)
    assert md["inputs"] == [{"name": "image", "datatype": "FP32", "shape": ["-1", "8", "8"]}]
    assert client.get_model_config("digits", as_json=True)["config"]["max_batch_size"] == 32


def test_held_out_digits_through_the_gateway_score_as_on_the_node(client, heldout):
    images, labels = heldout["images"], np.array(heldout["labels"])
    predicted = np.concatenate([client.infer("digits", [images_input(images[i:i + 32])],
                                             outputs=[grpcclient.InferRequestedOutput("label")]).as_numpy("label")
                                for i in range(0, len(images), 32)])
    assert round(float((predicted == labels).mean()), 4) == heldout["accuracy"]


def test_streaming_and_errors_through_the_gateway(client, heldout):
    answers = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        for i in range(4):
            client.async_stream_infer("digits", [images_input(heldout["images"][i:i + 1])], request_id=f"g{i}")
        client.async_stream_infer("nope", [images_input(heldout["images"][:1])], request_id="bad")
        got = [answers.get(timeout=30) for _ in range(5)]
    finally:
        client.stop_stream()
    ok = sorted(r.get_response().id for r, e in got if e is None)
    errs = [e.message() for r, e in got if e is not None]
    assert ok == ["g0", "g1", "g2", "g3"]
    assert len(errs) == 1 and 'unknown model "nope"' in errs[0]
    expect_error(lambda: client.infer("nope", [images_input(heldout["images"][:1])]), "StatusCode.NOT_FOUND", 'unknown model "nope"')
    expect_error(lambda: client.register_system_shared_memory("r", "/k", 64), "StatusCode.INVALID_ARGUMENT", "shared memory is local to one machine")
