#!/usr/bin/env python3
"""Golden outputs of the tokenizer package: Hugging Face `tokenizers`' encode
and decode of Qwen3's tokenizer on a committed corpus.

What it does
    Gunzips internal/qwen3tok/tokenizer.json.gz into a temporary directory
    with internal/qwen3tok/tokenizer_config.json, loads it with
    tokenizers.Tokenizer.from_file and, for every line of
    testdata/golden/tokenizer/corpus.jsonl ({"name", "text"}), records

        ids            tokenizer.encode(text, add_special_tokens=True).ids
        ids_split      the same with encode_special_tokens=True (special tokens
                       in the text are not parsed: split_special_tokens)
        decoded        tokenizer.decode(ids, skip_special_tokens=False)
        decoded_skip   tokenizer.decode(ids, skip_special_tokens=True)

    in --out (one JSON object per line, after a {"meta": ...} line naming the
    library versions). tokenizer/golden_test.go requires the Go tokenizer to
    give exactly these, line by line.

    As a cross-check, transformers.AutoTokenizer.from_pretrained(tmpdir)
    .encode(text) (what vLLM calls) must equal ids for every line: the script
    writes its outputs first, then exits non-zero listing any line where it
    does not.

    It also writes --unicode-out: the code points that the Oniguruma engine
    built into tokenizers puts in \\p{L}, \\p{N} and \\s (as ranges, read off
    tokenizers' own Split pre-tokenizer over every code point), and every
    code point that tokenizers' NFC normalizer changes when alone, with its
    normalization. The Go pre-tokenizer's character classes and normalizer
    are tested against it (Go's Unicode tables may be of another Unicode
    version than the Rust crates').

    The corpus is committed, not generated here: English prose, code with
    indentation and tabs, numbers, contractions in mixed case, whitespace
    runs, CJK, emoji and ZWJ sequences, Arabic/Hebrew, NFC vs NFD forms,
    special tokens inside text and malformed look-alikes, very long words,
    the empty string, 2000 spaces, probes of recent Unicode versions, and 50
    seeded random mixes of every character class the pre-tokenizer regex
    distinguishes.

Requirements
    python3 with tokenizers 0.23 and transformers 5.17 (no network: the
    tokenizer is read from the repository). The GPU machine's image has both.
    --dry-run only reads and checks the corpus (no tokenizers needed).

Regenerate (from the repository root)
    python3 scripts/golden_tokenizer.py --out testdata/golden/tokenizer/qwen3.jsonl
which also writes testdata/golden/tokenizer/hf_unicode.json.
"""

import argparse
import gzip
import json
import os
import shutil
import sys
import tempfile

# transformers must not try the network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "testdata", "golden", "tokenizer", "corpus.jsonl")
TOKENIZER_GZ = os.path.join(ROOT, "internal", "qwen3tok", "tokenizer.json.gz")
TOKENIZER_CONFIG = os.path.join(ROOT, "internal", "qwen3tok", "tokenizer_config.json")

# Characters escaped in the output even though JSON allows them raw, so that
# every record stays on one line for any line splitter and stays visible.
ESCAPE = ["\u2028", "\u2029", "\x85", "\u200b", "\u200c", "\u200d", "\ufeff", "\u2060",
          "\u00a0", "\u3000", "\u180e", "\u200e", "\u200f", "\u202a", "\u202b", "\u202c",
          "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069", "\x7f"]


def dump_line(obj):
    s = json.dumps(obj, ensure_ascii=False)
    for ch in ESCAPE:
        s = s.replace(ch, "\\u%04x" % ord(ch))
    return s + "\n"


def read_corpus(path):
    with open(path, "r", encoding="utf-8", newline="") as f:
        data = f.read()
    entries, names = [], set()
    for n, line in enumerate(data.split("\n"), 1):
        if not line.strip():
            continue
        e = json.loads(line)
        if set(e) != {"name", "text"} or not isinstance(e["text"], str):
            raise SystemExit("%s:%d: want {\"name\", \"text\"}" % (path, n))
        if e["name"] in names:
            raise SystemExit("%s:%d: duplicate name %r" % (path, n, e["name"]))
        names.add(e["name"])
        e["text"].encode("utf-8")  # no lone surrogates: Rust strings are UTF-8
        entries.append(e)
    return entries


