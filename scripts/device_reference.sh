#!/usr/bin/env bash
# Makes the golden logits of runtime's tests (testdata/golden/logits/) on a machine with torch 2.11,
# transformers 5.17 and safetensors, in one command:
#
#   scripts/device_reference.sh LOWBIT OUT_DIR
#
# LOWBIT is a lowbit binary built from this tree (scripts/device_build.sh makes .device/bin/lowbit).
# It writes the tiny synthetic Qwen3 and Llama models (seed 1), the calibration statistics of the
# Qwen3 one over the reference prompt (for the static schemes), its quantized variants, and then
# OUT_DIR/<variant>.json for each with scripts/reference_logits.py. Copy OUT_DIR/*.json and
# OUT_DIR/qwen3-tiny-seed1.stats.safetensors into testdata/golden/logits/: the Go tests rebuild every
# variant locally from the same seed, statistics and flags (runtime/golden_test.go lists them; keep
# the two lists equal) and compare.
#
# fp8-block is left out: the tiny model's hidden size is 64 and FP8 blocks need multiples of 128.
set -uo pipefail
cd "$(dirname "$0")/.."
lowbit=$(realpath "${1:?usage: scripts/device_reference.sh LOWBIT OUT_DIR}")
out=$(realpath -m "${2:?usage: scripts/device_reference.sh LOWBIT OUT_DIR}")
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
fail() { echo "FAILED: $*"; status=1; }
export PYTHONUNBUFFERED=1

q=$work/qwen3-tiny-seed1
"$lowbit" synth --arch qwen3 --size tiny --seed 1 --out "$q" --quiet || fail "synth qwen3"
"$lowbit" synth --arch llama --size tiny --seed 1 --out "$work/llama-tiny-seed1" --quiet || fail "synth llama"
stats=$out/qwen3-tiny-seed1.stats.safetensors
python3 scripts/reference_logits.py --write-stats "$stats" "$q" || fail "write-stats"

models=("$q" "$work/llama-tiny-seed1")
# name scheme format [--calib]: the same table as runtime/golden_test.go's goldenVariants.
while read -r name scheme fmt calib; do
  [ -n "$name" ] || continue
  extra=()
  [ "$calib" = calib ] && extra=(--calib "$stats")
  if "$lowbit" quantize --model "$q" --scheme "$scheme" --format "$fmt" --out "$work/$name" --quiet "${extra[@]}"; then
    models+=("$work/$name")
  else
    fail "quantize $name"
  fi
done <<'EOF'
qwen3-tiny-seed1-nvfp4a16-ct nvfp4a16 compressed-tensors
qwen3-tiny-seed1-fp8-dynamic-ct fp8-dynamic compressed-tensors
qwen3-tiny-seed1-fp8-dynamic-modelopt fp8-dynamic modelopt
qwen3-tiny-seed1-fp8-ct fp8 compressed-tensors calib
qwen3-tiny-seed1-fp8-modelopt fp8 modelopt calib
qwen3-tiny-seed1-nvfp4-ct nvfp4 compressed-tensors calib
qwen3-tiny-seed1-nvfp4-modelopt nvfp4 modelopt calib
EOF

python3 scripts/reference_logits.py --out-dir "$out" "${models[@]}" 2>&1 | grep -v 'Loading weights'
[ "${PIPESTATUS[0]}" = 0 ] || fail reference_logits
ls -l "$out"
echo "device_reference: status $status"
exit $status
