#!/usr/bin/env python3
"""Times Hugging Face tokenizers (the Rust library transformers uses) on the
corpora of lowbit's tokenizer benchmarks, for a same-machine comparison with
`tokenizer.test -test.bench Encode` (scripts/device_cuda.sh runs both).

    python3 scripts/bench_tokenizer.py --tokenizer DIR --opticks FILE --code-dir tokenizer

Prints one line per corpus: bytes, tokens, median seconds of 7 encodes after
a warm-up, MB/s (10^6 bytes per second, as Go's benchmarks count).
"""
import argparse
import glob
import os
import statistics
import time

from tokenizers import Tokenizer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", required=True, help="directory holding tokenizer.json")
    ap.add_argument("--opticks", required=True)
    ap.add_argument("--code-dir", required=True)
    a = ap.parse_args()
    tok = Tokenizer.from_file(os.path.join(a.tokenizer, "tokenizer.json"))
    code = "".join(open(f, encoding="utf-8").read() for f in sorted(glob.glob(os.path.join(a.code_dir, "*.go"))))
    corpora = {
        "English": open(a.opticks, encoding="utf-8").read(),
        "Code": code,
        "CJK": "我们今天去公园散步，天气非常好！日本語のテキストです。안녕하세요, 세계! " * 2000,
    }
    for name, text in corpora.items():
        n = len(text.encode("utf-8"))
        ids = tok.encode(text, add_special_tokens=False).ids  # warm-up (fills the BPE cache)
        times = []
        for _ in range(7):
            t = time.perf_counter()
            tok.encode(text, add_special_tokens=False)
            times.append(time.perf_counter() - t)
        s = statistics.median(times)
        print(f"hf-tokenizers {name}: {n} bytes, {len(ids)} tokens, {s:.4f} s, {n / s / 1e6:.2f} MB/s")


if __name__ == "__main__":
    main()
