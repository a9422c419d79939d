"""Start the real server (node main.js) for the compatibility suite, on free ports."""
import json
import pathlib
import shutil
import subprocess
import tempfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _serve(tmp, node_yaml):
    """Start `node main.js` on tmp/node.yaml; returns the process and its gRPC address once it serves."""
    (tmp / "node.yaml").write_text(node_yaml)
    proc = subprocess.Popen(["node", str(ROOT / "main.js"), str(tmp / "node.yaml")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stdout:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("msg") == "serving":
            return proc, entry["grpc"]
    proc.terminate()
    raise RuntimeError(f"server exited before serving: {proc.stderr.read()}")


def _stop(proc, tmp):
    proc.terminate()
    proc.wait(timeout=30)
    shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="session")
def server():
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="stowage-compat-"))
    repo = tmp / "repo"
    shutil.copytree(ROOT / "bundles", repo)
    shutil.copytree(ROOT / "test" / "fixtures" / "models" / "dtypes", repo / "dtypes")
    proc, address = _serve(tmp, f"model_repo: {repo}\ncache_dir: {tmp / 'compile-cache'}\n"
                                "global:\n  runtime:\n    cpu_device_memory_bytes: 134217728\n"
                                "  endpoints:\n    grpc_port: 0\n    admin_port: 0\n")
    try:
        yield address
    finally:
        _stop(proc, tmp)


@pytest.fixture(scope="session")
def gateway(server):
    """A gateway-only process in front of the session's server."""
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="stowage-gateway-"))
    proc, address = _serve(tmp, f'gateway:\n  endpoints: ["{server}"]\n  health_seconds: 0.5\n'
                                "global:\n  endpoints:\n    grpc_port: 0\n    admin_port: 0\n")
    try:
        yield address
    finally:
        _stop(proc, tmp)


@pytest.fixture(scope="session")
def heldout():
    return json.loads((ROOT / "test" / "fixtures" / "digits_heldout.json").read_text())
