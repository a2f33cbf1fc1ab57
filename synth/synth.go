package synth

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/lowbit-ai/lowbit/checkpoint"
	"github.com/lowbit-ai/lowbit/format"
	"github.com/lowbit-ai/lowbit/internal/modelconfigs"
	"github.com/lowbit-ai/lowbit/internal/qwen3tok"
)

// Tiny is the size name of the small test model every architecture has.
const Tiny = "tiny"

// sizes maps each full size name to its published config (in
// internal/modelconfigs) and the architecture that config declares.
var sizes = []struct {
	name string
	arch checkpoint.Arch
}{
	{"qwen3-0.6b", checkpoint.Qwen3},
	{"qwen3-8b", checkpoint.Qwen3},
	{"qwen3-30b-a3b", checkpoint.Qwen3MoE},
	{"qwen3.5-27b", checkpoint.Qwen35},
	{"qwen3.6-35b-a3b", checkpoint.Qwen35MoE},
	{"minicpm5-2b", checkpoint.Llama},
}

// tinyBase names the published config each architecture's tiny model is cut
// down from, so that it keeps every field the real model has.
var tinyBase = map[checkpoint.Arch]string{
	checkpoint.Qwen3:     "qwen3-8b",
	checkpoint.Qwen3MoE:  "qwen3-30b-a3b",
	checkpoint.Qwen35:    "qwen3.5-27b",
	checkpoint.Qwen35MoE: "qwen3.6-35b-a3b",
	checkpoint.Llama:     "minicpm5-2b",
}

// Sizes lists the size names Write accepts for arch: Tiny and the public
// models of that architecture.
func Sizes(arch checkpoint.Arch) []string {
	names := []string{Tiny}
	for _, s := range sizes {
		if s.arch == arch {
			names = append(names, s.name)
		}
	}
	return names
}

// Options says which checkpoint Write makes.
type Options struct {
	Arch checkpoint.Arch
	Size string // Tiny or a public model's name, see Sizes
	Seed uint64
	// MaxShardBytes bounds each shard's tensor bytes; zero means Hugging
	// Face's default of 5 GB.
	MaxShardBytes int64
	// Progress, if set, is called as tensor bytes are written.
	Progress func(written, total int64)
}

// Result describes a written checkpoint.
type Result struct {
	Dir     string
	Config  *checkpoint.Config
	Tensors int
	Bytes   int64 // tensor data bytes
	Shards  int
}

// Write generates the checkpoint opts describes into dir, which must not
// exist or be empty: config.json, generation_config.json, the Qwen3
// tokenizer files, and the BF16 weights in Hugging Face's sharded layout.
// The weights are written last, shard by shard and atomically, so an
// interrupted Write never leaves a directory that looks complete.
//
// Every synthetic model carries Qwen3's tokenizer (151669 ids) and its special
// token ids in config.json. So that every id is valid, the MiniCPM5-2B size
// has Qwen3's vocab_size of 151936 instead of its own 130560: its embedding
// and output head are 16% larger than the real model's (4% of its weights).
func Write(dir string, opts Options) (*Result, error) {
	cfgJSON, err := configJSON(opts.Arch, opts.Size)
	if err != nil {
		return nil, err
	}
	cfg, err := checkpoint.ParseConfig(cfgJSON)
	if err != nil {
		return nil, fmt.Errorf("synth: generated config: %w", err)
	}
	d, err := dimsOf(cfg)
	if err != nil {
		return nil, err
	}
	if err := checkpoint.NewOutputDir(dir); err != nil {
		return nil, err
	}
	tok, err := qwen3tok.Files()
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{
		"config.json":            cfgJSON,
		"generation_config.json": qwen3tok.GenerationConfig(),
	}
	for name, b := range tok {
		files[name] = b
	}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if err := checkpoint.WriteFileAtomic(filepath.Join(dir, name), files[name], 0o644); err != nil {
			return nil, fmt.Errorf("synth: %w", err)
		}
	}

	tensors := plan(d)
	specs := make([]checkpoint.TensorSpec, len(tensors))
	for i, t := range tensors {
		specs[i] = checkpoint.TensorSpec{Name: t.name, DType: format.BF16, Shape: t.shape}
	}
	res, err := checkpoint.WriteTensors(dir, specs, func(i int, w io.Writer) error {
		return writeTensor(w, tensors[i], opts.Seed)
	}, checkpoint.WriteOptions{
		MaxShardBytes: opts.MaxShardBytes,
		Metadata:      map[string]string{"format": "pt"},
		Progress:      opts.Progress,
	})
	if err != nil {
		return nil, fmt.Errorf("synth: %w", err)
	}
	return &Result{Dir: dir, Config: cfg, Tensors: len(specs), Bytes: res.TotalBytes, Shards: len(res.Shards)}, nil
}

