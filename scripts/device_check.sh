#!/usr/bin/env bash
# Runs on the GPU machine (see /work/.library/device) in one call: what this
# repository can only check where torch and transformers are installed.
#
# Here, first:   scripts/device_build.sh        (builds .device/bin, carried)
# There:         bash scripts/device_check.sh   (results under $OUT)
#
# 1. regenerates the torch golden file of the number formats and diffs it
#    against the committed one;
# 2. writes the tiny synthetic model of every architecture with the carried
#    lowbit binary and loads each with transformers (scripts/check_synth_hf.py);
# 3. runs the carried Go test binaries.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
status=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
cat .device/bin/commit.txt 2>/dev/null | tee "$out/commit.txt"

echo "== golden formats"
python3 scripts/golden_formats.py --out "$out/formats.json" || status=1
if cmp -s "$out/formats.json" testdata/golden/formats.json; then
  echo "golden formats: regenerated file is identical to the committed one"
else
  echo "golden formats: regenerated file DIFFERS from testdata/golden/formats.json"; status=1
fi

echo "== synthetic models through transformers"
dirs=() inspects=()
for arch in qwen3 qwen3_moe qwen3_5 qwen3_5_moe llama; do
  d=/tmp/synth/$arch
  rm -rf "$d"
  .device/bin/lowbit synth --arch "$arch" --out "$d" --quiet || status=1
  .device/bin/lowbit inspect --json --tensors "$d" >"/tmp/synth/$arch.json" || status=1
  dirs+=("$d") inspects+=("/tmp/synth/$arch.json")
done
python3 scripts/check_synth_hf.py "${dirs[@]}" --inspect "${inspects[@]}" 2>&1 | tee "$out/check_synth_hf.txt"
[ "${PIPESTATUS[0]}" = 0 ] || status=1

echo "== Go test binaries"
for t in .device/bin/*.test; do
  [ -e "$t" ] || continue
  pkg=$(basename "$t" .test)
  echo "-- $pkg"
  (cd "$(cat ".device/bin/$pkg.dir")" && "$OLDPWD/$t" -test.count=1) || status=1
done
echo "device_check: status $status"
exit $status
