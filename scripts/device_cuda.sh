#!/usr/bin/env bash
# Runs on the GPU machine in one call: the CUDA backend's tests (the shared
# conformance suite on the CUDA kernels, the kernel cache, NVRTC errors, the
# runtime and engine on the GPU), the kernel and decode benchmarks beside
# PyTorch, and the serving workloads beside a transformers baseline.
#
# Here, first:   scripts/device_build.sh ./kernels/cuda ./runtime ./runtime/engine
# There:         bash scripts/device_cuda.sh      (carry .device; results under $OUT)
#
# Five parts, all by default; ONLY names those to run ("kernels decode";
# a full run can pass one call's ten minutes). kernels: tests (KTESTS: a
# -test.run pattern for kernels/cuda's; TEST_TIMEOUT bounds each test
# binary, 500 s by default) and benchmarks (KBENCH=0 skips them)
# (NCU=1 also profiles the GEMV, GEMM and attention kernels with Nsight
# Compute; NOPDL=1 reruns the chained GPU tests and batch-1 decode without
# programmatic dependent launch, LOWBIT_PDL=0), then the runtime's and
# engine's GPU tests; decode: batch-1 decode and TTFT (DECODE_SIZES,
# DECODE_ACTS, DECODE_ENVS); steps: the serve workload's prefill and decode
# steps on the forward alone, each kernel's time profiled; serve: lowbit
# serve and the scaled LowBArena workloads (needs only the lowbit
# binary); torch: the transformers baselines on the
# same weights.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/out}
mkdir -p "$out"
status=0
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader; cat .device/bin/commit.txt; } | tee "$out/env.txt"
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64"
tests="$out/tests.log" bench="$out/bench.txt"

