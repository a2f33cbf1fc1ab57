#!/usr/bin/env python3
"""PyTorch/transformers baseline for LowBArena's batched workloads (serve,
long_context) on the same weights lowbit serves: what plain transformers
does with a static KV cache and SDPA when C requests are in flight — C
prompts of L random tokens prefilled together (one forward), then D decode
steps for the batch, greedy, no EOS. A workload of N prompts is N / C such
batches one after another; each batch is timed with CUDA events after a
warm-up, the decode steps both eager and under torch.compile
(reduce-overhead) where it works.

    python3 scripts/torch_serve_baseline.py --model DIR \
        --workload serve:32:8192:128:32 --workload long_context:16:16000:64:16

A workload is name:N:L:D:C. Prints one JSON object per workload:
prefill_s (one batch), decode_step_s per mode, and workload_s per mode =
N / C · (prefill_s + D · decode_step_s).
"""
import argparse
import json
import time

import torch
from transformers import AutoModelForCausalLM, StaticCache


def timed(fn):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    out = fn()
    e.record()
    torch.cuda.synchronize()
    return out, s.elapsed_time(e) / 1e3


def run(model, name, n, prompt, decode, conc, compile_ok):
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, min(vocab, 151643), (conc, prompt), generator=g).cuda()
    cache = StaticCache(config=model.config, max_batch_size=conc, max_cache_len=prompt + decode + 8,
                        device="cuda", dtype=torch.bfloat16)

    def prefill(x):
        cache.reset()
        pos = torch.arange(x.shape[1], device="cuda")
        with torch.no_grad():
            out = model(input_ids=x, past_key_values=cache, cache_position=pos, use_cache=True, logits_to_keep=1)
        return out.logits[:, -1].argmax(-1, keepdim=True)

    def steps(fwd, tok, start, k):
        for i in range(k):
            pos = torch.tensor([start + i], device="cuda")
            with torch.no_grad():
                out = fwd(input_ids=tok, past_key_values=cache, cache_position=pos, use_cache=True)
            tok = out.logits[:, -1].argmax(-1, keepdim=True)
        return tok

    prefill(ids[:, :128])  # warm-up: kernels and allocator
    torch.cuda.synchronize()
    tok, prefill_s = timed(lambda: prefill(ids))
    res = {"workload": name, "prompts": n, "prompt": prompt, "decode": decode, "concurrency": conc,
           "prefill_s": round(prefill_s, 3), "decode_step_s": {}, "workload_s": {}}
    modes = [("eager", model.forward)]
    if compile_ok:
        modes.append(("compile", torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)))
    for mode, fwd in modes:
        try:
            tok0 = prefill(ids)
            t = time.time()
            steps(fwd, tok0, prompt, 3)  # warm-up (compiles)
            torch.cuda.synchronize()
            res.setdefault("compile_s", {})[mode] = round(time.time() - t, 1)
            k = min(decode, 32)
            _, dt = timed(lambda: steps(fwd, tok0, prompt + 3, k))
        except Exception as e:  # a mode that does not work is reported, not fatal
            res.setdefault("errors", {})[mode] = str(e)[:200]
            continue
        step = dt / k
        res["decode_step_s"][mode] = round(step, 5)
        res["workload_s"][mode] = round(n / conc * (prefill_s + decode * step), 2)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--workload", action="append", required=True, help="name:N:L:D:C")
    ap.add_argument("--no-compile", action="store_true")
    a = ap.parse_args()
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.bfloat16, attn_implementation="sdpa").cuda().eval()
    for w in a.workload:
        name, n, prompt, decode, conc = w.split(":")
        try:
            res = run(model, name, int(n), int(prompt), int(decode), int(conc), not a.no_compile)
        except torch.OutOfMemoryError as e:
            res = {"workload": name, "error": "out of memory: " + str(e)[:200]}
        res["torch"] = torch.__version__
        print(json.dumps(res), flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
