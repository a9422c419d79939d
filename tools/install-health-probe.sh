#!/usr/bin/env bash
# grpc-health-probe (the gRPC health checker Kubernetes' docs use) into
# .toolchain/gopath/bin/grpc-health-probe (git-ignored) with `go install`, for
# test/integration/health.test.js. Prints nothing when it is there; fails saying what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

PROBE_VERSION=v0.4.62
[ -x .toolchain/gopath/bin/grpc-health-probe ] && exit 0
if ! command -v go >/dev/null; then
  if [ -x /usr/local/go/bin/go ]; then PATH="/usr/local/go/bin:$PATH"; else echo "grpc-health-probe needs Go (go install): install Go" >&2; exit 1; fi
fi
GOPATH="$PWD/.toolchain/gopath" GOFLAGS=-modcacherw go install "github.com/grpc-ecosystem/grpc-health-probe@${PROBE_VERSION}"
