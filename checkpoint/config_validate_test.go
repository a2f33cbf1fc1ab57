package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestValidation(t *testing.T) {
	moe := func(extra string) []byte {
		return []byte(`{"model_type": "qwen3_moe", "hidden_size": 64, "num_hidden_layers": 4,
			"num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100, "num_experts": 8,
			"num_experts_per_tok": 2, "moe_intermediate_size": 32` + extra + `}`)
	}
	tests := []struct {
		name    string
		data    []byte
		inError string
	}{
		{"heads not a multiple of kv heads", qwen3(`, "num_key_value_heads": 3`), "not a multiple of num_key_value_heads"},
		{"zero hidden", qwen3(`, "hidden_size": 0`), "hidden_size = 0"},
		{"negative head_dim", qwen3(`, "head_dim": -16`), "head_dim = -16"},
		{"zero layers", qwen3(`, "num_hidden_layers": 0`), "num_hidden_layers"},
		{"absurd layers", qwen3(`, "num_hidden_layers": 100000000`), "num_hidden_layers"},
		{"huge size", qwen3(`, "vocab_size": 4000000000000`), "vocab_size"},
		{"eps zero", qwen3(`, "rms_norm_eps": 0`), "rms_norm_eps"},
		{"gelu", qwen3(`, "hidden_act": "gelu"`), "hidden_act"},
		{"eos outside vocab", qwen3(`, "eos_token_id": [5, 100]`), "token id 100"},
		{"llama hidden not divisible", []byte(`{"model_type": "llama", "hidden_size": 66, "num_attention_heads": 4,
			"num_hidden_layers": 1, "head_dim": 16, "vocab_size": 100}`), "hidden_size = 66"},
		{"top-k above experts", moe(`, "num_experts_per_tok": 9`), "exceeds num_experts"},
		{"zero experts", moe(`, "num_experts": 0`), "num_experts = 0"},
		{"mlp_only_layers out of range", moe(`, "mlp_only_layers": [4]`), "mlp_only_layers entry 4"},
		{"mlp_only_layers without intermediate_size", moe(`, "mlp_only_layers": [0], "intermediate_size": 0`), "intermediate_size = 0"},
		{"decoder_sparse_step 0", moe(`, "decoder_sparse_step": 0`), "decoder_sparse_step"},
		{"qwen3_5_moe norm_topk_prob false", qwen35MoE(`, "norm_topk_prob": false`), "norm_topk_prob"},
		{"qwen3_5_moe mlp_only_layers", qwen35MoE(`, "mlp_only_layers": [0]`), "mlp_only_layers"},
		{"qwen3_5 ungated", qwen35(`, "attn_output_gate": false`, ""), "attn_output_gate"},
		{"linear heads", qwen35(`, "linear_num_value_heads": 3`, ""), "linear_num_value_heads = 3"},
		{"tie disagrees", qwen35(`, "tie_word_embeddings": true`, `, "tie_word_embeddings": false`), "tie_word_embeddings"},
		{"dtype disagrees", qwen3(`, "dtype": "bfloat16", "torch_dtype": "float16"`), "dtype"},
		{"qwen3_moe sliding window", moe(`, "use_sliding_window": true`), "use_sliding_window"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig(tt.data)
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tt.inError) {
				t.Fatalf("error = %v; want ErrInvalidConfig containing %q", err, tt.inError)
			}
		})
	}
}

func qwen35MoE(text string) []byte {
	return []byte(`{"model_type": "qwen3_5_moe", "text_config": {"hidden_size": 64, "num_hidden_layers": 4,
		"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 100,
		"linear_num_key_heads": 2, "linear_num_value_heads": 4, "num_experts": 8, "num_experts_per_tok": 2,
		"moe_intermediate_size": 32, "shared_expert_intermediate_size": 32` + text + `}}`)
}

