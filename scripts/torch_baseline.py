#!/usr/bin/env python3
"""PyTorch/transformers baseline for lowbit's CUDA benchmarks, on the same
weights (a synthetic checkpoint lowbit wrote): time to first token of a
1,024-token prompt and batch-1 decode tokens/s, BF16, SDPA attention, a
static KV cache, eager and (where it works within the time given)
torch.compile.

    python3 scripts/torch_baseline.py --model DIR [--decode 128] [--compile]

Prints one JSON object per mode. Timings use CUDA events after warm-up.
"""
import argparse
import json
import time

import torch
from transformers import AutoModelForCausalLM, StaticCache


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt", type=int, default=1024)
    ap.add_argument("--decode", type=int, default=128)
    ap.add_argument("--compile", action="store_true")
    a = ap.parse_args()
    t0 = time.time()
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.bfloat16, attn_implementation="sdpa").cuda().eval()
    load_s = time.time() - t0
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, min(vocab, 151643), (1, a.prompt), generator=g).cuda()
    modes = ["eager"] + (["compile"] if a.compile else [])
    for mode in modes:
        fwd = model.forward
        if mode == "compile":
            fwd = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
        cache = StaticCache(config=model.config, max_batch_size=1, max_cache_len=a.prompt + a.decode + 8, device="cuda", dtype=torch.bfloat16)

        def prefill():
            cache.reset()
            pos = torch.arange(a.prompt, device="cuda")
            with torch.no_grad():
                out = model(input_ids=ids, past_key_values=cache, cache_position=pos, use_cache=True)
            return out.logits[:, -1].argmax(-1, keepdim=True)

        def decode(tok, n):
            for i in range(n):
                pos = torch.tensor([a.prompt + i], device="cuda")
                with torch.no_grad():
                    out = fwd(input_ids=tok, past_key_values=cache, cache_position=pos, use_cache=True)
                tok = out.logits[:, -1].argmax(-1, keepdim=True)
            return tok

        tok = prefill()
        decode(tok, 4)  # warm-up (compiles in compile mode)
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        ttfts = []
        for _ in range(3):
            s.record()
            tok = prefill()
            e.record()
            torch.cuda.synchronize()
            ttfts.append(s.elapsed_time(e) / 1e3)
        s.record()
        decode(tok, a.decode)
        e.record()
        torch.cuda.synchronize()
        dec_s = s.elapsed_time(e) / 1e3
        print(json.dumps({"mode": mode, "model": a.model, "load_s": round(load_s, 1), "prompt": a.prompt,
                          "ttft_s": sorted(ttfts)[1], "decode_tokens": a.decode,
                          "decode_tok_s": a.decode / dec_s, "torch": torch.__version__}), flush=True)


if __name__ == "__main__":
    main()