// configJSON returns the config.json of the model: the published config for a
// full size, or for Tiny the published config of the architecture's base model
// with its sizes cut down and every other field kept.
func configJSON(arch checkpoint.Arch, size string) ([]byte, error) {
	if !slices.Contains(Sizes(arch), size) {
		all := []string{Tiny}
		for _, s := range sizes {
			all = append(all, s.name+" ("+s.arch.String()+")")
		}
		return nil, fmt.Errorf("synth: size %q is not one of architecture %s's; sizes: %s", size, arch, strings.Join(all, ", "))
	}
	base := size
	if size == Tiny {
		base = tinyBase[arch]
	}
	raw, err := modelconfigs.Get(base)
	if err != nil {
		return nil, fmt.Errorf("synth: %w", err)
	}
	var top map[string]any
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, fmt.Errorf("synth: config of %s: %w", base, err)
	}
	text := top
	if tc, ok := top["text_config"].(map[string]any); ok {
		text = tc
	}
	// The tokenizer is Qwen3's, so the special ids must be its ids, and the
	// vocabulary must hold them all: MiniCPM5's 130560 rows grow to Qwen3's
	// 151936.
	text["bos_token_id"] = qwen3tok.EOSText
	text["eos_token_id"] = qwen3tok.EOSChat
	if v, ok := text["vocab_size"].(float64); ok && v < qwen3tok.VocabSize {
		text["vocab_size"] = qwen3tok.VocabSize
	}
	if size == Tiny {
		shrink(top, text)
	}
	out, err := json.MarshalIndent(top, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

// shrink cuts a published config down to the tiny test size: small enough
// that a test writes and runs it in well under a second, large enough that
// every code path (several heads per KV head, several experts per token,
// every layer type, more than one RoPE frequency) is exercised. The
// vocabulary is Qwen3's padded 151936, so that every tokenizer id is valid.
func shrink(top, text map[string]any) {
	set := func(key string, v any) {
		if _, ok := text[key]; ok {
			text[key] = v
		}
	}
	text["vocab_size"] = qwen3tok.VocabSize
	text["hidden_size"] = 64
	set("intermediate_size", 128)
	text["num_attention_heads"] = 4
	text["num_key_value_heads"] = 2
	text["head_dim"] = 16
	text["num_hidden_layers"] = 2
	set("num_experts", 8)
	set("num_experts_per_tok", 2)
	set("moe_intermediate_size", 32)
	set("shared_expert_intermediate_size", 32)
	if lt, ok := text["layer_types"].([]any); ok && len(lt) >= 4 {
		// One full cycle of the hybrid pattern: three Gated DeltaNet layers,
		// then gated full attention; head_dim 32 so that a quarter of it
		// (the rotary part) still holds four frequency pairs.
		text["layer_types"] = slices.Clone(lt[:4])
		text["num_hidden_layers"] = 4
		text["head_dim"] = 32
		set("linear_num_key_heads", 2)
		set("linear_num_value_heads", 4)
		set("linear_key_head_dim", 16)
		set("linear_value_head_dim", 16)
		// mrope_section splits the rotary frequency pairs (32*0.25/2 = 4
		// here) among the temporal, height and width position streams.
		for _, holder := range []map[string]any{text, asMap(text["rope_parameters"]), asMap(text["rope_scaling"])} {
			if _, ok := holder["mrope_section"]; ok {
				holder["mrope_section"] = []int{2, 1, 1}
			}
		}
	}
	if _, ok := text["mlp_only_layers"]; ok {
		text["mlp_only_layers"] = []int{}
	}
	if _, ok := text["max_window_layers"]; ok {
		text["max_window_layers"] = text["num_hidden_layers"]
	}
	if vc := asMap(top["vision_config"]); vc != nil {
		// Synthetic checkpoints hold no vision tower; keep its config valid
		// and small for loaders that build one.
		for k, v := range map[string]any{"depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "out_hidden_size": 64} {
			if _, ok := vc[k]; ok {
				vc[k] = v
			}
		}
	}
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}
