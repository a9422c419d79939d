#!/usr/bin/env bash
# The GPU machine's side of a leased GPU check (tools/gpu-lease-pack.sh packs it here). Such a
# machine has no registries and no Node, and each call to it brings at most 64 MiB, so the pack
# arrives in parts, one call each, into .gpu-lease/ (git-ignored; what a call brought stays there
# while the machine is held). Every call runs this same script:
#
#   bash tools/gpu-lease-run.sh
#
#   - while parts are missing: says which arrived and which are still to come, and stops;
#   - once all are there: checks and unpacks them (once), links what this checkout lacks from the
#     pack (node_modules, dist, the native addon, perf_analyzer; a path a call carried itself, a
#     rebuilt dist say, wins), installs the carried Python wheels (tritonclient) into /tmp/site,
#     and runs bench/gpu-check.sh with GPU_CHECK_STEPS (and GPU_CATALOG_MODELS,
#     GPU_CATALOG_SECONDS, GPU_CHECK_DEADLINE_S) as given, writing into $OUT as it goes: its whole
#     output in $OUT/gpu-check.log, every finished step's log in $OUT/gpu-check-logs.tar.gz (so a
#     command cut at its limit still brings them back).
#
# GPU_LEASE_DRY=1 stops before gpu-check.sh, once the pack is unpacked, linked and its Node and
# dist named: nothing is run on the GPU.
set -uo pipefail
cd "$(dirname "$0")/.."
lease=.gpu-lease
pack=$lease/pack

if [ ! -f "$pack/SHA256SUMS" ]; then
  echo "gpu-lease: no $pack/SHA256SUMS yet: the first call carries it (tools/gpu-lease-pack.sh prints each call's carry)"
  exit 2
fi
have=() missing=()
while read -r _ part; do
  if [ -f "$pack/$part" ]; then have+=("$part"); else missing+=("$part"); fi
done < "$pack/SHA256SUMS"
echo "gpu-lease: ${#have[@]} of $(( ${#have[@]} + ${#missing[@]} )) parts here"
if [ ${#missing[@]} -gt 0 ]; then
  echo "gpu-lease: still to come: ${missing[*]}"
  exit 0
fi

unpacked=$lease/unpacked
tree=$unpacked/stowage
if [ ! -x "$tree/node/bin/node" ]; then
  started=$(date +%s)
  bash "$pack/unpack.sh" "$unpacked" || exit 1
  echo "gpu-lease: unpacked in $(( $(date +%s) - started )) s"
fi
for p in node_modules dist src/native/build .toolchain/perf_analyzer; do
  if [ ! -e "$p" ] && [ -e "$tree/$p" ]; then
    mkdir -p "$(dirname "$p")"
    ln -s "$PWD/$tree/$p" "$p"
  fi
done
export PATH="$PWD/$tree/node/bin:$PATH"
if compgen -G "$lease/wheels/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$lease"/wheels/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
echo "gpu-lease: node $(node --version) from the pack; dist $(readlink dist || echo 'carried')"
if [ "${GPU_LEASE_DRY:-0}" = 1 ]; then
  echo "gpu-lease: GPU_LEASE_DRY=1, gpu-check.sh not run"
  exit 0
fi

logs=/tmp/gpu-check-$(date -u +%H%M%S)
# At most eight files come back from a call: the whole output and one archive of the steps' logs,
# both written as the steps go.
GPU_CHECK_OUT=${OUT:-} bash bench/gpu-check.sh "$logs"
status=$?
[ -z "${OUT:-}" ] || echo "gpu-lease: logs in \$OUT/gpu-check.log and \$OUT/gpu-check-logs.tar.gz"
exit $status
