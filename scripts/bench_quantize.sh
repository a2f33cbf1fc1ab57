#!/usr/bin/env bash
# Times lowbit quantize against the floor it cannot beat: reading the source
# checkpoint from disk. Both are measured in one run, each from a cold page
# cache (needs root for /proc/sys/vm/drop_caches), and the ratio printed.
#
#   scripts/bench_quantize.sh LOWBIT SRC_DIR OUT_ROOT SCHEME [SCHEME...]
# e.g.
#   lowbit synth --arch qwen3 --size qwen3-8b --out /tmp/q8
#   scripts/bench_quantize.sh ./lowbit /tmp/q8 /tmp/q8-out fp8-dynamic nvfp4a16
set -euo pipefail
lowbit=$1 src=$2 outroot=$3
shift 3
cold() { sync; echo 3 >/proc/sys/vm/drop_caches; }
cold
t0=$(date +%s.%N)
cat "$src"/*.safetensors >/dev/null
t1=$(date +%s.%N)
read_s=$(echo "$t1 - $t0" | bc)
bytes=$(cat "$src"/*.safetensors | wc -c)
printf 'read   %s: %.2f GB in %.1f s (%.0f MB/s)\n' "$src" "$(echo "$bytes/1000000000" | bc -l)" "$read_s" "$(echo "$bytes/1000000/$read_s" | bc -l)"
for scheme in "$@"; do
  out="$outroot-$scheme"
  rm -rf "$out"
  cold
  t0=$(date +%s.%N)
  /usr/bin/time -f "%M" -o /tmp/bench_quantize.rss "$lowbit" quantize --model "$src" --scheme "$scheme" --out "$out" --quiet
  t1=$(date +%s.%N)
  q_s=$(echo "$t1 - $t0" | bc)
  printf 'quantize %-12s %.1f s, peak RSS %d MB, %.2fx the read time (target: at most 2x)\n' \
    "$scheme" "$q_s" "$(( $(cat /tmp/bench_quantize.rss) / 1024 ))" "$(echo "$q_s / $read_s" | bc -l)"
  rm -rf "$out"
done
