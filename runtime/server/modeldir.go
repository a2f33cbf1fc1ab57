package server

import (
	"fmt"
	"os"
	"slices"

	"github.com/lowbit-ai/lowbit/checkpoint"
	"github.com/lowbit-ai/lowbit/runtime"
	"github.com/lowbit-ai/lowbit/tokenizer"
)

// OptionsFromModelDir loads what a Server needs from a Hugging Face model
// directory: the tokenizer (from tokenizerDir, or dir when ""), its chat
// template, config.json's vocab_size and max_position_embeddings (as
// MaxModelLen, which the caller lowers to the engine's), and the EOS ids.
// generationConfig is vLLM's --generation-config: "auto" takes default
// sampling and extra EOS ids from dir's generation_config.json; a directory
// takes them from the generation_config.json there (LowBArena passes the
// source model's); "vllm" ignores the file (vLLM's defaults, and only the
// tokenizer's EOS). The Engine is
// left for the caller; ServedModelNames is dir, as vLLM names a model by
// the path it was given.
func OptionsFromModelDir(dir, tokenizerDir, generationConfig string) (Options, error) {
	if tokenizerDir == "" {
		tokenizerDir = dir
	}
	var o Options
	genDir := ""
	switch generationConfig {
	case "auto":
		genDir = dir
	case "vllm":
	default:
		if fi, err := os.Stat(generationConfig); err != nil || !fi.IsDir() {
			return o, fmt.Errorf("server: --generation-config %q: want \"auto\", \"vllm\" or a directory holding generation_config.json", generationConfig)
		}
		genDir = generationConfig
	}
	tok, err := tokenizer.LoadDir(tokenizerDir)
	if err != nil {
		return o, err
	}
	cfg, err := checkpoint.ReadConfig(dir)
	if err != nil {
		return o, err
	}
	o = Options{
		Tokenizer:        tok,
		ServedModelNames: []string{dir},
		ModelRoot:        dir,
		MaxModelLen:      cfg.Text.MaxPositionEmbeddings,
		VocabSize:        cfg.Text.VocabSize,
	}
	if tok.Config != nil {
		o.ChatTemplate = tok.Config.ChatTemplate
	}
	if id, ok := tok.EOSID(); ok {
		o.EOSIDs = []int{id}
	}
	if genDir != "" {
		gc, err := runtime.ReadGenerationConfig(genDir)
		if err != nil {
			return o, err
		}
		samp := gc.Sampling
		o.DefaultSampling = &samp
		for _, id := range gc.StopIDs {
			if !slices.Contains(o.EOSIDs, id) {
				o.EOSIDs = append(o.EOSIDs, id)
			}
		}
	}
	return o, nil
}
