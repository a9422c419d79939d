"""Start the real server (node main.js) for the compatibility suite, on free ports."""
import json
import pathlib
import shutil
import tempfile

import pytest
from server_process import serve as _serve, serve_entry as _serve_entry, stop_server as _stop

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def serving():
    """The session's server: its "serving" log line (grpc, http and admin addresses)."""
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="stowage-compat-"))
    repo = tmp / "repo"
    shutil.copytree(ROOT / "bundles", repo)
    shutil.copytree(ROOT / "test" / "fixtures" / "models" / "dtypes", repo / "dtypes")
    proc, entry = _serve_entry(tmp, f"model_repo: {repo}\ncache_dir: {tmp / 'compile-cache'}\n"
                                     "global:\n  runtime:\n    cpu_device_memory_bytes: 134217728\n"
                                     "  endpoints:\n    grpc_port: 0\n    http_port: 0\n    admin_port: 0\n")
    try:
        yield entry
    finally:
        _stop(proc, tmp)


@pytest.fixture(scope="session")
def server(serving):
    """The session's server's gRPC address."""
    return serving["grpc"]


@pytest.fixture(scope="session")
def rest(serving):
    """The session's server's REST address (host:port)."""
    return serving["http"]


@pytest.fixture(scope="session")
def gateway(server):
    """A gateway-only process in front of the session's server."""
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="stowage-gateway-"))
    proc, address = _serve(tmp, f'gateway:\n  endpoints: ["{server}"]\n  health_seconds: 0.5\n'
                                "global:\n  endpoints:\n    grpc_port: 0\n    http_port: 0\n    admin_port: 0\n")
    try:
        yield address
    finally:
        _stop(proc, tmp)


@pytest.fixture(scope="session")
def heldout():
    return json.loads((ROOT / "test" / "fixtures" / "digits_heldout.json").read_text())
