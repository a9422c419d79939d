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
# 600 KiB and 8 MiB), bench/resnet50.js (the CPU backend against raw ONNX Runtime), bench/slo.js and
# bench/quotas.js (issue 65's quality of service); GPU_CHECK_CPU=0 leaves those out. Logs go to LOG_DIR.
#
#   bash bench/gpu-check.sh LOG_DIR
#
# A leased machine answers a command within its limit (ten minutes) or returns only the end of
# its output, so:
#   - GPU_CHECK_DEADLINE_S (default 540): the whole check ends by itself by then, with what it has:
#     each step runs at most until the deadline (its own limit, or the time left less 5 s), a step
#     with under 15 s left is skipped, saying so; a step that never ends is killed at the deadline.
#   - GPU_CHECK_OUT (a folder; tools/gpu-lease-run.sh gives it $OUT): every step's output goes into
#     GPU_CHECK_OUT/gpu-check.log as it is written, and after each step LOG_DIR is archived into
#     GPU_CHECK_OUT/gpu-check-logs.tar.gz, so a command cut short still brings back every finished
#     step's log (a call returns at most eight files: these two, whatever the number of steps).
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
deadline=$(( $(date +%s) + ${GPU_CHECK_DEADLINE_S:-540} ))
out=${GPU_CHECK_OUT:-}
if [ -n "$out" ]; then
  mkdir -p "$out"
  # Everything this script prints from here on is also in $out/gpu-check.log, as it is written.
  exec > >(tee -a "$out/gpu-check.log") 2>&1
  tee_pid=$!
fi
# At the end, the log's last lines written before the script exits.
finish() {
  if [ -n "$out" ]; then
    exec >&- 2>&-
    wait "$tee_pid" 2>/dev/null
  fi
  exit "$1"
}
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
# bench-resnet50-cpu, bench-resnet50-cpu-unshared, bench-slo, bench-quotas), to split the check over calls of a limited length.
# Each step's limit is its most; together they exceed ten minutes. GPU_CATALOG_MODELS and
# GPU_CATALOG_SECONDS size the catalog bench (default 80 models, 40 s per run, to fit one call of
# ten minutes: each of its three starts loads and warms up every model; 150 is the issue's scale).
# For 150, split its runs over calls: GPU_CATALOG_RUNS=all with GPU_CATALOG_WORK=/tmp/catalog in
# one, GPU_CATALOG_RUNS=beside,at-turn with the same GPU_CATALOG_WORK in the next (models, compile
# cache and figures kept there; the second prints every run and the ratios).
wanted=",${GPU_CHECK_STEPS:-gpu-tests,gpu-tests-graphs,gpu-tests-tritonclient,bench-gpu,bench-inline,bench-weightless,bench-density,bench-first-call,bench-catalog,sessions,bench-actors,bench-catalog-two-actors,bench-edges,bench-resnet50-cpu,bench-resnet50-cpu-unshared,bench-slo,bench-quotas},"
step() {
  local name=$1 limit=$2
  shift 2
  case "$wanted" in *",$name,"*) ;; *) echo "=== $name: not in GPU_CHECK_STEPS"; return ;; esac
  local left=$(( deadline - $(date +%s) ))
  if [ "$left" -lt 15 ]; then
    echo "=== $name: skipped, ${left} s left before the deadline (GPU_CHECK_DEADLINE_S)"
    status=1
    return
  fi
  [ "$limit" -le $(( left - 5 )) ] || limit=$(( left - 5 ))
  echo "=== $name ($(date -u +%T), at most ${limit} s)"
  # The step's output goes to its log and, live, to this script's output (and so to $out's log).
  # timeout signals the step's whole process group (servers it started too), and kills what
  # outlives TERM by 5 s.
  timeout -k 5 "$limit" "$@" 2>&1 | tee "$logs/$name.log" | sed -u "s/^/[$name] /"
  local rc=${PIPESTATUS[0]}
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then echo "=== $name: cut at ${limit} s (its limit or the deadline)"; fi
  echo "=== $name: exit $rc"
  [ "$rc" -eq 0 ] || status=1
  if [ -n "$out" ]; then tar -C "$logs" -czf "$out/gpu-check-logs.tar.gz" .; fi
}
# The GPU suites one file at a time (--concurrency 1): the hazards file takes nearly all of the GPU's
# memory while it runs, which a server of another file started beside it would need.
step gpu-tests 300 node node_modules/ava/entrypoints/cli.mjs --verbose --concurrency 1 test/gpu/cuda.test.js test/gpu/server.test.js test/gpu/cuda-shm.test.js test/gpu/hazards.test.js
# The same suite with every server's CUDA graphs on: what runtime.cuda.graphs needs to be on by default.
step gpu-tests-graphs 300 env INFERENCE_SERVER_RUNTIME_CUDA_GRAPHS=true node node_modules/ava/entrypoints/cli.mjs --verbose --concurrency 1 test/gpu/server.test.js test/gpu/cuda-shm.test.js
# A rehearsal's steps (never run unless named in GPU_CHECK_STEPS): one that ends at once, one that
# never does (cut at the deadline), and one after it (skipped): test/integration/gpu-lease.test.js.
step rehearse-quick 30 echo "a step that ends at once"
step rehearse-hang 3600 sleep 3600
step rehearse-after 30 echo "a step after the deadline: never run"
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
  # The same with runtime.share_activations off (memory patterns on, an arena per session): batch 1
  # ran 1.41x raw on 2026-11-30 against 1.12x on 2026-11-28, before it was on by default.
  step bench-resnet50-cpu-unshared 110 env INFERENCE_SERVER_RUNTIME_SHARE_ACTIVATIONS=false node bench/resnet50.js --rounds 1
  # Issue 65's quality of service where the load generator has cores of its own (on 2 cores it
  # shares the server's): two classes at 1.5x and 3x capacity, and a tenant over its quota.
  step bench-slo 200 node bench/slo.js
  # The noisy tenant at a fixed 1,000 requests a second, on in every other second beside the quiet
  # tenant (--interleave: the quiet p99 with it on against the seconds between, on one server); on 8
  # cores or more, the load generator on the last 4 and the server on the rest, as clients on other
  # hosts would be (on 2 cores the generator's CPU moved the quiet tenant's p99 by 2x alone). Six rows
  # of 16 s, the last but one the control: the same refusals at a second server on the server's cores.
  step bench-quotas 150 sh -c 'n=$(nproc); cores=""; [ "$n" -ge 8 ] && cores="--server-cpus 0-$((n - 5)) --generator-cpus $((n - 4))-$((n - 1))"; node bench/quotas.js $cores --noisy-rate 1000 --interleave 1 --seconds 16'
fi
finish $status
