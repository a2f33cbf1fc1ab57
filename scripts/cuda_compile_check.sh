#!/usr/bin/env bash
# Compiles the embedded kernel program (scripts/kernel_source.sh) with a
# local nvcc, and prints each kernel's registers, spills and shared
# memory: a check on a machine without a GPU before spending device time.
# Needs nvcc (Debian: apt-get install nvidia-cuda-toolkit from non-free;
# 11.8 compiles sm_90).
# Not part of CI: NVRTC on the GPU machine is the compiler of record.
#
#   scripts/cuda_compile_check.sh [kernel-name-regexp]
set -euo pipefail
cd "$(dirname "$0")/.."
command -v nvcc >/dev/null || { echo "nvcc not found" >&2; exit 2; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
scripts/kernel_source.sh >"$dir/all.cu"
nvcc -arch=sm_90 -std=c++17 --cubin -Xptxas -v -o "$dir/all.cubin" "$dir/all.cu" 2>"$dir/log" || { cat "$dir/log"; exit 1; }
awk -v re="${1:-.}" '
	/Compiling entry function/ { name = $0; sub(/.*function .?/, "", name); sub(/.? for.*/, "", name) }
	/spill stores/ { spills = $0; sub(/^ +/, "", spills) }
	/Used [0-9]+ registers/ { if (name ~ re) { regs = $0; sub(/.*Used /, "", regs); printf "%-28s %s | %s\n", name, regs, spills } }
' "$dir/log"
