"""How test/gpu/test_cuda_shm_tritonclient.py gets NVIDIA's CUDA shared-memory client, apart so that
its rules are tested without a GPU (test/compat/test_cuda_client.py):

- whether a GPU is here is asked of the driver itself (libcuda.so.1 through ctypes), not of
  cuda-python: a machine whose cuda-python is missing or of another generation still has a GPU,
  and then the client failing to import is a failure, said loudly, not a reason to skip;
- tritonclient 2.73's CUDA shared memory imports `cuda.bindings.runtime` (cuda-python 12.6 on); an
  older cuda-python has the same functions as `cuda.cudart`, which is aliased to the new name.
"""
import ctypes
import importlib
import sys


def gpu_count():
    """GPUs the CUDA driver sees (cuInit, cuDeviceGetCount); 0 without a driver."""
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    if driver.cuInit(0) != 0:
        return 0
    count = ctypes.c_int(0)
    return count.value if driver.cuDeviceGetCount(ctypes.byref(count)) == 0 else 0


def alias_old_cudart():
    """Make `cuda.bindings.runtime` importable from an older cuda-python's `cuda.cudart`; whether it did."""
    try:
        importlib.import_module("cuda.bindings.runtime")
        return False
    except ImportError:
        pass
    try:
        cudart = importlib.import_module("cuda.cudart")
    except ImportError:
        return False
    bindings = sys.modules.setdefault("cuda.bindings", type(sys)("cuda.bindings"))
    bindings.runtime = cudart
    sys.modules["cuda.bindings.runtime"] = cudart
    return True


def import_cudashm():
    """tritonclient's CUDA shared-memory module, or the error its import raised."""
    alias_old_cudart()
    try:
        return importlib.import_module("tritonclient.utils.cuda_shared_memory"), None
    except (ImportError, RuntimeError) as err:  # tritonclient says RuntimeError when cuda-python is missing
        return None, err


def import_failure(err, gpus):
    """What the suite does when the client cannot be imported: ("fail", why) with a GPU here, ("skip", why) without."""
    if gpus > 0:
        return ("fail", f"{gpus} GPU(s) here, but tritonclient's CUDA shared memory cannot be imported: {err} "
                        "(install cuda-python of CUDA 12.6 or later beside tritonclient; see docs/gpu.md)")
    return ("skip", f"no GPU that the CUDA driver sees, and tritonclient's CUDA shared memory cannot be imported: {err}")
