// Package qwen3tok embeds Qwen3's tokenizer files (see PROVENANCE.md), so that
// every synthetic model lowbit writes carries the real tokenizer and tests need
// no network. scripts/fetch_qwen3_tokenizer.sh regenerates the files.
package qwen3tok

import (
	"bytes"
	"compress/gzip"
	_ "embed"
	"fmt"
	"io"
)

//go:embed tokenizer.json.gz
var tokenizerJSONGz []byte

//go:embed tokenizer_config.json
var tokenizerConfigJSON []byte

// Vocabulary facts of the embedded tokenizer. Qwen3 checkpoints pad their
// embedding to VocabSize rows, more than the tokenizer's NumTokens ids.
const (
	NumTokens = 151669 // ids 0..151668: 151643 BPE tokens and 26 added tokens
	VocabSize = 151936 // the vocab_size of Qwen3 configs
	EOSChat   = 151645 // <|im_end|>
	EOSText   = 151643 // <|endoftext|>, also the pad token
)

// Files returns the tokenizer files by their Hugging Face names
// (tokenizer.json and tokenizer_config.json), decompressed.
func Files() (map[string][]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(tokenizerJSONGz))
	if err != nil {
		return nil, fmt.Errorf("qwen3tok: embedded tokenizer.json.gz: %w", err)
	}
	tok, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("qwen3tok: embedded tokenizer.json.gz: %w", err)
	}
	return map[string][]byte{
		"tokenizer.json":        tok,
		"tokenizer_config.json": bytes.Clone(tokenizerConfigJSON),
	}, nil
}

// GenerationConfig returns the generation_config.json of Qwen3-8B, the
// sampling defaults a server applies when a request omits them.
func GenerationConfig() []byte {
	return []byte(`{
  "bos_token_id": 151643,
  "do_sample": true,
  "eos_token_id": [
    151645,
    151643
  ],
  "pad_token_id": 151643,
  "temperature": 0.6,
  "top_k": 20,
  "top_p": 0.95,
  "transformers_version": "4.51.0"
}
`)
}
