"""tools/export end to end: real PyTorch modules exported to bundles, checked by `node main.js
bundle check`, served by the real server and queried with NVIDIA's tritonclient; the answers must
match PyTorch's within the exporter's tolerance. Also what it must refuse, and its command line.

Runs in .toolchain/export-venv (test/run.sh makes it: Debian's python3-torch through
--system-site-packages, and `pip install ./tools/export`)."""
import pathlib
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import pytest
import torch
import tritonclient.grpc as grpcclient
from torch import nn

from stowage_export import DriftError, ExportError, export_bundle

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "compat"))
from server_process import ROOT, serve, stop_server  # noqa: E402

# The CNN is docs/export.md's example: convolutions, batch norm, residual blocks, pooling.
sys.path.insert(0, str(ROOT / "tools" / "export" / "examples"))
from small_resnet import SmallResNet  # noqa: E402

RTOL, ATOL = 1e-3, 1e-5


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 5))

    def forward(self, x):
        return self.layers(x)


class TwoHeads(nn.Module):
    """Two inputs of different dtypes (features FP32, category ids INT64), two outputs (scores FP32, label INT64)."""

    def __init__(self):
        super().__init__()
        self.dense = nn.Linear(6, 3)
        self.embed = nn.Embedding(10, 3)

    def forward(self, features, ids):
        scores = self.dense(features) + self.embed(ids).sum(1)
        return scores, scores.argmax(1)


def trained_like(module):
    """Random weights, and batch norm statistics that are not the identity, as after training."""
    for m in module.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.2, 0.2)
    return module.eval()


def architectures():
    torch.manual_seed(7)
    return {
        "mlp": (trained_like(MLP()), (torch.randn(4, 20),), None, None),
        "cnn": (trained_like(SmallResNet()), (torch.randn(2, 3, 32, 32),), ["image"], ["scores"]),
        "two_heads": (trained_like(TwoHeads()), (torch.randn(3, 6), torch.randint(0, 10, (3, 4))),
                      ["features", "ids"], ["scores", "label"]),
    }


@pytest.fixture(scope="module")
def repo():
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="stowage-export-"))
    models = architectures()
    for name, (module, example, inputs, outputs) in models.items():
        export_bundle(module, example, tmp / "repo" / name, input_names=inputs, output_names=outputs, rtol=RTOL, atol=ATOL)
    yield tmp, models
    shutil.rmtree(tmp, ignore_errors=True)


def bundle_check(path):
    return subprocess.run(["node", str(ROOT / "main.js"), "bundle", "check", str(path)], capture_output=True, text=True)


def test_exported_bundles_pass_the_servers_checks(repo):
    tmp, models = repo
    for name in models:
        result = bundle_check(tmp / "repo" / name)
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"{name}: ok" in result.stdout


def test_exported_bundles_answer_through_the_server_like_pytorch(repo):
    tmp, models = repo
    server_tmp = pathlib.Path(tempfile.mkdtemp(prefix="stowage-export-server-"))
    proc, address = serve(server_tmp, f"model_repo: {tmp / 'repo'}\ncache_dir: {server_tmp / 'cache'}\n"
                                      "global:\n  runtime:\n    cpu_device_memory_bytes: 134217728\n"
                                      "  endpoints:\n    grpc_port: 0\n    http_port: 0\n    admin_port: 0\n")
    try:
        client = grpcclient.InferenceServerClient(address)
        torch.manual_seed(11)
        for name, (module, example, input_names, output_names) in models.items():
            meta = client.get_model_metadata(name, as_json=True)
            input_names = [t["name"] for t in meta["inputs"]]
            output_names = [t["name"] for t in meta["outputs"]]
            for batch in (1, 5):
                feeds = [torch.randn(batch, *e.shape[1:]) if e.is_floating_point() else torch.randint(0, 10, (batch, *e.shape[1:]))
                         for e in example]
                with torch.no_grad():
                    expected = module(*feeds)
                expected = expected if isinstance(expected, tuple) else (expected,)
                inputs = []
                for n, f in zip(input_names, feeds):
                    arr = f.numpy()
                    inp = grpcclient.InferInput(n, list(arr.shape), "FP32" if arr.dtype == np.float32 else "INT64")
                    inp.set_data_from_numpy(arr)
                    inputs.append(inp)
                result = client.infer(name, inputs)
                for n, want in zip(output_names, expected):
                    got = result.as_numpy(n)
                    want = want.numpy()
                    assert got.shape == want.shape, (name, n)
                    if np.issubdtype(want.dtype, np.floating):
                        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=f"{name}.{n} batch {batch}")
                    else:
                        np.testing.assert_array_equal(got, want, err_msg=f"{name}.{n} batch {batch}")
        client.close()
    finally:
        stop_server(proc, server_tmp)


