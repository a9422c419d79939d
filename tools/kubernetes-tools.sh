#!/usr/bin/env bash
# What test/compat/test_kubernetes.py validates the manifests with, made offline from the registries
# on first use, into .toolchain/ (git-ignored). Prints one JSON line: the paths of kustomize,
# kubeconform and the schema directory, or fails saying what is missing.
#
# - kubeconform and kustomize: `go install` from the Go module proxy.
# - Kubernetes' schemas: the k8s.io/kubernetes module (api/openapi-spec/v3), and KServe's: the
#   github.com/kserve/kserve module (config/crd/full), and KEDA's: github.com/kedacore/keda/v2
#   (config/crd/bases), all through `go mod download` (the proxy serves them when the version is
#   named), turned into kubeconform's layout by
#   tools/kubernetes-schemas.py. Schemas cannot be downloaded from GitHub here, and are not committed.
# Usage: tools/kubernetes-tools.sh PYTHON   (a Python with PyYAML)
set -euo pipefail
cd "$(dirname "$0")/.."

KUBECONFORM=github.com/yannh/kubeconform/cmd/kubeconform@v0.8.0
KUSTOMIZE=sigs.k8s.io/kustomize/kustomize/v5@v5.7.1   # later releases need a newer Go than Debian's machines carry
KUBERNETES=k8s.io/kubernetes@v1.37.0
KSERVE=github.com/kserve/kserve@v0.20.0
KEDA=github.com/kedacore/keda/v2@v2.21.0
python=${1:-python3}

if ! command -v go >/dev/null; then
  if [ -x /usr/local/go/bin/go ]; then export PATH="/usr/local/go/bin:$PATH"; else echo "Go is not installed" >&2; exit 1; fi
fi
export GOPATH="$PWD/.toolchain/gopath" GOFLAGS=-modcacherw
bin="$GOPATH/bin"
[ -x "$bin/kubeconform" ] || go install "$KUBECONFORM" >&2
[ -x "$bin/kustomize" ] || go install "$KUSTOMIZE" >&2

schemas="$PWD/.toolchain/kubernetes-schemas"
stamp="$schemas/.made-from"
if [ "$(cat "$stamp" 2>/dev/null)" != "$KUBERNETES $KSERVE $KEDA" ]; then
  k8s_dir=$(go mod download -json "$KUBERNETES" | "$python" -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  kserve_dir=$(go mod download -json "$KSERVE" | "$python" -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  keda_dir=$(go mod download -json "$KEDA" | "$python" -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  rm -rf "$schemas"
  "$python" tools/kubernetes-schemas.py "$k8s_dir" "$kserve_dir" "$schemas" "$keda_dir" >&2
  echo "$KUBERNETES $KSERVE $KEDA" > "$stamp"
fi
printf '{"kustomize": "%s", "kubeconform": "%s", "schemas": "%s", "kubernetes": "%s", "kserve": "%s"}\n' \
  "$bin/kustomize" "$bin/kubeconform" "$schemas" "$KUBERNETES" "$KSERVE"