// TestDefaults checks that absent fields take the transformers class defaults.
func TestDefaults(t *testing.T) {
	tests := []struct {
		name          string
		data          string
		check         func(x *Text) bool
		hiddenDefault int
	}{
		{"Qwen3Config: kv 32, head_dim 128, max_pos 32768, no eos", `{"model_type": "qwen3", "num_attention_heads": 32}`,
			func(x *Text) bool {
				return x.KVHeads() == 32 && x.HeadDim == 128 && x.MaxPositionEmbeddings == 32768 && x.VocabSize == 151936 &&
					x.IntermediateSize == 22016 && x.NumHiddenLayers == 32 && x.EOSTokenIDs == nil && !x.TieWordEmbeddings &&
					x.RMSNormEps == 1e-6 && x.RoPE.Theta == 10000 && x.HiddenAct == "silu"
			}, 4096},
		{"Qwen3Config: null kv heads means all heads", `{"model_type": "qwen3", "num_attention_heads": 16, "num_key_value_heads": null}`,
			func(x *Text) bool { return x.KVHeads() == 16 }, 4096},
		{"LlamaConfig: kv = heads, head_dim = hidden/heads, bos 1, eos 2", `{"model_type": "llama", "hidden_size": 2048, "num_attention_heads": 16}`,
			func(x *Text) bool {
				return x.KVHeads() == 16 && x.HeadDim == 128 && slices.Equal(x.BOSTokenIDs, []int{1}) &&
					slices.Equal(x.EOSTokenIDs, []int{2}) && x.MaxPositionEmbeddings == 2048 && x.VocabSize == 32000
			}, 2048},
		{"Qwen3MoeConfig: 128 experts, top 8, norm_topk_prob false, head_dim hidden/heads", `{"model_type": "qwen3_moe"}`,
			func(x *Text) bool {
				return x.NumExperts == 128 && x.NumExpertsPerTok == 8 && x.MoEIntermediateSize == 768 && !x.NormTopKProb &&
					x.DecoderSparseStep == 1 && x.HeadDim == 64 && x.KVHeads() == 4 && x.NumHiddenLayers == 24 && x.SharedExpertIntermediateSize == 0
			}, 2048},
		{"Qwen3_5TextConfig: linear heads 16/32, interval 4, partial 0.25", `{"model_type": "qwen3_5", "text_config": {}}`,
			func(x *Text) bool {
				return x.LinearNumKeyHeads == 16 && x.LinearNumValueHeads == 32 && x.LinearKeyHeadDim == 128 &&
					x.LinearConvKernelDim == 4 && x.HeadDim == 256 && x.KVHeads() == 4 && x.RoPE.PartialRotaryFactor == 0.25 &&
					x.IntermediateSize == 12288 && x.VocabSize == 248320 && x.LayerType(3) == FullAttention && x.LayerType(2) == LinearAttention
			}, 4096},
		{"Qwen3_5MoeTextConfig: 256 experts, shared 512, every layer sparse", `{"model_type": "qwen3_5_moe", "text_config": {}}`,
			func(x *Text) bool {
				return x.NumExperts == 256 && x.SharedExpertIntermediateSize == 512 && x.NormTopKProb && x.IntermediateSize == 0 &&
					x.NumHiddenLayers == 40 && x.KVHeads() == 2 && x.IsMoELayer(0) && x.IsMoELayer(39) && !x.IsMoELayer(40)
			}, 2048},
		{"flat qwen3_5_text (Qwen3_5ForCausalLM)", `{"model_type": "qwen3_5_text", "architectures": ["Qwen3_5ForCausalLM"], "num_hidden_layers": 4}`,
			func(x *Text) bool { return x.NumHiddenLayers == 4 && x.LayerType(3) == FullAttention }, 4096},
		{"architectures only", `{"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 1024}`,
			func(x *Text) bool { return x.NumExperts == 128 }, 1024},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tt.data))
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(&c.Text) || c.Text.HiddenSize != tt.hiddenDefault {
				t.Errorf("defaults wrong: %+v", c.Text)
			}
		})
	}
}

