#!/usr/bin/env bash
# Runs on the GPU machine (see /work/.library/device) in one call: what this
# repository can only check where torch and transformers are installed.
#
# Here, first:   scripts/device_build.sh        (builds .device/bin, carried)
# There:         bash scripts/device_check.sh   (results under $OUT)
#
# 1. regenerates the torch golden files (number formats; compressed-tensors
#    and ModelOpt quantization) and diffs them against the committed ones;
# 2. writes the tiny synthetic model of every architecture with the carried
#    lowbit binary and loads each with transformers (check_synth_hf.py);
# 3. quantizes them (and a Qwen3-0.6B-shape model) with every scheme and
#    format and checks each result the way vLLM's loaders read it
#    (check_quantized_load.py, independent of lowbit's code);
# 4. runs the carried Go test binaries.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
lowbit=.device/bin/lowbit
status=0
fail() { echo "FAILED: $*"; status=1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
cat .device/bin/commit.txt 2>/dev/null | tee "$out/commit.txt"

echo "== golden files"
# The regenerated files come back under $OUT, to commit when a script changed.
python3 scripts/golden_formats.py --out "$out/formats.json" >/dev/null || fail golden_formats
cmp -s "$out/formats.json" testdata/golden/formats.json && echo "formats.json: identical" || fail "formats.json differs"
python3 scripts/golden_quantize.py --out "$out/golden.safetensors" >/dev/null || fail golden_quantize
# safetensors writes __metadata__ in hash order, so compare tensors, not bytes.
python3 - "$out/golden.safetensors" testdata/golden/quantize/golden.safetensors <<'PY' && echo "quantize golden: same tensors" || fail "quantize golden differs"
import json, struct, sys
def load(p):
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
    return {k: (v["dtype"], v["shape"], b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in h.items() if k != "__metadata__"}
sys.exit(0 if load(sys.argv[1]) == load(sys.argv[2]) else 1)
PY

echo "== synthetic models through transformers"
dirs=() inspects=()
for arch in qwen3 qwen3_moe qwen3_5 qwen3_5_moe llama; do
  d=/tmp/synth/$arch
  rm -rf "$d"
  $lowbit synth --arch "$arch" --out "$d" --quiet || fail "synth $arch"
  $lowbit inspect --json --tensors "$d" >"/tmp/synth/$arch.json" || fail "inspect $arch"
  dirs+=("$d") inspects+=("/tmp/synth/$arch.json")
done
python3 scripts/check_synth_hf.py "${dirs[@]}" --inspect "${inspects[@]}" 2>&1 | grep -v 'Loading weights' | tee "$out/check_synth_hf.txt"
[ "${PIPESTATUS[0]}" = 0 ] || fail check_synth_hf

echo "== quantized checkpoints through vLLM's reading rules"
$lowbit synth --arch qwen3 --size qwen3-0.6b --out /tmp/synth/qwen3-0.6b --quiet || fail "synth qwen3-0.6b"
: >"$out/check_quantized_load.txt"
quant() { # src scheme format [extra flags]
  local src=$1 scheme=$2 fmt=$3; shift 3
  local q="/tmp/q/$(basename "$src")-$scheme-$fmt$(echo "$*" | tr -d ' -')"
  rm -rf "$q"
  if ! $lowbit quantize --model "$src" --scheme "$scheme" --format "$fmt" --out "$q" --quiet "$@"; then
    fail "quantize $src $scheme $fmt $*"; return
  fi
  echo "### $q" >>"$out/check_quantized_load.txt"
  python3 scripts/check_quantized_load.py --source "$src" --quantized "$q" --forward >>"$out/check_quantized_load.txt" 2>&1 \
    && echo "PASS $q" || fail "check_quantized_load $q"
}
for arch in qwen3 qwen3_moe qwen3_5 qwen3_5_moe llama; do
  quant /tmp/synth/$arch nvfp4a16 compressed-tensors
  quant /tmp/synth/$arch fp8-dynamic compressed-tensors --kv-cache-dtype fp8 --kv-scale-one
done
quant /tmp/synth/qwen3 fp8-dynamic modelopt
quant /tmp/synth/qwen3_5_moe nvfp4a16 compressed-tensors --quantize-linear-attn
for s in fp8-dynamic fp8-block nvfp4a16; do quant /tmp/synth/qwen3-0.6b $s compressed-tensors; done
quant /tmp/synth/qwen3-0.6b fp8-dynamic modelopt
grep -E 'NMSE|PASS|FAIL|max' "$out/check_quantized_load.txt" | tail -60

echo "== Go test binaries"
for t in .device/bin/*.test; do
  [ -e "$t" ] || continue
  pkg=$(basename "$t" .test)
  echo "-- $pkg"
  (cd "$(cat ".device/bin/$pkg.dir")" && "$OLDPWD/$t" -test.count=1) || fail "go test $pkg"
done
echo "device_check: status $status"
exit $status
