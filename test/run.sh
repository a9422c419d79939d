#!/usr/bin/env bash
# The test command (`npm test`): build, type-check the tests, run the ava suites (unit and integration
# against the real server), then the compatibility suite with NVIDIA's Python
# tritonclient in a project-local virtual environment, and print one total.
set -uo pipefail
cd "$(dirname "$0")/.."

# The Node the tests need: Node 24, fetched into .toolchain/ when the machine's is older (as .ci/run does).
# shellcheck source=../tools/use-node.sh
. tools/use-node.sh || { echo "0 passed, 1 failed"; exit 1; }
echo "tests run on node $(node --version)"

npm run --silent build || { echo "build failed"; echo "0 passed, 1 failed"; exit 1; }

passed=0
failed=0

# The tests are plain JS, type-checked against the declarations the build wrote to dist/
# (test/tsconfig.json): a test that calls the server's code with the wrong shapes fails here.
if npx tsc -p test; then
  echo "tests type-check"; passed=$((passed + 1))
else
  echo "tests do not type-check"; failed=$((failed + 1))
fi

# ghz (a Go gRPC load tester) for test/integration/ghz.test.js, into a project-local GOPATH.
bash tools/install-ghz.sh || echo "installing ghz failed: the ghz test will fail"

# grpc-health-probe (what Kubernetes' docs probe gRPC servers with) for test/integration/health.test.js.
bash tools/install-health-probe.sh || echo "installing grpc-health-probe failed: the health test will fail"

# NVIDIA's perf_analyzer for test/integration/perf-analyzer.test.js, into .toolchain/perf_analyzer.
bash tools/install-perf-analyzer.sh >/dev/null || echo "installing perf_analyzer failed: the perf_analyzer tests will fail"

# ava with the TAP reporter, so the counts can be read reliably.
ava_out=$(mktemp)
npx ava --tap 2>&1 | tee "$ava_out"
ava_pass=$(grep -E '^# pass ' "$ava_out" | awk '{print $3}' | tail -1)
ava_fail=$(grep -E '^# fail ' "$ava_out" | awk '{print $3}' | tail -1)
if [ -z "$ava_pass$ava_fail" ]; then ava_fail=1; fi   # ava crashed before reporting
passed=$((passed + ${ava_pass:-0}))
failed=$((failed + ${ava_fail:-0}))
rm -f "$ava_out"

# One pytest run with PYTHON (the node the tests use first on PATH), its counts added to the totals.
run_pytest() {
  local python=$1 out line pass fail
  shift
  out=$(mktemp)
  PATH="$(dirname "$(command -v node)"):$PATH" "$python" -m pytest -q "$@" 2>&1 | tee "$out"
  line=$(grep -E '[0-9]+ (passed|failed)' "$out" | tail -1)
  pass=$(echo "$line" | grep -oE '[0-9]+ passed' | awk '{print $1}')
  fail=$(echo "$line" | grep -oE '[0-9]+ (failed|error|errors)' | awk '{s+=$1} END {print s+0}')
  if [ -z "$line" ]; then fail=1; fi
  passed=$((passed + ${pass:-0}))
  failed=$((failed + ${fail:-0}))
  rm -f "$out"
}

# Python compatibility suite: tritonclient from PyPI, in .venv.
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv || { echo "cannot create .venv"; failed=$((failed + 1)); }
fi
if [ -x .venv/bin/python ]; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -r test/compat/requirements.txt \
    || { echo "pip install failed"; failed=$((failed + 1)); }
fi
run_compat() {
  [ -x .venv/bin/python ] || return 0
  # KServe's SDK and tritonclient both register the `inference` protos in protobuf's default
  # descriptor pool, so they cannot share a Python process: one pytest run each.
  for suite in "--ignore=test/compat/test_kserve.py test/compat" "test/compat/test_kserve.py"; do
    # shellcheck disable=SC2086
    run_pytest .venv/bin/python $suite
  done
}
run_compat

# The same server with two edge threads terminating gRPC and REST (endpoints.edge_threads: 2, set
# through its environment override for every server the tests start): the suites of what crosses
# the edges (inference, streams, shared memory, REST, repository, statistics, metrics, tracing,
# health, shutdown, the copy ledger, lpt_packing's routing) and the clients (perf_analyzer, ghz,
# tritonclient, KServe's SDK).
echo "again with endpoints.edge_threads: 2"
export INFERENCE_SERVER_ENDPOINTS_EDGE_THREADS=2
ava_out=$(mktemp)
npx ava --tap test/integration/{server,rest,shared-memory,repository,operations,tracing,health,copies,hooks,meta,model-control,control,ghz,perf-analyzer,readme-rest,lpt-packing}.test.js \
  test/adversarial/{requests,streams,rest,shared-memory,client-strings,faults}.test.js 2>&1 | tee "$ava_out"
ava_pass=$(grep -E '^# pass ' "$ava_out" | awk '{print $3}' | tail -1)
ava_fail=$(grep -E '^# fail ' "$ava_out" | awk '{print $3}' | tail -1)
if [ -z "$ava_pass$ava_fail" ]; then ava_fail=1; fi
passed=$((passed + ${ava_pass:-0}))
failed=$((failed + ${ava_fail:-0}))
rm -f "$ava_out"
run_compat
unset INFERENCE_SERVER_ENDPOINTS_EDGE_THREADS

# The exporter's suite: PyTorch modules exported by tools/export, served, compared with PyTorch.
# Its venv sees Debian's python3-torch, which tools/install-export-env.sh installs on first use.
export_python=$(bash tools/install-export-env.sh)
case $? in
  0) run_pytest "$export_python" -p no:cacheprovider test/export ;;
  3) echo "SKIPPED test/export: no PyTorch on this machine and no way to install it (see above)" ;;
  *) echo "the exporter's environment could not be made (see above): test/export did not run"; failed=$((failed + 1)) ;;
esac

# The container: the image built from the Dockerfile with podman (on a local stand-in for its
# base image: no container registry is reachable) and run and queried with tritonclient.
# Skipped, saying so, where podman cannot be installed or run.
image=$(bash tools/container/build-image.sh)
case $? in
  0) export STOWAGE_TEST_IMAGE="$image"; run_pytest .venv/bin/python -p no:cacheprovider test/container ;;
  3) echo "SKIPPED test/container: podman cannot run on this machine (see above); the image was not built or tested" ;;
  *) echo "the container image did not build (see above)"; failed=$((failed + 1)) ;;
esac

echo "${passed} passed, ${failed} failed"
[ "$failed" -eq 0 ]
