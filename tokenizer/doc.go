// Package tokenizer loads a Hugging Face tokenizer.json and runs its
// byte-level BPE tokenizer in pure Go (no cgo), reproducing the Rust
// `tokenizers` library (0.23) id for id. It is built for, and tested
// against, Qwen3's tokenizer (internal/qwen3tok); the golden test
// (golden_test.go, data from scripts/golden_tokenizer.py) requires exact
// equality with `tokenizers` and `transformers` on a varied corpus.
//
// # Why not github.com/sugarme/tokenizer
//
// Its loader panics on Qwen3's tokenizer.json: the Split pre-tokenizer's
// regex contains the lookahead `\s+(?!\S)`, which Go's regexp (RE2) does not
// support. This package instead implements Qwen2/Qwen3's pre-tokenizer regex
// (and Llama 3's and GPT-2's) as hand-written scanners that give exactly the
// matches of the Oniguruma engine the Rust library uses (see pretok.go).
//
// # Pipeline (as tokenizers' TokenizerImpl::encode)
//
//  1. Invalid UTF-8 in the input is replaced first, one U+FFFD per maximal
//     invalid subsequence, as Python's bytes.decode("utf-8", "replace") does:
//     Python callers cannot hand invalid UTF-8 to `tokenizers`, so Encode(s)
//     equals HF's encode of s decoded that way. Encode never panics.
//  2. Added tokens are found on the raw text (leftmost-longest, as the
//     AddedVocabulary's Aho-Corasick automaton; single_word, lstrip and rstrip
//     honoured) and are never split. Special tokens are matched only when
//     EncodeOptions.ParseSpecial is set (HF's encode_special_tokens=false,
//     the default, and what vLLM does); normalized added tokens are matched
//     after normalization.
//  3. Each remaining piece is normalized (NFC/NFD/NFKC/NFKD via
//     golang.org/x/text/unicode/norm), pre-tokenized (Split, ByteLevel,
//     Sequence), and every pre-token is run through the BPE model (merge
//     ranks, HF's exact merge order, per-word cache).
//  4. A TemplateProcessing post-processor adds its special tokens when
//     EncodeOptions.AddSpecial is set; ByteLevel post-processing changes
//     no ids. Qwen3 adds none.
//
// Decode maps tokens back to bytes (byte-level decoder) and renders invalid
// UTF-8 as Rust's String::from_utf8_lossy does (the `errors: replace` of
// tokenizer_config.json): one U+FFFD per maximal invalid subsequence.
// StreamDecoder does the same incrementally, holding back an incomplete
// UTF-8 sequence at the end, as vLLM's incremental detokenizer does.
//
// Components not listed above (other normalizers, models, decoders,
// truncation, padding, BPE dropout) make Load fail with an error naming them
// rather than tokenize differently from Hugging Face. Split patterns other
// than the built-in scanners are compiled with Go's regexp after rewriting
// Oniguruma's Unicode \s, \d and \w classes; patterns RE2 cannot express
// (lookaround, backreferences, atomic groups) are rejected with an error
// naming the pattern.
//
// Unicode: the pre-tokenizer's classes (\p{L}, \p{N}, \s) are Go's tables
// (Unicode 15.0) corrected to those of the Oniguruma inside tokenizers 0.23.2
// (Unicode 16.0) by unicode_extra.go; TestHFCharClasses checks all 1.1M code
// points against tables dumped from tokenizers itself. NFC is x/text/norm's,
// checked the same way for every single code point (TestHFNormalizer), but
// without its Stream-Safe Text Format step (it inserts U+034F after 30
// combining marks; the Rust crate does not), see normalize.go. Canonical
// combining classes of marks assigned after Unicode 15.0 may still differ.
// Oniguruma's multi-character case folds (ß ~ ss) in (?i) groups do not
// occur in the built-in patterns; the one single-character fold that does
// (ſ, U+017F, matches s in 's) is handled.
//
// Loading parses tokenizer.json's vocab and merges with a small dedicated
// JSON reader (jsonscan.go); Qwen3's loads in about 0.25 s.
package tokenizer
