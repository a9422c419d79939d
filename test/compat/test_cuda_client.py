"""The rules test/gpu/test_cuda_shm_tritonclient.py gets NVIDIA's CUDA shared-memory client by
(test/gpu/cuda_client.py), checked here without a GPU: with a GPU an import failure fails the
suite; an older cuda-python's `cuda.cudart` stands in for `cuda.bindings.runtime`; the driver is
asked for GPUs without cuda-python."""
import pathlib
import sys
import types

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "gpu"))
import cuda_client  # noqa: E402


def test_with_a_gpu_an_import_failure_fails_loudly_and_without_one_it_skips():
    err = RuntimeError("CUDA shared memory utilities require Python package 'cuda-python'")
    action, why = cuda_client.import_failure(err, 1)
    assert action == "fail"
    assert "1 GPU(s) here" in why and "cuda-python" in why
    action, why = cuda_client.import_failure(err, 0)
    assert action == "skip"
    assert "no GPU" in why


def test_an_older_cuda_python_is_aliased_to_the_new_module_name(monkeypatch):
    for name in [m for m in sys.modules if m == "cuda" or m.startswith("cuda.")]:
        monkeypatch.delitem(sys.modules, name)
    old = types.ModuleType("cuda.cudart")
    old.cudaGetDeviceCount = lambda: (0, 0)
    package = types.ModuleType("cuda")
    package.__path__ = []  # a package, with only the old module in it
    package.cudart = old
    monkeypatch.setitem(sys.modules, "cuda", package)
    monkeypatch.setitem(sys.modules, "cuda.cudart", old)
    assert cuda_client.alias_old_cudart() is True
    import cuda.bindings.runtime as runtime  # noqa: E402  (what tritonclient 2.73 imports)
    assert runtime is old
    assert cuda_client.alias_old_cudart() is False, "the new name is there now: nothing to do"
    # The stand-ins leave with the test: no later test may import them as cuda-python.
    for name in ("cuda.bindings", "cuda.bindings.runtime"):
        sys.modules.pop(name, None)


def test_gpus_are_asked_of_the_driver_without_cuda_python():
    assert cuda_client.gpu_count() >= 0  # 0 here (no libcuda.so.1); a count on a GPU machine
