#!/usr/bin/env bash
# Pack Stowage for a machine cut off from every registry (GPU servers in labs often are): Node
# itself, the built server with its runtime dependencies (linux-x64 binaries only) and, when they
# are installed, the CUDA provider's two libraries beside onnxruntime-node's libonnxruntime.so.1,
# as one xz stream split into parts of a chosen size, with SHA256SUMS and unpack.sh.
#
#   npm run build && bash tools/pack-offline.sh OUT_DIR [PART_MIB] [--with-tests]
#
# On the other machine, with the parts in one folder:  bash unpack.sh DEST   (checks every part's
# checksum, unpacks, and prints how to start it). `--with-tests` adds the test and bench files and
# the dev dependencies that run them (ava), for checking a GPU machine (test/gpu, bench/gpu.js).
# PACK_XZ_LEVEL (default 6) is xz's preset: 0 packs about five times faster, 12% larger with the CUDA provider in.
# The CUDA libraries themselves (cuDNN, cuBLAS, ...) are not packed: they come from NVIDIA's
# wheels or the machine's CUDA installation (STOWAGE_CUDA_LIBRARY_PATH says where).
set -euo pipefail
cd "$(dirname "$0")/.."

out=${1:?usage: tools/pack-offline.sh OUT_DIR [PART_MIB] [--with-tests]}
part_mib=${2:-60}
with_tests=0
[ "${3:-}" = "--with-tests" ] && with_tests=1

[ -d dist ] && [ -f src/native/build/Release/stowage_ort.node ] || { echo "pack-offline: build first (npm run build)" >&2; exit 1; }
node_bin=$(command -v node)
ort_dir=node_modules/onnxruntime-node/bin/napi-v6/linux/x64
provider_dir=${STOWAGE_CUDA_PROVIDER_DIR:-$ort_dir}

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root="$stage/stowage"
mkdir -p "$root/node/bin" "$root/src/native/build/Release"
cp "$node_bin" "$root/node/bin/node"
cp -r package.json main.js node.yaml proto bundles dist "$root/"
cp src/native/build/Release/*.node "$root/src/native/build/Release/"
if [ "$with_tests" = 1 ]; then
  cp -r test bench tools "$root/"
  # perf_analyzer (tools/install-perf-analyzer.sh), when this machine has it: bench/gpu.js drives
  # the server's gRPC port with it on the GPU machine, which has no registry to fetch it from.
  if [ -d .toolchain/perf_analyzer ]; then mkdir -p "$root/.toolchain" && cp -r .toolchain/perf_analyzer "$root/.toolchain/"; fi
fi

# node_modules: everything when the tests come along, else only what `npm ls --omit=dev` lists;
# never the other platforms' ONNX Runtime binaries, the compilers or the type checkers.
if [ "$with_tests" = 1 ]; then
  modules=$(ls -d node_modules/* node_modules/@*/* 2>/dev/null | grep -v '^node_modules/@[^/]*$')
else
  modules=$(npm ls --omit=dev --all --parseable 2>/dev/null | sed "s|^$PWD/||" | grep '^node_modules/')
fi
for m in $modules; do
  case "$m" in
    node_modules/typescript|node_modules/@typescript/*|node_modules/node-gyp|node_modules/@types/*) continue ;;
  esac
  mkdir -p "$root/$(dirname "$m")"
  cp -r "$m" "$root/$m"
done
find "$root/node_modules/onnxruntime-node/bin/napi-v6" -mindepth 1 -maxdepth 1 ! -name linux -exec rm -rf {} +
find "$root/node_modules/onnxruntime-node/bin/napi-v6/linux" -mindepth 1 -maxdepth 1 ! -name x64 -exec rm -rf {} +
provider=none
if [ -f "$provider_dir/libonnxruntime_providers_cuda.so" ]; then
  cp "$provider_dir/libonnxruntime_providers_cuda.so" "$provider_dir/libonnxruntime_providers_shared.so" "$root/$ort_dir/"
  provider=included
fi

mkdir -p "$out"
rm -f "$out"/stowage.tar.xz.part-* "$out/SHA256SUMS" "$out/unpack.sh"
tar -C "$stage" -cf - stowage | xz -T0 "-${PACK_XZ_LEVEL:-6}" | split -b "${part_mib}M" -d -a 2 - "$out/stowage.tar.xz.part-"
(cd "$out" && sha256sum stowage.tar.xz.part-* > SHA256SUMS)
cat > "$out/unpack.sh" <<'UNPACK'
#!/usr/bin/env bash
# Check and unpack the parts beside this script into DEST (default: ./stowage-unpacked).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dest=${1:-stowage-unpacked}
(cd "$here" && sha256sum -c --quiet SHA256SUMS) || { echo "unpack: a part is damaged or missing (SHA256SUMS)" >&2; exit 1; }
mkdir -p "$dest"
cat "$here"/stowage.tar.xz.part-* | xz -d -T0 | tar -C "$dest" -xf -
echo "unpacked into $dest/stowage. Start: cd $dest/stowage && node/bin/node main.js node.yaml"
echo "backend cuda: set STOWAGE_CUDA_LIBRARY_PATH to the folders holding libcudart.so.13, libcublas.so.13, libcudnn.so.9, ..."
UNPACK
chmod +x "$out/unpack.sh"
echo "pack-offline: $(ls "$out"/stowage.tar.xz.part-* | wc -l) part(s) of at most ${part_mib} MiB in $out (CUDA provider: $provider; tests: $with_tests)"
ls -la "$out"
