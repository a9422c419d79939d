#!/usr/bin/env bash
# The GPU checks in one go, for a GPU machine that has the project (built, with the CUDA provider
# beside libonnxruntime.so.1: npm run cuda:install, or tools/pack-offline.sh --with-tests there):
# the test/gpu suites, bench/gpu.js (ResNet-50 on backend cuda, and through gRPC with perf_analyzer
# when it came along), bench/gpu-weightless.js, bench/gpu-density.js (a catalog 10x the budget),
# bench/gpu-first-call.js (each batch size's first client call after warm-up), bench/gpu-catalog.js
# (ResNet-50-class models at the seeds' scale under a tenth of their weights, with and without uploads
# beside execution), bench/gpu-actors.js (two device actors on one GPU against one), bench/gpu-inline.js
# (ResNet-50 inline from perf_analyzer at concurrency 64 against the card's own images/s at the
# batches formed), bench/model-count.js on the GPU (what a loaded ResNet-50 costs beside its weights,
# sessions shared by graph against one per model), and on the host's cores alone bench/edges.js (edge threads auto against 0 at
# 600 KiB and 8 MiB) and bench/resnet50.js (the CPU backend against raw ONNX Runtime);
# GPU_CHECK_CPU=0 leaves those two out. Logs go to LOG_DIR.
#
#   bash bench/gpu-check.sh LOG_DIR
#
# On a GPU lent for minutes, without registries: tools/gpu-lease-pack.sh here, tools/gpu-lease-run.sh
# there (docs/gpu.md, "Running the check on a leased GPU machine").
#
# STOWAGE_CUDA_LIBRARY_PATH must name the folders of the CUDA libraries when they are not where
# npm run cuda:install puts them; with NVIDIA's Python wheels installed, they are found there.
set -uo pipefail
cd "$(dirname "$0")/.."
logs=${1:?usage: bench/gpu-check.sh LOG_DIR}
mkdir -p "$logs"
if [ -z "${STOWAGE_CUDA_LIBRARY_PATH:-}" ] && command -v python3 >/dev/null; then
  site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null)
  if [ -d "$site/nvidia" ]; then
    STOWAGE_CUDA_LIBRARY_PATH=$(find "$site/nvidia" -name 'lib*.so*' -printf '%h\n' | sort -u | paste -sd:)
    export STOWAGE_CUDA_LIBRARY_PATH
  fi
fi
echo "node $(node --version); STOWAGE_CUDA_LIBRARY_PATH=${STOWAGE_CUDA_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 | tee "$logs/nvidia-smi.log"
status=0
# GPU_CHECK_STEPS: the steps to run, comma-separated (default all: gpu-tests, gpu-tests-graphs,
# gpu-tests-tritonclient, bench-gpu, bench-inline, bench-weightless, bench-density,
# bench-first-call, bench-catalog, sessions, bench-actors, bench-catalog-two-actors, bench-edges,
# bench-resnet50-cpu), to split the check over calls of a limited length.
# Each step's limit is its most; together they exceed ten minutes. GPU_CATALOG_MODELS and
# GPU_CATALOG_SECONDS size the catalog bench (default 80 models, 40 s per run, to fit one call of
# ten minutes: each of its three starts loads and warms up every model; 150 is the issue's scale).
# For 150, split its runs over calls: GPU_CATALOG_RUNS=all with GPU_CATALOG_WORK=/tmp/catalog in
# one, GPU_CATALOG_RUNS=beside,at-turn with the same GPU_CATALOG_WORK in the next (models, compile
# cache and figures kept there; the second prints every run and the ratios).
wanted=",${GPU_CHECK_STEPS:-gpu-tests,gpu-tests-graphs,gpu-tests-tritonclient,bench-gpu,bench-inline,bench-weightless,bench-density,bench-first-call,bench-catalog,sessions,bench-actors,bench-catalog-two-actors,bench-edges,bench-resnet50-cpu},"
step() {
  local name=$1 limit=$2
  shift 2
  case "$wanted" in *",$name,"*) ;; *) echo "=== $name: not in GPU_CHECK_STEPS"; return ;; esac
  echo "=== $name ($(date -u +%T))"
  timeout "$limit" "$@" > "$logs/$name.log" 2>&1
  local rc=$?
  tail -n 60 "$logs/$name.log"
  echo "=== $name: exit $rc"
  [ "$rc" -eq 0 ] || status=1
}
step gpu-tests 300 node node_modules/ava/entrypoints/cli.mjs --verbose test/gpu/cuda.test.js test/gpu/server.test.js test/gpu/cuda-shm.test.js test/gpu/hazards.test.js
# The same suite with every server's CUDA graphs on: what runtime.cuda.graphs needs to be on by default.
step gpu-tests-graphs 300 env INFERENCE_SERVER_RUNTIME_CUDA_GRAPHS=true node node_modules/ava/entrypoints/cli.mjs --verbose test/gpu/server.test.js test/gpu/cuda-shm.test.js
# NVIDIA's own client on CUDA shared memory: needs tritonclient (carried as a wheel; the image has
# cuda-python); skipped, saying why, without it.
step gpu-tests-tritonclient 120 python3 -m pytest -q -rs test/gpu/test_cuda_shm_tritonclient.py
step bench-gpu 180 node bench/gpu.js
step bench-inline 180 node bench/gpu-inline.js
step bench-weightless 90 node bench/gpu-weightless.js --gpu-only
step bench-density 150 node bench/gpu-density.js
step bench-first-call 120 node bench/gpu-first-call.js
step bench-catalog 600 node bench/gpu-catalog.js --models "${GPU_CATALOG_MODELS:-80}" --seconds "${GPU_CATALOG_SECONDS:-40}" \
  ${GPU_CATALOG_RUNS:+--runs "$GPU_CATALOG_RUNS"} ${GPU_CATALOG_WORK:+--work "$GPU_CATALOG_WORK"}
# What a loaded model costs beside its weights on a GPU (issue 61): ResNet-50s of one graph and of a
# graph each, 1, 10 and 30 loaded, sessions shared against one per model (bench/model-count.js).
# GPU_SESSIONS_WORK keeps its models and references for a rerun in the same lease.
step sessions 540 node bench/model-count.js --backend cuda --part a --counts 1,10,30 --unshared-max 10 --thread-pools per_session \
  --work "${GPU_SESSIONS_WORK:-/tmp/model-count}"
step bench-actors 240 node bench/gpu-actors.js
step bench-catalog-two-actors 400 node bench/gpu-catalog.js --gpus 0,0 --runs beside --models "${GPU_CATALOG_MODELS:-80}" --seconds "${GPU_CATALOG_SECONDS:-40}"
if [ "${GPU_CHECK_CPU:-1}" != 0 ]; then
  step bench-edges 180 node bench/edges.js --quick --edges 0,auto --only 600KiB,8MiB --concurrency 64 --protocols grpc
  step bench-resnet50-cpu 110 node bench/resnet50.js --rounds 1
fi
exit $status
