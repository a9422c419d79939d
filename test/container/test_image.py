"""The image built from the repository's Dockerfile (tools/container/build-image.sh), run with
podman as a user runs it (read-only root filesystem, the repository mounted read-only, a volume
for the compile cache) and queried with NVIDIA's tritonclient: the example's held-out accuracy,
/readyz, /metrics, and SIGTERM draining the requests in flight.

test/run.sh runs this with STOWAGE_TEST_IMAGE set, after building the image; without podman it
skips the whole suite, saying so."""
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "test" / "compat"))
from helpers import images_input  # noqa: E402

IMAGE = os.environ.get("STOWAGE_TEST_IMAGE", "")
PODMAN = ["podman", "--runtime", "runc"]
ENV = {**os.environ, "CONTAINERS_CONF": str(ROOT / "tools" / "container" / "containers.conf")}

pytestmark = pytest.mark.skipif(not IMAGE, reason="STOWAGE_TEST_IMAGE is not set: build it with tools/container/build-image.sh")

# A bundle whose preprocess takes 1.5 s: requests to it are still in flight when SIGTERM comes.
SLOW_HOOK = """export async function preprocess(inputs) {
  await new Promise((resolve) => setTimeout(resolve, 1500));
  return inputs;
}
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def podman(*args, check=True):
    return subprocess.run(PODMAN[:1] + list(args), capture_output=True, text=True, env=ENV, check=check)


class Container:
    """One container of the image on the host network, listening on 127.0.0.1 only, on free ports."""

    def __init__(self, repo):
        self.name = f"stowage-test-{uuid.uuid4().hex[:8]}"
        self.volume = f"{self.name}-cache"
        self.grpc, self.rest, self.admin = free_port(), free_port(), free_port()
        subprocess.run(PODMAN + [
            "run", "-d", "--name", self.name, "--network", "host", "--read-only",
            "-v", f"{repo}:/models:ro", "-v", f"{self.volume}:/var/cache/stowage",
            "-e", "INFERENCE_SERVER_ENDPOINTS_HOST=127.0.0.1",
            "-e", f"INFERENCE_SERVER_ENDPOINTS_GRPC_PORT={self.grpc}",
            "-e", f"INFERENCE_SERVER_ENDPOINTS_HTTP_PORT={self.rest}",
            "-e", f"INFERENCE_SERVER_ENDPOINTS_ADMIN_PORT={self.admin}",
            "-e", "INFERENCE_SERVER_RUNTIME_CPU_DEVICE_MEMORY_BYTES=268435456",
            IMAGE,
        ], capture_output=True, text=True, env=ENV, check=True)
        deadline = time.time() + 120
        while not self.ready():
            if time.time() > deadline or self.state() != "running":
                raise RuntimeError(f"the container did not become ready:\n{self.logs()}")
            time.sleep(0.3)

    def http(self, path):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.admin}{path}", timeout=2) as res:
                return res.status, res.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()

    def ready(self):
        try:
            return self.http("/readyz")[0] == 200
        except OSError:
            return False

    def state(self):
        return podman("inspect", self.name, "--format", "{{.State.Status}}", check=False).stdout.strip()

    def exit_code(self):
        return int(podman("inspect", self.name, "--format", "{{.State.ExitCode}}").stdout.strip())

    def logs(self):
        result = podman("logs", self.name, check=False)
        return result.stdout + result.stderr

    def remove(self):
        podman("rm", "-f", self.name, check=False)
        podman("volume", "rm", "-f", self.volume, check=False)


@pytest.fixture(scope="module")
def repo():
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="stowage-container-"))
    shutil.copytree(ROOT / "bundles", tmp / "repo")
    slow = tmp / "repo" / "slow_digits"
    shutil.copytree(ROOT / "bundles" / "digits", slow)
    manifest = (slow / "manifest.yaml").read_text().replace('name: "digits"', 'name: "slow_digits"')
    client = manifest.split("executable_inputs:")[1].split("executable_outputs:")[0]
    (slow / "manifest.yaml").write_text(manifest + "client_inputs:" + client)
    (slow / "model.js").write_text(SLOW_HOOK)
    os.chmod(tmp, 0o755)
    yield tmp / "repo"
    shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def container(repo):
    c = Container(repo)
    yield c
    c.remove()


def test_the_image_serves_the_examples_and_reports_ready(container):
    status, body = container.http("/readyz")
    assert status == 200
    models = {m["name"]: m["state"] for m in json.loads(body)["models"]}
    assert models["digits"] == "READY" and models["slow_digits"] == "READY" and set(models.values()) == {"READY"}
    assert container.http("/healthz")[0] == 200


def test_held_out_digits_accuracy_through_the_container_with_tritonclient(container):
    data = json.loads((ROOT / "test" / "fixtures" / "digits_heldout.json").read_text())
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{container.grpc}")
    assert client.is_server_ready() and client.is_model_ready("digits")
    predicted = []
    for at in range(0, len(data["images"]), 32):
        result = client.infer("digits", [images_input(data["images"][at:at + 32])], outputs=[grpcclient.InferRequestedOutput("label")])
        predicted += result.as_numpy("label").tolist()
    accuracy = np.mean(np.array(predicted) == np.array(data["labels"]))
    assert len(predicted) == 450 and accuracy >= 0.973, accuracy
    client.close()

    status, metrics = container.http("/metrics")
    assert status == 200
    assert 'nv_inference_request_success{model="digits",version="1"} 15' in metrics, metrics[:2000]
    assert "stowage_thread_heap_bytes" in metrics


def test_sigterm_finishes_the_requests_in_flight_then_exits_zero(repo):
    c = Container(repo)
    try:
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{c.grpc}")
        data = json.loads((ROOT / "test" / "fixtures" / "digits_heldout.json").read_text())
        results = []
        for i in range(6):
            client.async_infer("slow_digits", [images_input(data["images"][i:i + 1])],
                               callback=lambda result, error: results.append((result, error)),
                               outputs=[grpcclient.InferRequestedOutput("label")])
        time.sleep(0.5)  # all six are in their 1.5 s preprocess
        podman("kill", "--signal", "TERM", c.name)
        deadline = time.time() + 40
        # Podman shows "stopped" between the process's exit and its cleanup (exit code recorded):
        # wait for "exited" itself.
        while c.state() != "exited" and time.time() < deadline:
            time.sleep(0.2)
        assert c.state() == "exited", c.logs()
        assert c.exit_code() == 0, c.logs()
        errors = [str(e) for _, e in results if e is not None]
        assert errors == [] and len(results) == 6, errors
        assert sorted(r.as_numpy("label")[0] for r, _ in results) == sorted(data["labels"][:6])
        stopping = [json.loads(line) for line in c.logs().splitlines() if '"stopping: finishing in-flight requests"' in line]
        assert stopping and stopping[0]["inflight"] == 6 and stopping[0]["signal"] == "SIGTERM", c.logs()[-2000:]
        assert '"msg":"stopped"' in c.logs()
        client.close()
    finally:
        c.remove()
