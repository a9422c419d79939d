# The peers' Python environments, made on first use by bench/peers/run.js (or by hand:
# `bash bench/peers/setup.sh`) under .toolchain/peers/ (git-ignored), each with pinned versions:
#   mlserver  MLServer 1.7.1 and onnxruntime; uvloop 0.21 (0.22 and later break MLServer 1.7.1's
#             worker start: "There is no current event loop")
#   pytriton  nvidia-pytriton 0.7.0 (its tritonserver binary) and onnxruntime, on the Python whose
#             libpython Triton's Python stub loads (Debian's /usr/bin/python3 when there is one:
#             a venv of another build of 3.11 fails in the stub's multiprocessing)
#   plots     matplotlib, for the PNGs
# and the load generators, perf_analyzer (tools/install-perf-analyzer.sh) and ghz (tools/install-ghz.sh).
# About 1 GB in all and two minutes on a fast link. Prints nothing when everything is there.
set -euo pipefail
cd "$(dirname "$0")/../.."
PEERS=.toolchain/peers
mkdir -p "$PEERS"

make_env() { # name python requirements...
  local name=$1 python=$2
  shift 2
  local stamp="$PEERS/$name/.installed"
  local want="$*"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then return; fi
  echo "bench/peers: installing $name ($want)" >&2
  rm -rf "${PEERS:?}/$name"
  "$python" -m venv "$PEERS/$name"
  "$PEERS/$name/bin/pip" install --quiet --disable-pip-version-check "$@"
  echo "$want" > "$stamp"
}

system_python=python3
if [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null; then system_python=/usr/bin/python3; fi

make_env mlserver python3 mlserver==1.7.1 uvloop==0.21.0 onnxruntime==1.32.0 numpy
make_env pytriton "$system_python" nvidia-pytriton==0.7.0 onnxruntime==1.32.0 numpy
make_env plots python3 matplotlib==3.11.2

bash tools/install-perf-analyzer.sh >/dev/null
bash tools/install-ghz.sh
