#!/usr/bin/env python3
"""Checks lowbit's synthetic checkpoints against Hugging Face's own loaders.

For each model directory given (written by `lowbit synth`), this script
  1. reads every .safetensors file with the `safetensors` library and checks
     that its tensors, dtypes and shapes match what `lowbit inspect --json
     --tensors` reported (pass the JSON files with --inspect);
  2. loads the model with transformers, strictly: every tensor of the
     checkpoint must be one transformers expects, with the shape it expects
     (mismatched shapes are an error), and every parameter transformers
     expects must be in the checkpoint, except the vision tower of the
     multimodal Qwen3.5 classes, which synthetic checkpoints omit;
  3. runs a forward pass on a tokenized prompt and requires finite logits
     over the full vocabulary;
  4. loads the tokenizer with AutoTokenizer and checks the chat template
     renders.
It prints one line per model and exits non-zero if any check failed.

Run on the GPU machine (torch 2.11, transformers 5.17 installed there):
  python3 scripts/check_synth_hf.py DIR... [--inspect DIR/inspect.json ...]
scripts/device_check.sh builds the models and calls it.
"""
import argparse
import json
import os
import sys

import torch
import transformers
from safetensors import safe_open


def check_files(d, inspect_path):
    seen = {}
    for name in sorted(os.listdir(d)):
        if not name.endswith(".safetensors"):
            continue
        with safe_open(os.path.join(d, name), framework="pt") as f:
            for key in f.keys():
                sl = f.get_slice(key)
                seen[key] = (str(sl.get_dtype()), list(sl.get_shape()))
    if inspect_path:
        with open(inspect_path) as fh:
            ins = json.load(fh)
        want = {t["name"]: (t["dtype"], t["shape"]) for t in ins["tensor_list"]}
        if want != seen:
            diff = sorted(k for k in set(want) | set(seen) if want.get(k) != seen.get(k))[:5]
            raise AssertionError(f"safetensors library and lowbit inspect disagree on {diff}")
    return seen


def check_model(d):
    cfg = transformers.AutoConfig.from_pretrained(d)
    cls = getattr(transformers, cfg.architectures[0])
    model, info = cls.from_pretrained(d, output_loading_info=True, dtype=torch.float32)
    missing = [k for k in info.get("missing_keys", []) if not k.startswith(("model.visual.", "visual."))]
    unexpected = list(info.get("unexpected_keys", []))
    mismatched = list(info.get("mismatched_keys", []))
    if missing or unexpected or mismatched:
        raise AssertionError(f"missing {missing[:5]} unexpected {unexpected[:5]} mismatched {mismatched[:5]}")
    tok = transformers.AutoTokenizer.from_pretrained(d)
    msgs = [{"role": "user", "content": "Name three prime numbers."}]
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    if "<|im_start|>assistant" not in text:
        raise AssertionError(f"chat template rendered {text!r}")
    ids = tok(text, return_tensors="pt").input_ids
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    vocab = cfg.get_text_config().vocab_size
    if logits.shape[-1] != vocab or not torch.isfinite(logits).all():
        raise AssertionError(f"logits shape {tuple(logits.shape)} (vocab {vocab}), finite={bool(torch.isfinite(logits).all())}")
    return cls.__name__, ids.shape[1], float(logits.float().std())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--inspect", nargs="*", default=[], help="lowbit inspect --json --tensors output, one per dir")
    a = ap.parse_args()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    failed = 0
    for i, d in enumerate(a.dirs):
        try:
            tensors = check_files(d, a.inspect[i] if i < len(a.inspect) else None)
            cls, n, std = check_model(d)
            print(f"PASS {d}: {len(tensors)} tensors; {cls} loaded strictly; forward over {n} tokens, logits std {std:.3g}")
        except Exception as e:  # report every model, then fail
            failed += 1
            print(f"FAIL {d}: {type(e).__name__}: {e}")
    print(f"{len(a.dirs) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
