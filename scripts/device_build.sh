#!/usr/bin/env bash
# Builds, here, what scripts/device_check.sh runs on the GPU machine (which
# has no Go): the lowbit binary, and a test binary for each package named on
# the command line (those with GPU tests), into .device/bin (ignored by git;
# name it in the device call's carry, 64 MiB at most).
#
#   scripts/device_build.sh [./kernels/cuda ...]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
rm -rf .device/bin && mkdir -p .device/bin
go build -trimpath -ldflags "-s -w -X main.version=$(git rev-parse --short HEAD 2>/dev/null || echo dev)" -o .device/bin/lowbit ./cmd/lowbit
for rel in "$@"; do
  rel=${rel#./}
  name=$(echo "$rel" | tr / _)
  # Without symbol tables (-s -w: about a quarter smaller), so that an older
  # build carried beside these (DECODE_BINS) still fits the call's 64 MiB.
  go test -c -trimpath -ldflags "-s -w" -o ".device/bin/$name.test" "./$rel"
  echo "$rel" >".device/bin/$name.dir"
done
git rev-parse HEAD >.device/bin/commit.txt 2>/dev/null || true
du -sh .device/bin
