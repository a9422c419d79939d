#!/usr/bin/env bash
# NVIDIA's perf_analyzer into .toolchain/perf_analyzer/ (git-ignored), for the tests and bench/.
# Prints the path of a wrapper that runs it, or fails saying what is missing.
#
# PyPI's `perf-analyzer` package is a placeholder, but the tritonclient 2.41.0 wheel carries the
# binary (tritonclient-2.41.0.data/data/bin/perf_analyzer). It links libb64.so.0d (Debian's
# libb64-0d) and libcudart.so.12 (PyPI's nvidia-cuda-runtime-cu12) even on a CPU-only machine;
# both are unpacked beside it rather than installed system-wide, and the wrapper puts them on
# LD_LIBRARY_PATH.
set -euo pipefail
cd "$(dirname "$0")/.."

TRITONCLIENT_VERSION=2.41.0
CUDART_VERSION=12.9.79
dir="$PWD/.toolchain/perf_analyzer"
wrapper="$dir/perf_analyzer"
if [ -x "$wrapper" ] && grep -q readlink "$wrapper" && "$wrapper" --version >/dev/null 2>&1; then echo "$wrapper"; exit 0; fi

rm -rf "$dir" && mkdir -p "$dir/lib" "$dir/download"
python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --python-version 3.11 \
  -d "$dir/download" "tritonclient==${TRITONCLIENT_VERSION}" "nvidia-cuda-runtime-cu12==${CUDART_VERSION}" >&2

# Only the members needed, with Python's zipfile (unzip may not be installed).
python3 - "$dir" <<'EOF'
import glob, os, shutil, sys, zipfile
out = sys.argv[1]
wanted = {
    'tritonclient-*.whl': ('data/bin/perf_analyzer', 'perf_analyzer.bin'),
    'nvidia_cuda_runtime_cu12-*.whl': ('cuda_runtime/lib/libcudart.so.12', 'lib/libcudart.so.12'),
}
for pattern, (suffix, target) in wanted.items():
    wheel = glob.glob(os.path.join(out, 'download', pattern))[0]
    with zipfile.ZipFile(wheel) as z:
        member = next(n for n in z.namelist() if n.endswith(suffix))
        with z.open(member) as src, open(os.path.join(out, target), 'wb') as dst:
            shutil.copyfileobj(src, dst)
os.chmod(os.path.join(out, 'perf_analyzer.bin'), 0o755)
EOF

# libb64 from Debian's archive, unpacked (no root needed once the package lists are there).
( cd "$dir/download" && { apt-get download libb64-0d >&2 2>/dev/null || { apt-get update -qq >&2 && apt-get download libb64-0d >&2; }; } ) \
  || { echo "cannot fetch Debian's libb64-0d (perf_analyzer needs libb64.so.0d)" >&2; exit 1; }
dpkg-deb -x "$dir"/download/libb64-0d_*.deb "$dir/download/b64"
cp "$(find "$dir/download/b64" -name 'libb64.so.0d*' | head -1)" "$dir/lib/libb64.so.0d"
rm -rf "$dir/download"

cat > "$wrapper" <<EOF
#!/bin/sh
# Relative to itself, so the folder still works where tools/pack-offline.sh carries it.
here=\$(dirname "\$(readlink -f "\$0")")
LD_LIBRARY_PATH="\$here/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "\$here/perf_analyzer.bin" "\$@"
EOF
chmod +x "$wrapper"
"$wrapper" --version >&2
echo "$wrapper"