class ShapeBranch(nn.Module):
    """Python control flow on the batch size: tracing keeps the example's branch, so batch 1 drifts."""

    def forward(self, x):
        if x.shape[0] > 1:
            return x * 2
        return x * -3


def test_outputs_that_drift_from_pytorch_refuse_the_bundle_and_name_the_worst_element(tmp_path):
    with pytest.raises(DriftError) as info:
        export_bundle(ShapeBranch(), torch.randn(2, 4), tmp_path / "drifts")
    message = str(info.value)
    assert "output 'output' at index [" in message and "of a batch of 1" in message, message
    assert info.value.worst.batch == 1 and info.value.worst.difference > info.value.worst.allowed
    assert list(tmp_path.iterdir()) == [], "nothing is written when outputs drift"


class FFT(nn.Module):
    def forward(self, x):
        return torch.fft.rfft(x).abs()


class ToBF16(nn.Module):
    def forward(self, x):
        return x.to(torch.bfloat16)


class ToComplex(nn.Module):
    def forward(self, x):
        return torch.view_as_complex(x.reshape(x.shape[0], -1, 2))


class Total(nn.Module):
    def forward(self, x):
        return x.sum()


@pytest.mark.parametrize("module,kwargs,fragments", [
    (FFT(), {}, ["aten::fft_rfft", "opset version 17"]),
    (ToBF16(), {}, ["'output' is bfloat16", "cast it to float32 or float16"]),
    (ToComplex(), {}, ["'output' is complex64", "KServe protocol cannot carry"]),
    (Total(), {}, ["is a scalar", "batch axis"]),
    (nn.Identity(), {"input_names": ["x"], "output_names": ["x"]}, ["'x' names both an input and an output"]),
    (nn.Identity(), {"input_names": ["a", "a"]}, ["input_names has 2 names, but the module has 1 input"]),
    (nn.Identity(), {"axes": {"output": "nkk"}}, ["axes['output'] = 'nkk'", "has shape [2, 4]; give 2 distinct lower-case letters"]),
])
def test_what_cannot_be_served_is_refused_with_the_fix(tmp_path, module, kwargs, fragments):
    with pytest.raises(ExportError) as info:
        export_bundle(module, torch.randn(2, 4), tmp_path / "refused", **kwargs)
    for f in fragments:
        assert f in str(info.value), str(info.value)
    assert not (tmp_path / "refused").exists()


FACTORY = '''
import torch
from torch import nn

def make():
    torch.manual_seed(3)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).eval()
'''


def test_the_command_line_writes_a_bundle_with_hooks_that_bundle_create_can_remake(tmp_path):
    (tmp_path / "factory.py").write_text(FACTORY)
    exe = pathlib.Path(sys.executable).with_name("stowage-export")
    result = subprocess.run([str(exe), f"{tmp_path / 'factory.py'}:make", "--example-shape", "3,4", "--out",
                             str(tmp_path / "repo" / "tiny"), "--hooks", "--input-names", "x", "--output-names", "y",
                             "--batch-sizes", "1,4"], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ONNX Runtime matches PyTorch" in result.stdout
    bundle = tmp_path / "repo" / "tiny"
    assert sorted(p.name for p in bundle.iterdir()) == ["manifest.yaml", "model.js", "model.onnx"]
    manifest = (bundle / "manifest.yaml").read_text()
    assert "compiled_batch_sizes: [1, 4]" in manifest and "client_inputs:" in manifest
    check = bundle_check(bundle)
    assert check.returncode == 0, check.stdout + check.stderr

    # The exported file denotes its axes, so `bundle create` remakes the bundle with no flags.
    again = subprocess.run(["node", str(ROOT / "main.js"), "bundle", "create", str(bundle / "model.onnx"),
                            "--out", str(tmp_path / "other" / "tiny_again")], capture_output=True, text=True)
    assert again.returncode == 0, again.stdout + again.stderr
    assert 'shape: "nc", dims: { c: 4 }' in (tmp_path / "other" / "tiny_again" / "manifest.yaml").read_text()

    # A failing export exits non-zero with the reason on stderr, and writes nothing.
    refused = subprocess.run([str(exe), f"{tmp_path / 'factory.py'}:make", "--example-shape", "3,4", "--out",
                              str(tmp_path / "repo" / "tiny")], capture_output=True, text=True)
    assert refused.returncode == 1 and "already exists" in refused.stderr, refused.stderr
