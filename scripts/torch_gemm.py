#!/usr/bin/env python3
"""The PyTorch matmul baseline for lowbit's tensor-core GEMM benchmark
(kernels/cuda BenchmarkKernels, gemm-bf16): y = x·wᵀ for T tokens on the
Qwen3-8B projection shapes, timed with CUDA events after warm-up, in BF16
(cuBLAS, BF16 activations: the usual serving numerics) and in float32 with
TF32 off (float32 activations: the numerics lowbit's kernel keeps).

    python3 scripts/torch_gemm.py --tokens 1024 > torch_gemm.json

Prints one JSON object: {"T": .., "shapes": {"OUTxIN": {"bf16_tflops": ..,
"fp32_tflops": ..}}, "sdpa": {"T": {...}}}: sdpa is causal prefill
attention (torch.nn.functional.scaled_dot_product_attention, 32 query heads,
8 KV heads, head_dim 128, the default backend choice) over T tokens, T 1024
and 8192, FLOPs counted as 4·H·Dh per (query, key) pair at or before it.
"""
import argparse
import json

import torch


def tflops(x, w, reps=20):
    for _ in range(3):
        torch.matmul(x, w.t())
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(reps):
        torch.matmul(x, w.t())
    e.record()
    torch.cuda.synchronize()
    sec = s.elapsed_time(e) / 1e3 / reps
    return 2 * x.shape[0] * w.shape[0] * w.shape[1] / sec / 1e12


def sdpa_tflops(T, dtype, reps=10):
    H, KVH, Dh = 32, 8, 128
    q = torch.randn(1, H, T, Dh, device="cuda", dtype=dtype)
    k = torch.randn(1, KVH, T, Dh, device="cuda", dtype=dtype)
    v = torch.randn(1, KVH, T, Dh, device="cuda", dtype=dtype)
    f = torch.nn.functional.scaled_dot_product_attention
    for _ in range(3):
        f(q, k, v, is_causal=True, enable_gqa=True)
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(reps):
        f(q, k, v, is_causal=True, enable_gqa=True)
    e.record()
    torch.cuda.synchronize()
    sec = s.elapsed_time(e) / 1e3 / reps
    return 4 * H * Dh * T * (T + 1) / 2 / sec / 1e12


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=1024)
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    out = {"T": a.tokens, "device": torch.cuda.get_device_name(), "torch": torch.__version__, "shapes": {}}
    for o, i in [(4096, 4096), (12288, 4096), (4096, 12288)]:
        x = torch.randn(a.tokens, i, device="cuda")
        w = torch.randn(o, i, device="cuda") * 0.02
        out["shapes"][f"{o}x{i}"] = {
            "bf16_tflops": round(tflops(x.bfloat16(), w.bfloat16()), 1),
            "fp32_tflops": round(tflops(x, w), 1),
        }
    out["sdpa"] = {}
    for T in (1024, 8192):
        out["sdpa"][str(T)] = {
            "bf16_tflops": round(sdpa_tflops(T, torch.bfloat16), 1),
            "fp32_tflops": round(sdpa_tflops(T, torch.float32), 1),
        }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
