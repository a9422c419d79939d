"""Triton's own system shared-memory utilities (tritonclient.utils.shared_memory), unchanged:
inputs in shared memory, outputs in shared memory, both, and the error cases."""
import os

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.utils.shared_memory as shm

from helpers import expect_error


@pytest.fixture()
def client(server):
    c = grpcclient.InferenceServerClient(server)
    c.unregister_system_shared_memory()
    yield c
    c.unregister_system_shared_memory()
    c.close()


@pytest.fixture()
def regions():
    made = []

    def make(name, byte_size):
        handle = shm.create_shared_memory_region(name, f"/stowage_test_{os.getpid()}_{name}", byte_size)
        made.append(handle)
        return handle, f"/stowage_test_{os.getpid()}_{name}"

    yield make
    for handle in made:
        shm.destroy_shared_memory_region(handle)


def images(heldout, n):
    return np.asarray(heldout["images"][:n], dtype=np.float32).reshape(n, 8, 8)


def test_inputs_in_shared_memory(client, regions, heldout):
    x = images(heldout, 4)
    handle, key = regions("in", x.nbytes)
    shm.set_shared_memory_region(handle, [x])
    client.register_system_shared_memory("in", key, x.nbytes)
    image = grpcclient.InferInput("image", list(x.shape), "FP32")
    image.set_shared_memory("in", x.nbytes)
    result = client.infer("digits", [image], outputs=[grpcclient.InferRequestedOutput("label")])
    inline = grpcclient.InferInput("image", list(x.shape), "FP32")
    inline.set_data_from_numpy(x)
    assert (result.as_numpy("label") == client.infer("digits", [inline]).as_numpy("label")).all()


def test_outputs_in_shared_memory(client, regions, heldout):
    x = images(heldout, 3)
    handle, key = regions("out", 3 * 10 * 4 + 3 * 8)
    client.register_system_shared_memory("out", key, 3 * 10 * 4 + 3 * 8)
    image = grpcclient.InferInput("image", list(x.shape), "FP32")
    image.set_data_from_numpy(x)
    probs = grpcclient.InferRequestedOutput("probabilities")
    probs.set_shared_memory("out", 3 * 10 * 4)
    label = grpcclient.InferRequestedOutput("label")
    label.set_shared_memory("out", 3 * 8, offset=3 * 10 * 4)
    logits = grpcclient.InferRequestedOutput("logits")  # inline, after two shared-memory outputs
    result = client.infer("digits", [image], outputs=[probs, label, logits])
    got_probs = shm.get_contents_as_numpy(handle, np.float32, [3, 10])
    got_label = shm.get_contents_as_numpy(handle, np.int64, [3], offset=3 * 10 * 4)
    np.testing.assert_allclose(got_probs.sum(axis=1), 1.0, rtol=1e-5)
    assert (got_label == got_probs.argmax(axis=1)).all()
    assert result.get_output("probabilities").shape == [3, 10]
    assert result.as_numpy("logits").shape == (3, 10)
    assert (result.as_numpy("logits").argmax(axis=1) == got_label).all()


