#!/usr/bin/env bash
# Everything a leased GPU machine needs for bench/gpu-check.sh, packed here into .gpu-lease/
# (git-ignored), and the calls that carry it there, printed. Such a machine (the workplace's
# device tool: an H100 or H200, 16 cores) has no registries and no Node, takes at most 64 MiB per
# call with the checkout counted in, and keeps what a call carried while it is held; so the pack
# goes in parts, one call each, and every call runs tools/gpu-lease-run.sh, which runs the check
# once the last part is there.
#
#   bash tools/gpu-lease-pack.sh
#
# What it does (the installs skipped when already done; the build and the pack made afresh):
#   - ONNX Runtime's CUDA provider beside onnxruntime-node's library (tools/install-cuda.py
#     --provider-only: the CUDA libraries are the machine's, NVIDIA's wheels in its Python);
#   - perf_analyzer (tools/install-perf-analyzer.sh), for bench/gpu.js's --shared-memory cuda run;
#   - npm run build, then tools/pack-offline.sh --with-tests in parts that fit a call beside the
#     checkout;
#   - NVIDIA's tritonclient and what its HTTP and CUDA shared-memory clients import that the
#     machine's image lacks, as wheels for its Python 3.12 (test/gpu/test_cuda_shm_tritonclient.py).
set -euo pipefail
cd "$(dirname "$0")/.."
export ONNXRUNTIME_NODE_INSTALL=skip
. tools/use-node.sh

lease=.gpu-lease
MIB=$((1024 * 1024))
CALL_LIMIT=$((64 * MIB))
# Kept free in every call: the checkout grows between packing and the last call (logs, fixes).
MARGIN=$((2 * MIB))
# tritonclient of the version test/compat/requirements.txt pins, and what it needs beyond the GPU
# image (which has numpy, grpcio, protobuf, urllib3, certifi and cuda-python's cuda-bindings).
# greenlet below 3.4, as tritonclient asks.
tritonclient=$(sed -n 's/^tritonclient\[[^]]*\]==//p' test/compat/requirements.txt)
[ -n "$tritonclient" ] || { echo "gpu-lease-pack: no tritonclient pin in test/compat/requirements.txt" >&2; exit 1; }
WHEELS=("tritonclient==$tritonclient" python-rapidjson==1.25 geventhttpclient==2.6.1 gevent==26.9.0 'greenlet<3.4' zope.event zope.interface brotli)

ort_dir=node_modules/onnxruntime-node/bin/napi-v6/linux/x64
[ -d node_modules ] || npm ci --no-audit --no-fund
[ -f "$ort_dir/libonnxruntime_providers_cuda.so" ] || python3 tools/install-cuda.py --provider-only
bash tools/install-perf-analyzer.sh > /dev/null
mkdir -p "$lease"
npm run build > "$lease/build.log" 2>&1 || { cat "$lease/build.log"; exit 1; }

# What travels in every call anyway: tracked files and untracked ones git does not ignore.
checkout=$(git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
part_bytes=$((CALL_LIMIT - checkout - MARGIN))
part_mib=$((part_bytes / MIB))
echo "gpu-lease-pack: the checkout is $((checkout / MIB)) MiB, so parts of at most $part_mib MiB"

rm -rf "$lease/pack" "$lease/wheels"
mkdir -p "$lease/wheels"
bash tools/pack-offline.sh "$lease/pack" "$part_mib" --with-tests | grep '^pack-offline'
python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux1_x86_64 --platform any -d "$lease/wheels" "${WHEELS[@]}"
wheels=$(du -cb "$lease"/wheels/*.whl | tail -1 | cut -f1)

# The calls: part 00 with SHA256SUMS and unpack.sh, each other part alone, the wheels with the
# smallest part when they fit beside it, else in a call of their own.
mapfile -t parts < <(cd "$lease/pack" && ls stowage.tar.xz.part-*)
smallest=${parts[-1]}
last=$(stat -c %s "$lease/pack/$smallest")
wheels_alone=1
[ $((checkout + MARGIN + last + wheels)) -le "$CALL_LIMIT" ] && wheels_alone=0
echo
echo "gpu-lease-pack: $(( ${#parts[@]} + wheels_alone )) calls, each with the command: bash tools/gpu-lease-run.sh"
echo "(a machine idle for about 30 s goes back with everything it was sent: make each call at once"
echo " after the one before; GPU_CHECK_STEPS=... before the command picks what the last call runs,"
echo " earlier calls only receive; timeout_s 120 for each receiving call)"
n=1
if [ "$wheels_alone" = 1 ]; then
  echo "  call $n carry: [\"$lease/wheels\"]"
  n=$((n + 1))
fi
for p in "${parts[@]}"; do
  carry="\"$lease/pack/$p\""
  [ "$p" = "${parts[0]}" ] && carry="$carry, \"$lease/pack/SHA256SUMS\", \"$lease/pack/unpack.sh\""
  [ "$p" = "$smallest" ] && [ "$wheels_alone" = 0 ] && carry="$carry, \"$lease/wheels\""
  echo "  call $n carry: [$carry]"
  n=$((n + 1))
done
# What to run once the last part is there, in the order docs/gpu.md's plan gives (15 minutes of
# device time, the start and the receiving calls included: the suites first, then one bench a call).
# Each call's GPU_CHECK_DEADLINE_S leaves its timeout_s room for the unpacking and the transfers.
echo "The last call's command, and the calls after it on the same machine, at once one after another"
echo "(carry nothing but what changed: a rebuilt dist, npm run build here and carry [\"dist\"], replaces the pack's):"
# In the order of what is still to learn (docs/gpu.md, "Running the check on a leased GPU machine");
# on 2026-11-30 the first call took 169 s and each catalog run 94-160 s.
echo "  timeout_s 600: GPU_CHECK_STEPS=gpu-tests,gpu-tests-graphs,gpu-tests-tritonclient bash tools/gpu-lease-run.sh"
echo "  timeout_s 240: GPU_CHECK_STEPS=bench-gpu GPU_CHECK_DEADLINE_S=200 bash tools/gpu-lease-run.sh"
echo "  timeout_s 600: GPU_CHECK_STEPS=sessions bash tools/gpu-lease-run.sh"
for runs in all beside at-turn; do
  echo "  timeout_s 600: GPU_CHECK_STEPS=bench-catalog GPU_CATALOG_MODELS=150 GPU_CATALOG_SECONDS=30 GPU_CATALOG_RUNS=$runs GPU_CATALOG_WORK=/tmp/catalog bash tools/gpu-lease-run.sh"
done
echo "  timeout_s 280: GPU_CHECK_STEPS=bench-resnet50-cpu,bench-resnet50-cpu-unshared GPU_CHECK_DEADLINE_S=240 bash tools/gpu-lease-run.sh"
echo "  timeout_s 240: GPU_CHECK_STEPS=bench-edges GPU_CHECK_DEADLINE_S=200 bash tools/gpu-lease-run.sh"
echo "  timeout_s 420: GPU_CHECK_STEPS=bench-slo,bench-quotas GPU_CHECK_DEADLINE_S=380 bash tools/gpu-lease-run.sh"
echo "  timeout_s 240: GPU_CHECK_STEPS=bench-inline GPU_CHECK_DEADLINE_S=200 bash tools/gpu-lease-run.sh"
echo "  timeout_s 300: GPU_CHECK_STEPS=bench-actors GPU_CHECK_DEADLINE_S=260 bash tools/gpu-lease-run.sh"
echo "  timeout_s 600: GPU_CHECK_STEPS=bench-catalog-two-actors bash tools/gpu-lease-run.sh"
