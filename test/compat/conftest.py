"""Start the real server (node main.js) for the compatibility suite, on free ports."""
import json
import pathlib
import shutil
import subprocess
import tempfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def server():
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="stowage-compat-"))
    repo = tmp / "repo"
    shutil.copytree(ROOT / "bundles", repo)
    shutil.copytree(ROOT / "test" / "fixtures" / "models" / "dtypes", repo / "dtypes")
    (tmp / "node.yaml").write_text(
        f"model_repo: {repo}\ncache_dir: {tmp / 'compile-cache'}\n"
        "global:\n  runtime:\n    cpu_device_memory_bytes: 134217728\n"
        "  endpoints:\n    grpc_port: 0\n    admin_port: 0\n")
    proc = subprocess.Popen(["node", str(ROOT / "main.js"), str(tmp / "node.yaml")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    address = None
    try:
        for line in proc.stdout:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("msg") == "serving":
                address = entry["grpc"]
                break
        if address is None:
            raise RuntimeError(f"server exited before serving: {proc.stderr.read()}")
        yield address
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="session")
def heldout():
    return json.loads((ROOT / "test" / "fixtures" / "digits_heldout.json").read_text())
