#!/usr/bin/env bash
# Runs on the GPU machine in one call: the CUDA backend's tests (the shared
# conformance suite on the CUDA kernels, the kernel cache, NVRTC errors),
# and the tokenizer speed comparison with Hugging Face tokenizers.
#
# Here, first:   scripts/device_build.sh ./kernels/cuda ./tokenizer ./runtime ./runtime/engine
#                mkdir -p .device/goroot/src/testdata && cp /usr/local/go/src/testdata/Isaac.Newton-Opticks.txt .device/goroot/src/testdata/
# There:         bash scripts/device_cuda.sh      (carry .device; logs under $OUT)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/out}
mkdir -p "$out"
status=0
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader | tee "$out/gpu.txt"
cat .device/bin/commit.txt | tee "$out/commit.txt"
ls /usr/local/cuda/lib64/libnvrtc* /usr/lib/x86_64-linux-gnu/libnvrtc* 2>/dev/null | head -5
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64"

# ONLY=serve runs just the serving check and bench below (needs only the
# lowbit binary: scripts/device_build.sh with no packages); ONLY=kernels
# stops after the decode benchmark.
if [ "${ONLY:-}" != serve ]; then
echo "== kernels/cuda tests"
(cd kernels/cuda && ../../.device/bin/kernels_cuda.test -test.v -test.count=1 2>&1) >"$out/cuda_test.log"
rc=$?
grep -E "^(=== RUN|--- FAIL|--- PASS|--- SKIP|FAIL|PASS|ok)" "$out/cuda_test.log" | grep -v "=== RUN" | grep -vE "^    --- PASS" | tail -40
grep -E "compiled in|cuda_test.go" "$out/cuda_test.log" | head -5
[ $rc -eq 0 ] || { echo "FAILED: kernels/cuda tests (rc $rc)"; status=1; }

echo "== single kernels of a Qwen3-8B decode step and prefill GEMMs (graph replays), PyTorch's matmul on the same shapes"
timeout 120 python3 scripts/torch_gemm.py --tokens 1024 >"$out/torch_gemm.json" 2>"$out/torch_gemm.err" || tail -3 "$out/torch_gemm.err"
cat "$out/torch_gemm.json"
(cd kernels/cuda && LOWBIT_TORCH_GEMM="$out/torch_gemm.json" ../../.device/bin/kernels_cuda.test -test.run XXX -test.bench Kernels -test.benchtime 20x 2>&1) | tee "$out/bench_kernels.txt" | grep Benchmark

echo "== runtime tests (the cuda backend: golden logits, batch invariance, quantized numerics; the device-resident executor)"
(cd runtime && ../.device/bin/runtime.test -test.count=1 -test.v 2>&1) >"$out/runtime_test.log"
rc=$?
grep -E "^(--- FAIL|FAIL|ok|PASS)|cuda|GPU" "$out/runtime_test.log" | grep -vE "^=== RUN" | tail -40
[ $rc -eq 0 ] || { echo "FAILED: runtime tests (rc $rc)"; status=1; }

echo "== engine on the GPU"
(cd runtime/engine && ../../.device/bin/runtime_engine.test -test.count=1 -test.v -test.run CUDA 2>&1) | tee "$out/engine_test.log" | grep -E "^(--- |FAIL|ok|PASS)|GPU vs CPU"
[ ${PIPESTATUS[0]} -eq 0 ] || { echo "FAILED: engine CUDA test"; status=1; }

echo "== batch-1 decode on the device-resident forward"
(cd runtime && ../.device/bin/runtime.test -test.run XXX -test.bench CUDADecode -test.benchtime 64x 2>&1) | tee "$out/bench_cuda.txt" | grep -E "Benchmark|wrote"
(cd runtime && LOWBIT_BENCH_SIZE=qwen3-8b timeout 300 ../.device/bin/runtime.test -test.run XXX -test.bench CUDADecode -test.benchtime 64x 2>&1) | tee "$out/bench_cuda_8b.txt" | grep -E "Benchmark|wrote"
[ "${ONLY:-}" = kernels ] && exit $status
echo "== the PyTorch/transformers baseline on the same Qwen3-8B-shape weights"
timeout 240 python3 scripts/torch_baseline.py --model /tmp/lowbit-bench-qwen3-8b/bf16 --decode 128 --compile 2>&1 | grep -E '^\{|Error|error' | tail -5