def ranges(cps):
    out = []
    for c in sorted(cps):
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def hf_unicode():
    """Code points in \\p{L}, \\p{N}, \\s according to tokenizers' regex
    engine, and the single code points its NFC normalizer changes."""
    from tokenizers import Regex, normalizers, pre_tokenizers

    text = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    out = {}
    for name, pattern in (("L", r"\p{L}"), ("N", r"\p{N}"), ("S", r"\s")):
        # invert=True + removed keeps exactly the matches (single characters).
        split = pre_tokenizers.Split(Regex(pattern), behavior="removed", invert=True)
        pieces = split.pre_tokenize_str(text)
        cps = set()
        for piece, _ in pieces:
            if len(piece) != 1:
                raise SystemExit("class %s: unexpected piece %r" % (name, piece))
            cps.add(ord(piece))
        out[name] = ranges(cps)
        print("class %s: %d code points" % (name, len(cps)))
    nfc = normalizers.NFC()
    changed = []
    for c in range(0x110000):
        if 0xD800 <= c <= 0xDFFF:
            continue
        n = nfc.normalize_str(chr(c))
        if n != chr(c):
            changed.append([c, n])
    out["NFC"] = changed
    print("NFC changes %d single code points" % len(changed))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "testdata", "golden", "tokenizer", "qwen3.jsonl"))
    ap.add_argument("--unicode-out", default=None,
                    help="default: hf_unicode.json beside --out")
    ap.add_argument("--dry-run", action="store_true", help="only read and check the corpus")
    args = ap.parse_args()
    unicode_out = args.unicode_out or os.path.join(os.path.dirname(os.path.abspath(args.out)), "hf_unicode.json")

    corpus = read_corpus(CORPUS)
    print("corpus: %d lines, %d characters" % (len(corpus), sum(len(e["text"]) for e in corpus)))
    if args.dry_run:
        return 0

    import tokenizers
    import transformers
    print("tokenizers", tokenizers.__version__, "transformers", transformers.__version__)

    tmp = tempfile.mkdtemp(prefix="qwen3tok-")
    try:
        with gzip.open(TOKENIZER_GZ, "rb") as src, open(os.path.join(tmp, "tokenizer.json"), "wb") as dst:
            shutil.copyfileobj(src, dst)
        shutil.copy(TOKENIZER_CONFIG, os.path.join(tmp, "tokenizer_config.json"))

        tok = tokenizers.Tokenizer.from_file(os.path.join(tmp, "tokenizer.json"))
        tok_split = tokenizers.Tokenizer.from_file(os.path.join(tmp, "tokenizer.json"))
        tok_split.encode_special_tokens = True

        failures = []
        try:
            auto = transformers.AutoTokenizer.from_pretrained(tmp)
            print("AutoTokenizer:", type(auto).__name__)
        except Exception as exc:  # still write the tokenizers golden
            auto = None
            failures.append("AutoTokenizer.from_pretrained failed: %r" % (exc,))

        records = []
        for e in corpus:
            text = e["text"]
            ids = tok.encode(text, add_special_tokens=True).ids
            rec = {
                "name": e["name"],
                "text": text,
                "ids": ids,
                "ids_split": tok_split.encode(text, add_special_tokens=True).ids,
                "decoded": tok.decode(ids, skip_special_tokens=False),
                "decoded_skip": tok.decode(ids, skip_special_tokens=True),
            }
            records.append(rec)
            if auto is not None:
                got = auto.encode(text)
                if list(got) != ids:
                    failures.append("%s: transformers encode %s != tokenizers %s" % (e["name"], list(got)[:40], ids[:40]))
                dec = auto.decode(ids, skip_special_tokens=False)
                if dec != rec["decoded"]:
                    print("note: %s: transformers decode differs: %r vs %r" % (e["name"], dec[:80], rec["decoded"][:80]))

        meta = {"meta": {"tokenizers": tokenizers.__version__, "transformers": transformers.__version__,
                         "python": sys.version.split()[0], "corpus_lines": len(records),
                         "vocab_size": tok.get_vocab_size(with_added_tokens=True)}}
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w", encoding="utf-8", newline="\n") as f:
            f.write(dump_line(meta))
            for rec in records:
                f.write(dump_line(rec))
        print("wrote", args.out, len(records), "records")

        tables = hf_unicode()
        tables["meta"] = meta["meta"]
        with open(unicode_out, "w", encoding="utf-8") as f:
            json.dump(tables, f, separators=(",", ":"), ensure_ascii=True)
            f.write("\n")
        print("wrote", unicode_out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    if failures:
        print("CROSS-CHECK FAILED (%d):" % len(failures))
        for msg in failures:
            print("  " + msg)
        return 1
    print("cross-check: transformers AutoTokenizer.encode == tokenizers encode on all %d lines" % len(records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