func TestIsMoELayer(t *testing.T) {
	c, err := ParseConfig([]byte(`{"model_type": "qwen3_moe", "num_hidden_layers": 6, "decoder_sparse_step": 2,
		"mlp_only_layers": [3], "norm_topk_prob": true}`))
	if err != nil {
		t.Fatal(err)
	}
	var got []bool
	for i := range 6 {
		got = append(got, c.Text.IsMoELayer(i))
	}
	// (i+1)%2 == 0 → layers 1, 3, 5; layer 3 is dense by mlp_only_layers.
	if want := []bool{false, true, false, false, false, true}; !slices.Equal(got, want) {
		t.Errorf("IsMoELayer = %v, want %v", got, want)
	}
	if !c.Text.NormTopKProb {
		t.Error("NormTopKProb = false")
	}
	dense, _ := ParseConfig(qwen3(""))
	if dense.Text.IsMoELayer(0) {
		t.Error("dense IsMoELayer(0) = true")
	}
}

func TestTokenIDsAndTie(t *testing.T) {
	// Qwen3.5: ids and tie_word_embeddings at the top level of a multimodal
	// config are used when text_config lacks them.
	c, err := ParseConfig(qwen35("", `, "tie_word_embeddings": true, "eos_token_id": [1, 2], "pad_token_id": 3, "dtype": "bfloat16"`))
	if err != nil {
		t.Fatal(err)
	}
	x := c.Text
	if !x.TieWordEmbeddings || !slices.Equal(x.EOSTokenIDs, []int{1, 2}) || x.PadTokenID == nil || *x.PadTokenID != 3 || x.DType != "bfloat16" {
		t.Errorf("tie %v eos %v pad %v dtype %q", x.TieWordEmbeddings, x.EOSTokenIDs, x.PadTokenID, x.DType)
	}
	// text_config wins over the top level for ids.
	c, err = ParseConfig(qwen35(`, "eos_token_id": 7`, `, "eos_token_id": 8`))
	if err != nil || !slices.Equal(c.Text.EOSTokenIDs, []int{7}) {
		t.Errorf("eos = %v, %v; want [7]", c.Text.EOSTokenIDs, err)
	}
}

func TestQuantizationInConfig(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(configsDir, "qwen3-8b.json"))
	if err != nil {
		t.Fatal(err)
	}
	with := strings.Replace(string(data), `"vocab_size": 151936`, `"vocab_size": 151936, "quantization_config": `+ctNVFP4, 1)
	c, err := ParseConfig([]byte(with))
	if err != nil || c.Quantization == nil || c.Quantization.Scheme != SchemeNVFP4 {
		t.Fatalf("ParseConfig = %+v, %v; want NVFP4", c, err)
	}
	null := strings.Replace(string(data), `"vocab_size": 151936`, `"vocab_size": 151936, "quantization_config": null`, 1)
	if c, err = ParseConfig([]byte(null)); err != nil || c.Quantization != nil {
		t.Fatalf("quantization_config null: %+v, %v; want nil", c.Quantization, err)
	}
	mlx := strings.Replace(string(data), `"vocab_size": 151936`, `"vocab_size": 151936, "quantization_config": {"group_size": 64, "bits": 4}`, 1)
	if _, err = ParseConfig([]byte(mlx)); !errors.Is(err, ErrUnsupportedQuantization) {
		t.Fatalf("MLX quantization error = %v, want ErrUnsupportedQuantization", err)
	}
}

func FuzzParseConfig(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join(configsDir, "*.json"))
	for _, path := range files {
		if data, err := os.ReadFile(path); err == nil {
			f.Add(data)
		}
	}
	f.Add(qwen3(`, "rope_scaling": {"type": "yarn", "factor": 4}`))
	f.Add(qwen35(`, "full_attention_interval": 2`, `, "quantization_config": `+ctFP8Dynamic))
	f.Add(qwen35MoE(""))
	f.Add([]byte(`{"model_type": "qwen3_moe", "mlp_only_layers": [1], "decoder_sparse_step": 3}`))
	f.Add([]byte(`{"model_type": "llama", "quantization_config": ` + mOptConfigJSON + `}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			return
		}
		x := &c.Text
		if len(x.LayerTypes) != x.NumHiddenLayers || x.NumHiddenLayers <= 0 || x.KVHeads() <= 0 || x.HeadDim <= 0 {
			t.Fatalf("accepted an inconsistent config: %+v", x)
		}
		for i := range x.NumHiddenLayers {
			_ = x.LayerType(i)
			_ = x.IsMoELayer(i)
		}
		_ = x.RotaryDim()
	})
}
