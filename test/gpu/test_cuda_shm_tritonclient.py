"""CUDA shared memory with NVIDIA's own client: tritonclient.utils.cuda_shared_memory makes the
regions (cudaMalloc in this process, through cuda-python), tritonclient.grpc and .http register
them and infer with the digits example's input and outputs in them; the answers must equal the
same request's inline ones. Skipped, saying why, without a GPU; with one, a client that cannot be
imported (tritonclient or cuda-python missing, or of another generation) fails the suite, saying
why (cuda_client.py), rather than skipping it and letting the step pass.

    python3 -m pytest -q test/gpu/test_cuda_shm_tritonclient.py   (a GPU machine, backend cuda installed)
"""
import pathlib
import shutil
import sys
import tempfile

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "compat"))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from server_process import serve_entry, stop_server  # noqa: E402
from cuda_client import gpu_count, import_cudashm, import_failure  # noqa: E402

GPUS = gpu_count()
cudashm, IMPORT_ERROR = import_cudashm()
if cudashm is None:
    action, why = import_failure(IMPORT_ERROR, GPUS)
    if action == "skip":
        pytest.skip(why, allow_module_level=True)
    pytest.fail(why, pytrace=False)
grpcclient = pytest.importorskip("tritonclient.grpc")
try:  # tritonclient's HTTP client needs geventhttpclient too: without it, gRPC only
    import tritonclient.http as httpclient
except ImportError:
    httpclient = None

ROOT = pathlib.Path(__file__).resolve().parents[2]


if GPUS == 0:
    pytest.skip("no GPU that the CUDA driver sees", allow_module_level=True)


@pytest.fixture(scope="module")
def serving():
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="stowage-cudashm-"))
    shutil.copytree(ROOT / "bundles" / "digits", tmp / "repo" / "digits")
    proc, entry = serve_entry(tmp, f"model_repo: {tmp / 'repo'}\ncache_dir: {tmp / 'cache'}\n"
                                   "global:\n  runtime:\n    backend: cuda\n    cuda: {tf32: false}\n"
                                   "  endpoints:\n    grpc_port: 0\n    http_port: 0\n    admin_port: 0\n")
    try:
        yield entry
    finally:
        stop_server(proc, tmp)


IMAGES = (np.arange(3 * 64, dtype=np.float32).reshape(3, 8, 8) % 17)


def _inline(client, module):
    x = module.InferInput("image", list(IMAGES.shape), "FP32")
    x.set_data_from_numpy(IMAGES)
    result = client.infer("digits", [x], outputs=[module.InferRequestedOutput("probabilities"), module.InferRequestedOutput("label")])
    return result.as_numpy("probabilities"), result.as_numpy("label")


def assert_in_region(result, protocol, name, shape):
    """The output is listed with its shape and carries no bytes of its own: as Triton answers, its
    data is in the region (gRPC: an empty raw_output_contents entry, so the later entries keep their
    places; tritonclient's as_numpy then fails on it, against Triton too, so it is not asked)."""
    output = result.get_output(name)
    assert output is not None, f"{name} is listed"
    if protocol == "grpc":
        assert list(output.shape) == shape
        response = result.get_response()
        index = [o.name for o in response.outputs].index(name)
        assert index >= len(response.raw_output_contents) or len(response.raw_output_contents[index]) == 0, f"{name}: nothing inline"
    else:
        assert output["shape"] == shape
        assert "data" not in output and "binary_data_size" not in output.get("parameters", {}), f"{name}: nothing inline"


@pytest.mark.parametrize("protocol", ["grpc", pytest.param("http", marks=pytest.mark.skipif(httpclient is None, reason="tritonclient.http needs geventhttpclient"))])
def test_inputs_and_outputs_in_cuda_shared_memory_answer_as_inline(serving, protocol):
    module = grpcclient if protocol == "grpc" else httpclient
    client = module.InferenceServerClient(serving["grpc"] if protocol == "grpc" else serving["http"])
    assert "cuda_shared_memory" in (client.get_server_metadata().extensions if protocol == "grpc" else client.get_server_metadata()["extensions"])
    want_probs, want_label = _inline(client, module)
    client.unregister_cuda_shared_memory()
    regions = {
        "images": cudashm.create_shared_memory_region(f"{protocol}_images", IMAGES.nbytes, 0),
        "probs": cudashm.create_shared_memory_region(f"{protocol}_probs", want_probs.nbytes, 0),
        "label": cudashm.create_shared_memory_region(f"{protocol}_label", want_label.nbytes, 0),
    }
    try:
        cudashm.set_shared_memory_region(regions["images"], [IMAGES])
        sizes = {"images": IMAGES.nbytes, "probs": want_probs.nbytes, "label": want_label.nbytes}
        for name, handle in regions.items():
            client.register_cuda_shared_memory(f"{protocol}_{name}", cudashm.get_raw_handle(handle), 0, sizes[name])
        status = client.get_cuda_shared_memory_status()
        names = {r.name for r in status.regions.values()} if protocol == "grpc" else {r["name"] for r in status}
        assert names == {f"{protocol}_{n}" for n in regions}
        x = module.InferInput("image", list(IMAGES.shape), "FP32")
        x.set_shared_memory(f"{protocol}_images", IMAGES.nbytes)
        probs = module.InferRequestedOutput("probabilities")
        probs.set_shared_memory(f"{protocol}_probs", want_probs.nbytes)
        label = module.InferRequestedOutput("label")
        label.set_shared_memory(f"{protocol}_label", want_label.nbytes)
        result = client.infer("digits", [x], outputs=[probs, label])
        for name, want in (("probabilities", want_probs), ("label", want_label)):
            assert_in_region(result, protocol, name, list(want.shape))
        got_probs = cudashm.get_contents_as_numpy(regions["probs"], np.float32, list(want_probs.shape))
        got_label = cudashm.get_contents_as_numpy(regions["label"], np.int64, list(want_label.shape))
        np.testing.assert_allclose(got_probs, want_probs, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(got_label, want_label)
    finally:
        client.unregister_cuda_shared_memory()
        for handle in regions.values():
            cudashm.destroy_shared_memory_region(handle)
    assert (len(client.get_cuda_shared_memory_status().regions) if protocol == "grpc" else len(client.get_cuda_shared_memory_status())) == 0
