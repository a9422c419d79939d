#!/usr/bin/env bash
# Build the image from the repository's Dockerfile with podman, on a local base image
# (make-base-image.sh), for test/container. Prints the image name. Exits 3 when podman cannot be
# had on this machine (the caller skips the container test, saying so), 1 when the build fails.
# `build-image.sh cuda` builds the CUDA variant instead (--build-arg CUDA=1: 1.5 GB of NVIDIA's
# wheels from PyPI), as localhost/stowage:cuda.
#
# podman, runc and debootstrap come from Debian's packages, installed when this runs as root (or
# may sudo). There is no Docker daemon here; podman runs containers with runc, host networking and
# tools/container/containers.conf.
set -uo pipefail
cd "$(dirname "$0")/../.."
variant=${1:-cpu}
case "$variant" in
  cpu) image=localhost/stowage:test; cuda=0 ;;
  cuda) image=localhost/stowage:cuda; cuda=1 ;;
  *) echo "usage: build-image.sh [cpu|cuda]" >&2; exit 2 ;;
esac
export CONTAINERS_CONF="$PWD/tools/container/containers.conf"

missing=()
for tool in podman runc debootstrap; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if [ "${#missing[@]}" -gt 0 ]; then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if sudo -n true 2>/dev/null; then sudo="sudo -n"; else echo "${missing[*]} not installed and no root to install them" >&2; exit 3; fi
  fi
  command -v apt-get >/dev/null || { echo "${missing[*]} not installed and no apt-get" >&2; exit 3; }
  echo "installing ${missing[*]} (Debian packages)" >&2
  $sudo apt-get install -y -qq --no-install-recommends podman runc debootstrap uidmap slirp4netns fuse-overlayfs >&2 \
    || { $sudo apt-get update -qq >&2 && $sudo apt-get install -y -qq --no-install-recommends podman runc debootstrap uidmap slirp4netns fuse-overlayfs >&2; } \
    || { echo "could not install ${missing[*]}" >&2; exit 3; }
fi
podman info >/dev/null 2>&1 || { echo "podman does not work here: $(podman info 2>&1 | tail -1)" >&2; exit 3; }

base=$(bash tools/container/make-base-image.sh) || { echo "could not make the base image" >&2; exit 1; }
# --format docker keeps the Dockerfile's HEALTHCHECK (the OCI format has none).
# The ONNX Runtime C API headers come from the build context (src/native/ort-include/, made by the
# build that ran before this) or from the Go module proxy GOPROXY names.
goproxy=${GOPROXY:-$(go env GOPROXY 2>/dev/null || true)}
podman build --runtime runc --network host --format docker --build-arg "NODE_IMAGE=$base" --build-arg "GOPROXY=$goproxy" --build-arg "CUDA=$cuda" -t "$image" . >&2 \
  || { echo "podman build failed" >&2; exit 1; }
echo "$image"
