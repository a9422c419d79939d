#!/usr/bin/env bash
# ghz (a Go gRPC load tester) into .toolchain/gopath/bin/ghz (git-ignored) with `go install`, for
# test/integration/ghz.test.js and bench/ (front-end.js, peers/density.js). Prints nothing when it
# is there; fails saying what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

GHZ_VERSION=v0.93.0
[ -x .toolchain/gopath/bin/ghz ] && exit 0
if ! command -v go >/dev/null; then
  if [ -x /usr/local/go/bin/go ]; then PATH="/usr/local/go/bin:$PATH"; else echo "ghz needs Go (go install): install Go" >&2; exit 1; fi
fi
GOPATH="$PWD/.toolchain/gopath" GOFLAGS=-modcacherw go install "github.com/bojand/ghz/cmd/ghz@${GHZ_VERSION}"