part() { [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $1 "* ]]; }
[ -f /tmp/lowbit-bench-qwen3-8b/bf16/config.json ] || .device/bin/lowbit synth --arch qwen3 --size qwen3-8b --out /tmp/lowbit-bench-qwen3-8b/bf16 >/dev/null 2>&1

if part kernels; then
echo "== kernels/cuda tests"
(cd kernels/cuda && timeout "${TEST_TIMEOUT:-500}" ../../.device/bin/kernels_cuda.test -test.v -test.count=1 -test.run "${KTESTS:-.}" 2>&1) >/tmp/cuda_test.log
rc=$?
cat /tmp/cuda_test.log >>"$tests"
grep -E "^(--- FAIL|--- PASS|--- SKIP|FAIL|PASS|ok)" /tmp/cuda_test.log | tail -20
grep -E "compiled in" /tmp/cuda_test.log | head -2
[ $rc -eq 0 ] || { echo "FAILED: kernels/cuda tests (rc $rc)"; grep -B2 -A10 -- "--- FAIL" /tmp/cuda_test.log | head -60; status=1; }

if [ "${KBENCH:-1}" != 0 ]; then
echo "== single kernels of the Qwen3-8B shape (graph replays), PyTorch's matmul and SDPA on the same shapes"
timeout 150 python3 scripts/torch_gemm.py --tokens 1024 >/tmp/torch_gemm.json 2>/tmp/torch_gemm.err || tail -3 /tmp/torch_gemm.err
cat /tmp/torch_gemm.json | tee -a "$bench"
(cd kernels/cuda && LOWBIT_TORCH_GEMM=/tmp/torch_gemm.json ../../.device/bin/kernels_cuda.test -test.run XXX -test.bench "Kernels${KBENCH_FILTER:-}" -test.benchtime 20x 2>&1) | tee -a "$bench" | grep -E "Benchmark|registers"
fi

echo "== runtime tests (the cuda backend: golden logits, batch invariance, quantized numerics; the device-resident executor)"
(cd runtime && timeout "${TEST_TIMEOUT:-500}" ../.device/bin/runtime.test -test.count=1 -test.v 2>&1) >/tmp/runtime_test.log
rc=$?
cat /tmp/runtime_test.log >>"$tests"
grep -E "^(--- FAIL|FAIL|ok|PASS)|GPU vs CPU" /tmp/runtime_test.log | tail -12
[ $rc -eq 0 ] || { echo "FAILED: runtime tests (rc $rc)"; grep -B2 -A10 -- "--- FAIL" /tmp/runtime_test.log | head -60; status=1; }

echo "== engine on the GPU"
(cd runtime/engine && timeout "${TEST_TIMEOUT:-500}" ../../.device/bin/runtime_engine.test -test.count=1 -test.v -test.run CUDA 2>&1) >/tmp/engine_test.log
rc=$?
cat /tmp/engine_test.log >>"$tests"
grep -E "^(--- |FAIL|ok|PASS)|GPU vs CPU" /tmp/engine_test.log | tail -10
[ $rc -eq 0 ] || { echo "FAILED: engine CUDA test"; status=1; }

fi

if part decode; then
echo "== batch-1 decode and TTFT on the device-resident forward (Qwen3-0.6B, Qwen3-8B shapes; DECODE_ACTS: the generated rows' activations)"
# DECODE_ENVS: ';'-separated settings to run each benchmark under in turn
# (";LOWBIT_PDL=0": the default, then without programmatic dependent
# launch); DECODE_LINES: how many lines of each to show (all go to bench);
# DECODE_BINS: the runtime test binaries in .device/bin to run each
# setting with, in turn (default runtime.test; an older build carried
# beside it, say runtime_old.test, measures a change in the same call);
# DECODE_TIMEOUT bounds each run (300 s by default).
IFS=';' read -ra envs <<<"${DECODE_ENVS:-}"
[ ${#envs[@]} -gt 0 ] || envs=("")
for act in ${DECODE_ACTS:-bf16 float32}; do
for size in ${DECODE_SIZES:-qwen3-0.6b qwen3-8b}; do
for setting in "${envs[@]}"; do
for bin in ${DECODE_BINS:-runtime.test}; do
	echo "-- $size, $act activations${setting:+, $setting}, $bin" | tee -a "$bench"
	(cd runtime && env $setting LOWBIT_ACTIVATIONS=$act LOWBIT_BENCH_SIZE=$size timeout "${DECODE_TIMEOUT:-300}" ../.device/bin/$bin -test.run XXX -test.bench CUDADecode -test.benchtime 64x -test.v 2>&1) | tee -a "$bench" | grep -E "Benchmark|wrote|summed|  lb_|  cublas" | head -${DECODE_LINES:-24}
done
done
done
done
fi

if part kernels; then
if [ -n "${NOPDL:-}" ]; then
	echo "== again without programmatic dependent launch (LOWBIT_PDL=0): the GPU tests that chain kernels, then batch-1 decode"
	(cd kernels/cuda && LOWBIT_PDL=0 ../../.device/bin/kernels_cuda.test -test.count=1 -test.v \
		-test.run 'Conformance|GemvKernels|MatMulLt|BF16Producers|TopK' 2>&1) >/tmp/pdl_test.log
	rc1=$?
	(cd runtime && LOWBIT_PDL=0 ../.device/bin/runtime.test -test.count=1 -test.v -test.run CUDA 2>&1) >>/tmp/pdl_test.log
	rc2=$?
	(cd runtime/engine && LOWBIT_PDL=0 ../../.device/bin/runtime_engine.test -test.count=1 -test.v -test.run CUDA 2>&1) >>/tmp/pdl_test.log
	rc3=$?
	sed 's/^/no-pdl: /' /tmp/pdl_test.log >>"$tests"
	grep -E "^(--- FAIL|FAIL|ok|PASS)" /tmp/pdl_test.log | sort | uniq -c
	[ $rc1$rc2$rc3 = 000 ] || { echo "FAILED: GPU tests with LOWBIT_PDL=0"; grep -A8 -- "--- FAIL" /tmp/pdl_test.log | head -30; status=1; }
	for size in qwen3-0.6b qwen3-8b; do
		(cd runtime && LOWBIT_PDL=0 LOWBIT_BENCH_SIZE=$size timeout 300 ../.device/bin/runtime.test -test.run XXX -test.bench CUDADecode -test.benchtime 64x -test.v 2>&1) |
			sed 's/^/no-pdl: /' | tee -a "$bench" | grep -E "Benchmark|summed|  lb_" | head -12
	done
fi

if [ -n "${NCU:-}" ]; then
	echo "== Nsight Compute: one launch each of the decode GEMV and the BF16 prefill and decode attention"
	ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
	for k in ${NCU_KERNELS:-"lb_mma_gemv gemv-bf16/4096x4096" "lb_flash_prefill_d128_q1 attention-prefill-bf16/T=8192" "lb_flash_decode_d128 attention-decode/seqs=32/ctx=8192"}; do
		set -- $k
		(cd kernels/cuda && timeout 120 "$ncu" --clock-control none --kernel-name "$1" --launch-skip 3 --launch-count 1 \
			--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
			--section WarpStateStats --section ComputeWorkloadAnalysis \
			../../.device/bin/kernels_cuda.test -test.run XXX -test.bench "Kernels/$2\$" -test.benchtime 1x 2>&1) >>"$out/ncu.txt"
		grep -E "Duration|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per" "$out/ncu.txt" | tail -5
	done
fi
fi

if part steps; then
echo "== the serve workload's phases on the forward (Qwen3-8B shape: 32 x 8,192 prefilled in chunks of 2,048, then decode steps of the 32)"
[ -f /tmp/torch_gemm.json ] && export LOWBIT_TORCH_GEMM=/tmp/torch_gemm.json
(cd runtime && timeout 400 ../.device/bin/runtime.test -test.run XXX -test.bench CUDAServeSteps -test.benchtime 16x -test.v 2>&1) |
	tee -a "$bench" | grep -E "Benchmark|ms summed|  lb_|  cublas" | head -60
fi

work="$out/workloads.txt"
if part serve; then
# serve NAME DIR PORT [flags]: starts lowbit serve and waits until it answers.
serve() {
	local name=$1 dir=$2 port=$3
	shift 3
	.device/bin/lowbit serve "$dir" --served-model-name "$name" --host 127.0.0.1 --port "$port" "$@" 2>>"$out/serve.log" &
	pid=$!
	for i in $(seq 360); do curl -sf "localhost:$port/health" >/dev/null && return 0; sleep 0.5; done
	echo "FAILED: lowbit serve $name did not come up"; status=1
}
# workload NAME PORT ARGS: lowbit bench against the server on PORT.
workload() {
	local name=$1 port=$2
	shift 2
	echo "-- $name" | tee -a "$work"
	timeout 400 .device/bin/lowbit bench --url "http://127.0.0.1:$port" --ignore-eos --out "/tmp/bench_$name.json" "$@" 2>&1 | tail -16 | tee -a "$work"
	cat "/tmp/bench_$name.json" >>"$work" 2>/dev/null
}
# SERVE_SMALL=0 skips the tiny model and the Qwen3-0.6B shape.
if [ "${SERVE_SMALL:-1}" != 0 ]; then
echo "== lowbit serve on the GPU (tiny model; then a random-dataset bench on the Qwen3-0.6B shape)"
[ -f /tmp/lowbit-bench-qwen3-0.6b/bf16/config.json ] || .device/bin/lowbit synth --arch qwen3 --size qwen3-0.6b --out /tmp/lowbit-bench-qwen3-0.6b/bf16 >/dev/null 2>&1
sd=$(mktemp -d)
.device/bin/lowbit synth --arch qwen3 --out "$sd/tiny" >/dev/null 2>&1
serve tiny "$sd/tiny" 8011 --max-model-len 4096
curl -s localhost:8011/v1/completions -H 'content-type: application/json' \
  -d '{"model":"tiny","prompt":"Hello","max_tokens":8,"temperature":0,"prompt_logprobs":2}' | head -c 600; echo
curl -s localhost:8011/v1/chat/completions -H 'content-type: application/json' \
  -d '{"model":"tiny","messages":[{"role":"user","content":"Hi"}],"max_tokens":8,"stream":true,"stream_options":{"include_usage":true}}' | tail -c 400; echo
kill $pid; wait $pid 2>/dev/null
serve q06 /tmp/lowbit-bench-qwen3-0.6b/bf16 8012 --max-model-len 4096
workload random-0.6b 8012 --workload random --random-input-len 512 --random-output-len 128 --num-prompts 64 --max-concurrency 16
kill $pid; wait $pid 2>/dev/null
# The same with whole logits rows copied back instead of reduced to their
# best entries on the GPU (runtime.CUDAExecutor.TopOnDevice, the default).
LOWBIT_TOP_ON_DEVICE=0 serve q06 /tmp/lowbit-bench-qwen3-0.6b/bf16 8012 --max-model-len 4096
workload random-0.6b-whole-rows 8012 --workload random --random-input-len 512 --random-output-len 128 --num-prompts 64 --max-concurrency 16
kill $pid; wait $pid 2>/dev/null
fi

echo "== LowBArena workloads on the Qwen3-8B shape, scaled (interactive: 8 of 32 prompts; serve: 32 of 64 prompts, 128 of 512 generated; long_context: 16 of 128 prompts and in flight, 64 of 256 generated)"
# Twice: every row on float32 activations (the default), then prompt rows'
# linear layers on BF16 activations through cuBLASLt (--prefill-activations bf16).
# SERVE_BATCHED lists --max-num-batched-tokens values to run each with (0,
# the default: lowbit serve's own).
# PREFILL_ACTS "all" runs every row on BF16 activations (--prefill-activations
# bf16 --decode-activations bf16). SERVE_SCHED lists --scheduling values
# (default: auto, lowbit serve's own). SERVE_KV lists --kv-cache-dtype
# values (default: auto, BF16).
first_sch=${SERVE_SCHED:-auto} first_sch=${first_sch%% *}
for act in ${PREFILL_ACTS:-float32 bf16}; do
for bt in ${SERVE_BATCHED:-0}; do
for sch in ${SERVE_SCHED:-auto}; do
for kv in ${SERVE_KV:-auto}; do
flags=(--kv-cache-dtype "$kv" --scheduling "$sch") tag=$act
[ "$bt" = 0 ] || flags+=(--max-num-batched-tokens "$bt") tag=$act-b$bt
[ "$sch" = auto ] || tag=$tag-$sch
[ "$kv" = auto ] || tag=$tag-kv$kv
echo "-- prefill activations $act, max-num-batched-tokens ${flags[5]:-default}, scheduling $sch, KV cache $kv" | tee -a "$work"
acts=(--prefill-activations "$act")
[ "$act" = all ] && acts=(--prefill-activations bf16 --decode-activations bf16)
serve q8 /tmp/lowbit-bench-qwen3-8b/bf16 8013 --max-model-len 16448 "${acts[@]}" "${flags[@]}"
# Another step size or scheduling changes only the batched workloads:
# interactive once a KV cache type.
[ "$bt" = 0 ] && [ "$sch" = "$first_sch" ] && workload interactive-$tag 8013 --workload random --random-input-len 1024 --random-output-len 256 --num-prompts 8 --max-concurrency 1
workload serve-$tag 8013 --workload random --random-input-len 8192 --random-output-len 128 --num-prompts 32 --max-concurrency 32
workload long_context-$tag 8013 --workload random --random-input-len 16000 --random-output-len 64 --num-prompts 16 --max-concurrency 16
kill $pid; wait $pid 2>/dev/null
done
done
done
done
grep -E "engine" "$out/serve.log" | head -4
fi

if part torch; then
echo "== the PyTorch/transformers baseline on the same Qwen3-8B-shape weights" | tee -a "$work"
timeout 240 python3 scripts/torch_baseline.py --model /tmp/lowbit-bench-qwen3-8b/bf16 --decode 128 --compile 2>&1 | grep -E '^\{|Error|error' | tail -5 | tee -a "$work"
timeout 420 python3 scripts/torch_serve_baseline.py --model /tmp/lowbit-bench-qwen3-8b/bf16 \
	--workload serve:32:8192:128:32 --workload long_context:16:16000:64:16 2>&1 | grep -E '^\{|Error|error' | tail -5 | tee -a "$work"
fi
exit $status