fi

echo "== lowbit serve on the GPU (tiny model; then a small random-dataset bench on the Qwen3-0.6B shape)"
[ -f /tmp/lowbit-bench-qwen3-0.6b/bf16/config.json ] || .device/bin/lowbit synth --arch qwen3 --size qwen3-0.6b --out /tmp/lowbit-bench-qwen3-0.6b/bf16 >/dev/null 2>&1
sd=$(mktemp -d)
.device/bin/lowbit synth --arch qwen3 --out "$sd/tiny" >/dev/null 2>&1
.device/bin/lowbit serve "$sd/tiny" --served-model-name tiny --host 127.0.0.1 --port 8011 --max-model-len 4096 2>"$out/serve.log" &
pid=$!
for i in $(seq 240); do curl -sf localhost:8011/health >/dev/null && break; sleep 0.5; done
curl -s localhost:8011/v1/completions -H 'content-type: application/json' \
  -d '{"model":"tiny","prompt":"Hello","max_tokens":8,"temperature":0,"prompt_logprobs":2}' | head -c 600; echo
curl -s localhost:8011/v1/chat/completions -H 'content-type: application/json' \
  -d '{"model":"tiny","messages":[{"role":"user","content":"Hi"}],"max_tokens":8,"stream":true,"stream_options":{"include_usage":true}}' | tail -c 400; echo
kill $pid; wait $pid 2>/dev/null
grep -E "engine|GPU|error" "$out/serve.log" | head -5
.device/bin/lowbit serve /tmp/lowbit-bench-qwen3-0.6b/bf16 --served-model-name q06 --host 127.0.0.1 --port 8012 --max-model-len 4096 2>"$out/serve06.log" &
pid=$!
for i in $(seq 240); do curl -sf localhost:8012/health >/dev/null && break; sleep 0.5; done
timeout 200 .device/bin/lowbit bench --url http://127.0.0.1:8012 --workload random --random-input-len 512 --random-output-len 128 --num-prompts 64 --max-concurrency 16 --ignore-eos --out "$out/bench_random.json" 2>&1 | tail -25
kill $pid; wait $pid 2>/dev/null
grep -E "engine" "$out/serve06.log" | head -3

if [ -f /tmp/lowbit-bench-qwen3-8b/bf16/config.json ]; then
echo "== LowBArena interactive on the Qwen3-8B shape, scaled to 8 of its 32 prompts (1,024 in, 256 out, one at a time)"
.device/bin/lowbit serve /tmp/lowbit-bench-qwen3-8b/bf16 --served-model-name q8 --host 127.0.0.1 --port 8013 --max-model-len 4096 2>"$out/serve8b.log" &
pid=$!
for i in $(seq 360); do curl -sf localhost:8013/health >/dev/null && break; sleep 0.5; done
timeout 150 .device/bin/lowbit bench --url http://127.0.0.1:8013 --workload random --random-input-len 1024 --random-output-len 256 --num-prompts 8 --max-concurrency 1 --ignore-eos --out "$out/bench_interactive8b.json" 2>&1 | tail -14
kill $pid; wait $pid 2>/dev/null
grep -E "engine" "$out/serve8b.log" | head -3
fi

[ -x .device/bin/tokenizer.test ] || exit $status
echo "== tokenizer speed: lowbit (Go) and Hugging Face tokenizers, same machine"
tokdir=$(mktemp -d)
python3 -c "import gzip,shutil; shutil.copyfileobj(gzip.open('internal/qwen3tok/tokenizer.json.gz'), open('$tokdir/tokenizer.json','wb'))"
(cd tokenizer && GOROOT="$PWD/../.device/goroot" ../.device/bin/tokenizer.test -test.run XXX -test.bench 'Encode(English|Code|CJK)$' -test.benchtime 20x 2>&1) | tee "$out/tok_go.txt" | grep Benchmark
python3 scripts/bench_tokenizer.py --tokenizer "$tokdir" --opticks .device/goroot/src/testdata/Isaac.Newton-Opticks.txt --code-dir tokenizer | tee "$out/tok_hf.txt"
exit $status