def test_inputs_and_outputs_in_one_region_every_datatype_through_the_identity_model(client, regions):
    arrays = {
        "f32": np.arange(6, dtype=np.float32).reshape(2, 3) * 1.5,
        "i64": np.array([[-5, 0, 5], [2**62, -(2**62), 7]], dtype=np.int64),
        "u8": np.array([[0, 128, 255], [1, 2, 3]], dtype=np.uint8),
        "f16": np.array([[1.5, -2, 0.25], [3, 4, 5]], dtype=np.float16),
    }
    total = sum(a.nbytes for a in arrays.values()) * 2
    handle, key = regions("both", total)
    client.register_system_shared_memory("both", key, total)
    offset = 0
    inputs, outputs, places = [], [], {}
    for name, a in arrays.items():
        shm.set_shared_memory_region(handle, [a], offset=offset)
        inp = grpcclient.InferInput(f"in_{name}", list(a.shape), {"f32": "FP32", "i64": "INT64", "u8": "UINT8", "f16": "FP16"}[name])
        inp.set_shared_memory("both", a.nbytes, offset=offset)
        inputs.append(inp)
        out = grpcclient.InferRequestedOutput(f"out_{name}")
        out.set_shared_memory("both", a.nbytes, offset=offset + total // 2)
        outputs.append(out)
        places[name] = offset + total // 2
        offset += a.nbytes
    # The dtypes model needs every input: the others go inline.
    for name, datatype, dtype in [("bool", "BOOL", np.bool_), ("u16", "UINT16", np.uint16), ("u32", "UINT32", np.uint32),
                                  ("u64", "UINT64", np.uint64), ("i8", "INT8", np.int8), ("i16", "INT16", np.int16),
                                  ("i32", "INT32", np.int32), ("f64", "FP64", np.float64)]:
        inp = grpcclient.InferInput(f"in_{name}", [2, 3], datatype)
        inp.set_data_from_numpy(np.ones((2, 3), dtype=dtype))
        inputs.append(inp)
    b = grpcclient.InferInput("in_bytes", [2, 3], "BYTES")
    b.set_data_from_numpy(np.array([[b"a", b"b", b"c"], [b"d", b"e", b"f"]], dtype=np.object_))
    inputs.append(b)
    client.infer("dtypes", inputs, outputs=outputs)
    for name, a in arrays.items():
        got = shm.get_contents_as_numpy(handle, a.dtype, list(a.shape), offset=places[name])
        assert (got == a).all(), name


def test_register_status_unregister_and_their_errors(client, regions):
    handle, key = regions("r", 1024)
    client.register_system_shared_memory("r", key, 512, offset=256)
    status = client.get_system_shared_memory_status(as_json=True)["regions"]["r"]
    assert status["key"] == key and int(status["offset"]) == 256 and int(status["byte_size"]) == 512
    expect_error(lambda: client.register_system_shared_memory("r", key, 16), "StatusCode.ALREADY_EXISTS", '"r" is already registered')
    expect_error(lambda: client.register_system_shared_memory("missing", "/stowage_no_such_key", 16), "StatusCode.NOT_FOUND", "/stowage_no_such_key")
    expect_error(lambda: client.register_system_shared_memory("big", key, 2048), "StatusCode.INVALID_ARGUMENT", "holds 1024 bytes")
    expect_error(lambda: client.register_system_shared_memory("escape", "/../etc/passwd", 16), "StatusCode.INVALID_ARGUMENT", "not a POSIX shared-memory name")
    expect_error(lambda: client.get_system_shared_memory_status("nope"), "StatusCode.NOT_FOUND", '"nope"')
    client.unregister_system_shared_memory("nope")  # an unknown name is not an error
    client.unregister_system_shared_memory("r")
    assert client.get_system_shared_memory_status(as_json=True).get("regions", {}) == {}


def test_requests_naming_bad_regions_are_refused(client, regions, heldout):
    x = images(heldout, 1)
    handle, key = regions("small", 256)
    client.register_system_shared_memory("small", key, 256)
    unknown = grpcclient.InferInput("image", [1, 8, 8], "FP32")
    unknown.set_shared_memory("ghost", 256)
    expect_error(lambda: client.infer("digits", [unknown]), "StatusCode.NOT_FOUND", '"ghost"')
    outside = grpcclient.InferInput("image", [1, 8, 8], "FP32")
    outside.set_shared_memory("small", 256, offset=16)
    expect_error(lambda: client.infer("digits", [outside]), "StatusCode.INVALID_ARGUMENT", "outside region")
    wrong_size = grpcclient.InferInput("image", [1, 8, 8], "FP32")
    wrong_size.set_shared_memory("small", 128)
    expect_error(lambda: client.infer("digits", [wrong_size]), "StatusCode.INVALID_ARGUMENT", "expected shared_memory_byte_size 256")
    image = grpcclient.InferInput("image", [1, 8, 8], "FP32")
    image.set_data_from_numpy(x)
    too_small = grpcclient.InferRequestedOutput("logits")
    too_small.set_shared_memory("small", 8)
    expect_error(lambda: client.infer("digits", [image], outputs=[too_small]), "StatusCode.INVALID_ARGUMENT", "less than the 40 bytes")
    assert client.infer("digits", [image]).as_numpy("label").shape == (1,)
