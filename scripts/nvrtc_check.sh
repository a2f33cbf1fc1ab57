#!/usr/bin/env bash
# Compiles the embedded kernel program (scripts/kernel_source.sh) to PTX
# for compute_90 with a local NVRTC, on a machine without a GPU or CUDA
# toolkit: the C++ front end's errors (syntax, templates, lambdas NVRTC
# rejects) found before a device call. The inline PTX is not assembled
# (NVRTC 11.8 emits it as written); NVRTC on the GPU machine stays the
# compiler of record, and scripts/cuda_compile_check.sh (nvcc) reports
# registers where nvcc exists.
# NVRTC 11.8 is Debian bookworm's libnvrtc11.2, in the non-free component:
#   printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: non-free\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
#     >/etc/apt/sources.list.d/non-free.sources
#   apt-get update && apt-get install libnvrtc11.2 libnvrtc-builtins11.8
# Not part of CI.
#
#   scripts/nvrtc_check.sh [extra NVRTC options, e.g. -DLB_TRACE]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
gcc -O1 -o "$dir/nvrtc_check" scripts/nvrtc_check.c -ldl
scripts/kernel_source.sh >"$dir/all.cu"
# Warnings off (-w): NVRTC 11.8 notes every kernel's "extern __shared__"
# array and unreachable template branches; errors are what this is for.
"$dir/nvrtc_check" "$dir/all.cu" -w "$@"
