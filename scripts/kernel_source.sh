#!/usr/bin/env bash
# Prints the embedded kernel program as kernels/cuda.Source assembles it
# for NVRTC: cu/common.cuh, then cu/*.cu in name order, each file headed by
# its name. The local compile checks (nvrtc_check.sh, cuda_compile_check.sh)
# compile this.
set -euo pipefail
cd "$(dirname "$0")/.."
cat kernels/cuda/cu/common.cuh
for f in $(ls kernels/cuda/cu/*.cu | LC_ALL=C sort); do
	printf '\n// ---- %s\n' "${f#kernels/cuda/}"
	cat "$f"
done
