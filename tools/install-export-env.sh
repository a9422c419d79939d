#!/usr/bin/env bash
# The exporter's environment, for test/export and for trying tools/export: a virtual environment
# in .toolchain/export-venv (git-ignored) holding tools/export, ONNX, ONNX Runtime, pytest and
# tritonclient, over a Python that has PyTorch. Prints the venv's python. Exits 3 when PyTorch is
# missing and this machine gives no way to install it (no apt-get, or neither root nor sudo): the
# caller skips test/export, saying so; 1 when an install fails.
#
# PyTorch comes from Debian's python3-torch (CPU-only, 1.13; installs in about a minute) for the
# system Python, which the venv sees through --system-site-packages: PyPI's default torch is a
# multi-GB CUDA build. STOWAGE_TORCH_PYTHON names another Python that already has torch.
set -euo pipefail
cd "$(dirname "$0")/.."

python=${STOWAGE_TORCH_PYTHON:-/usr/bin/python3}
venv="$PWD/.toolchain/export-venv"

if ! "$python" -c 'import torch' >/dev/null 2>&1; then
  if [ -z "${STOWAGE_TORCH_PYTHON:-}" ] && command -v apt-get >/dev/null; then
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then
      if sudo -n true 2>/dev/null; then sudo="sudo -n"; else
        echo "PyTorch is missing: run 'sudo apt-get install python3-torch' (or set STOWAGE_TORCH_PYTHON to a Python with torch)" >&2
        exit 3
      fi
    fi
    echo "installing Debian's python3-torch (CPU) for $python" >&2
    if ! apt-cache show python3-torch >/dev/null 2>&1; then $sudo apt-get update -qq >&2; fi
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-torch >&2 || exit 1
  elif [ -n "${STOWAGE_TORCH_PYTHON:-}" ]; then
    echo "STOWAGE_TORCH_PYTHON=$python has no torch" >&2
    exit 1
  else
    echo "PyTorch is missing for $python and there is no apt-get here: install it, or set STOWAGE_TORCH_PYTHON to a Python that has it" >&2
    exit 3
  fi
fi

if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv --system-site-packages "$venv" >&2
fi
# pip builds tools/export in place (its build/ and *.egg-info are git-ignored).
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r test/export/requirements.txt ./tools/export >&2
echo "$venv/bin/python"
