package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const configsDir = "../internal/modelconfigs"

// wantText lists the key numbers of a published config (PROVENANCE.md).
type wantText struct {
	arch                                              Arch
	nested                                            bool
	hidden, inter, layers, heads, kv, headDim, vocab  int
	tie                                               bool
	theta, partial                                    float64
	maxPos                                            int
	bos, eos                                          []int
	experts, perTok, moeInter, sharedInter            int
	linearKeyHeads, linearValueHeads, fullLayers, mtp int
	mrope                                             []int
	dtype                                             string
}

func TestParseTestdataConfigs(t *testing.T) {
	tests := map[string]wantText{
		"qwen3-0.6b.json": {arch: Qwen3, hidden: 1024, inter: 3072, layers: 28, heads: 16, kv: 8, headDim: 128,
			vocab: 151936, tie: true, theta: 1e6, partial: 1, maxPos: 40960, bos: []int{151643}, eos: []int{151645},
			fullLayers: 28, dtype: "bfloat16"},
		"qwen3-8b.json": {arch: Qwen3, hidden: 4096, inter: 12288, layers: 36, heads: 32, kv: 8, headDim: 128,
			vocab: 151936, theta: 1e6, partial: 1, maxPos: 40960, bos: []int{151643}, eos: []int{151645},
			fullLayers: 36, dtype: "bfloat16"},
		"qwen3-30b-a3b.json": {arch: Qwen3MoE, hidden: 2048, inter: 6144, layers: 48, heads: 32, kv: 4, headDim: 128,
			vocab: 151936, theta: 1e6, partial: 1, maxPos: 40960, bos: []int{151643}, eos: []int{151645},
			experts: 128, perTok: 8, moeInter: 768, fullLayers: 48, dtype: "bfloat16"},
		"qwen3.5-27b.json": {arch: Qwen35, nested: true, hidden: 5120, inter: 17408, layers: 64, heads: 24, kv: 4,
			headDim: 256, vocab: 248320, theta: 1e7, partial: 0.25, maxPos: 262144, eos: []int{248044},
			linearKeyHeads: 16, linearValueHeads: 48, fullLayers: 16, mtp: 1, mrope: []int{11, 11, 10}, dtype: "bfloat16"},
		"qwen3.6-35b-a3b.json": {arch: Qwen35MoE, nested: true, hidden: 2048, layers: 40, heads: 16, kv: 2,
			headDim: 256, vocab: 248320, theta: 1e7, partial: 0.25, maxPos: 262144, bos: []int{248044}, eos: []int{248044},
			experts: 256, perTok: 8, moeInter: 512, sharedInter: 512, linearKeyHeads: 16, linearValueHeads: 32,
			fullLayers: 10, mtp: 1, mrope: []int{11, 11, 10}, dtype: "bfloat16"},
		"minicpm5-2b.json": {arch: Llama, hidden: 2048, inter: 6144, layers: 42, heads: 16, kv: 2, headDim: 128,
			vocab: 130560, theta: 5e6, partial: 1, maxPos: 131072, bos: []int{0}, eos: []int{1, 130073},
			fullLayers: 42, dtype: "bfloat16"},
	}
	files, err := filepath.Glob(filepath.Join(configsDir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata configs: %v", err)
	}
	for _, f := range files {
		if _, ok := tests[filepath.Base(f)]; !ok {
			t.Errorf("%s has no expectations in this test", f)
		}
	}
	for name, w := range tests {
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(configsDir, name))
			if err != nil {
				t.Fatal(err)
			}
			c, err := ParseConfig(data)
			if err != nil {
				t.Fatalf("ParseConfig: %v", err)
			}
			x := &c.Text
			got := wantText{arch: c.Arch, nested: c.TextNested, hidden: x.HiddenSize, inter: x.IntermediateSize,
				layers: x.NumHiddenLayers, heads: x.NumAttentionHeads, kv: x.KVHeads(), headDim: x.HeadDim,
				vocab: x.VocabSize, tie: x.TieWordEmbeddings, theta: x.RoPE.Theta, partial: x.RoPE.PartialRotaryFactor,
				maxPos: x.MaxPositionEmbeddings, bos: x.BOSTokenIDs, eos: x.EOSTokenIDs, experts: x.NumExperts,
				perTok: x.NumExpertsPerTok, moeInter: x.MoEIntermediateSize, sharedInter: x.SharedExpertIntermediateSize,
				linearKeyHeads: x.LinearNumKeyHeads, linearValueHeads: x.LinearNumValueHeads,
				mtp: x.MTPNumHiddenLayers, mrope: x.RoPE.MRoPESection, dtype: x.DType}
			for _, l := range x.LayerTypes {
				if l == FullAttention {
					got.fullLayers++
				}
			}
			if !equalWant(got, w) {
				t.Errorf("got  %+v\nwant %+v", got, w)
			}
			if string(c.Raw) != string(data) {
				t.Error("Raw does not hold the file as read")
			}
			if x.RoPE.Type != "default" {
				t.Errorf("RoPE.Type = %q, want default", x.RoPE.Type)
			}
			for i := range x.NumHiddenLayers {
				wantMoE := w.experts > 0
				if x.IsMoELayer(i) != wantMoE {
					t.Fatalf("IsMoELayer(%d) = %v, want %v", i, !wantMoE, wantMoE)
				}
				if c.Arch.Hybrid() {
					want := LinearAttention
					if (i+1)%4 == 0 {
						want = FullAttention
					}
					if x.LayerType(i) != want {
						t.Fatalf("LayerType(%d) = %s, want %s", i, x.LayerType(i), want)
					}
				}
			}
			if c.Arch.Hybrid() {
				if spec, _ := c.Arch.spec(); x.ModelType != spec.textModelType {
					t.Errorf("Text.ModelType = %q, want %q", x.ModelType, spec.textModelType)
				}
				if x.RotaryDim() != 64 || !x.AttnOutputGate || !x.RoPE.MRoPEInterleaved || c.Vision == nil {
					t.Errorf("RotaryDim %d, AttnOutputGate %v, MRoPEInterleaved %v, vision %v; want 64, true, true, present",
						x.RotaryDim(), x.AttnOutputGate, x.RoPE.MRoPEInterleaved, c.Vision != nil)
				}
			}
			if c.Quantization != nil {
				t.Errorf("Quantization = %+v, want nil", c.Quantization)
			}
		})
	}
}

func equalWant(a, b wantText) bool {
	return a.arch == b.arch && a.nested == b.nested && a.hidden == b.hidden && a.inter == b.inter &&
		a.layers == b.layers && a.heads == b.heads && a.kv == b.kv && a.headDim == b.headDim &&
		a.vocab == b.vocab && a.tie == b.tie && a.theta == b.theta && a.partial == b.partial &&
		a.maxPos == b.maxPos && slices.Equal(a.bos, b.bos) && slices.Equal(a.eos, b.eos) &&
		a.experts == b.experts && a.perTok == b.perTok && a.moeInter == b.moeInter &&
		a.sharedInter == b.sharedInter && a.linearKeyHeads == b.linearKeyHeads &&
		a.linearValueHeads == b.linearValueHeads && a.fullLayers == b.fullLayers && a.mtp == b.mtp &&
		slices.Equal(a.mrope, b.mrope) && a.dtype == b.dtype
}

func TestReadConfig(t *testing.T) {
	c, err := ReadConfig(filepath.Join(configsDir, "..", "configs"))
	if err == nil || c != nil {
		t.Fatalf("ReadConfig(dir without config.json) = %v, %v; want an error", c, err)
	}
	dir := t.TempDir()
	data, err := os.ReadFile(filepath.Join(configsDir, "qwen3-8b.json"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, ConfigFileName)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if c, err = ReadConfig(dir); err != nil || c.Arch != Qwen3 {
		t.Fatalf("ReadConfig = %v, %v", c, err)
	}
	bad := strings.Replace(string(data), `"hidden_size": 4096`, `"hidden_size": "4096"`, 1)
	if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = ReadConfig(dir)
	if err == nil || !strings.Contains(err.Error(), path) || !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("ReadConfig(bad) error = %v; want ErrInvalidConfig naming %s", err, path)
	}
}

func TestParseArch(t *testing.T) {
	tests := []struct {
		in   string
		want Arch
	}{
		{"qwen3", Qwen3}, {"QWEN3_MOE", Qwen3MoE}, {"qwen3_5", Qwen35}, {"qwen3_5_text", Qwen35},
		{"Qwen3_5MoeForConditionalGeneration", Qwen35MoE}, {"qwen3_5_moe_text", Qwen35MoE},
		{"LlamaForCausalLM", Llama}, {"llama", Llama},
	}
	for _, tt := range tests {
		got, err := ParseArch(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseArch(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
		if back, err := ParseArch(got.String()); err != nil || back != got {
			t.Errorf("ParseArch(%v.String()) = %v, %v", got, back, err)
		}
	}
	_, err := ParseArch("mistral")
	if !errors.Is(err, ErrUnknownArchitecture) || !strings.Contains(err.Error(), "qwen3_5_moe") {
		t.Errorf("ParseArch(mistral) error = %v; want ErrUnknownArchitecture listing the supported ones", err)
	}
	if s := Arch(0).String(); s != "Arch(0)" {
		t.Errorf("Arch(0).String() = %q", s)
	}
}

// minimal configs with every size given, so tests change one thing at a time.
const (
	minQwen3 = `{"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "hidden_size": 64,
		"intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
		"head_dim": 16, "vocab_size": 100 %s}`
	minQwen35 = `{"model_type": "qwen3_5", "architectures": ["Qwen3_5ForConditionalGeneration"],
		"text_config": {"model_type": "qwen3_5_text", "hidden_size": 64, "intermediate_size": 128,
		"num_hidden_layers": 8, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
		"vocab_size": 100, "linear_num_key_heads": 2, "linear_num_value_heads": 4 %s} %s}`
)

func qwen3(extra string) []byte { return []byte(strings.Replace(minQwen3, "%s", extra, 1)) }

func qwen35(text, top string) []byte {
	s := strings.Replace(minQwen35, "%s", text, 1)
	return []byte(strings.Replace(s, "%s", top, 1))
}

func TestRoPEForms(t *testing.T) {
	tests := []struct {
		name    string
		data    []byte
		theta   float64
		partial float64
		typ     string
		factor  float64
		wantErr bool
	}{
		{"absent: default_theta", qwen3(""), 10000, 1, "default", 0, false},
		{"transformers 4 top-level", qwen3(`, "rope_theta": 1000000, "rope_scaling": null`), 1e6, 1, "default", 0, false},
		{"transformers 5 rope_parameters", qwen3(`, "rope_parameters": {"rope_type": "default", "rope_theta": 5e6}`), 5e6, 1, "default", 0, false},
		{"both forms agree", qwen3(`, "rope_theta": 1e6, "rope_parameters": {"rope_theta": 1000000}`), 1e6, 1, "default", 0, false},
		{"both forms disagree", qwen3(`, "rope_theta": 1e6, "rope_parameters": {"rope_theta": 1e7}`), 0, 0, "", 0, true},
		{"yarn in rope_scaling", qwen3(`, "rope_theta": 1e6, "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}`), 1e6, 1, "yarn", 4, false},
		{"llama3 scaling", qwen3(`, "rope_theta": 5e5, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
			"high_freq_factor": 4.0, "original_max_position_embeddings": 8192}`), 5e5, 1, "llama3", 8, false},
		{"llama3 missing low_freq_factor", qwen3(`, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "high_freq_factor": 4.0,
			"original_max_position_embeddings": 8192}`), 0, 0, "", 0, true},
		{"longrope", qwen3(`, "rope_scaling": {"type": "longrope", "long_factor": [1, 1.5], "short_factor": [1, 1]}`), 10000, 1, "longrope", 0, false},
		{"longrope factors not numbers", qwen3(`, "rope_scaling": {"type": "longrope", "long_factor": ["x"], "short_factor": [1]}`), 0, 0, "", 0, true},
		{"yarn without factor", qwen3(`, "rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6}`), 0, 0, "", 0, true},
		{"unknown rope_type", qwen3(`, "rope_parameters": {"rope_type": "spiral", "rope_theta": 1e6}`), 0, 0, "", 0, true},
		{"rope_type and type disagree", qwen3(`, "rope_scaling": {"rope_type": "yarn", "type": "linear", "factor": 2}`), 0, 0, "", 0, true},
		{"legacy mrope type", qwen3(`, "rope_scaling": {"type": "mrope", "mrope_section": [4, 2, 2]}`), 10000, 1, "default", 0, false},
		{"qwen3.5 partial default", qwen35(`, "rope_parameters": {"rope_theta": 1e7}`, ""), 1e7, 0.25, "default", 0, false},
		{"qwen3.5 partial both places", qwen35(`, "partial_rotary_factor": 0.5, "rope_parameters": {"rope_theta": 1e7, "partial_rotary_factor": 0.5}`, ""), 1e7, 0.5, "default", 0, false},
		{"qwen3.5 partial disagree", qwen35(`, "partial_rotary_factor": 0.5, "rope_parameters": {"partial_rotary_factor": 0.25}`, ""), 0, 0, "", 0, true},
		{"odd rotary dims", qwen35(`, "rope_parameters": {"partial_rotary_factor": 0.3}`, ""), 0, 0, "", 0, true},
		{"mrope section sum", qwen35(`, "rope_parameters": {"mrope_section": [1, 1, 1]}`, ""), 0, 0, "", 0, true},
		{"per-layer-type rope", qwen3(`, "rope_parameters": {"full_attention": {"rope_theta": 1e6}}`), 0, 0, "", 0, true},
		{"negative theta", qwen3(`, "rope_theta": -1`), 0, 0, "", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseConfig(tt.data)
			if tt.wantErr {
				if !errors.Is(err, ErrInvalidConfig) {
					t.Fatalf("ParseConfig error = %v, want ErrInvalidConfig", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			r := c.Text.RoPE
			if r.Theta != tt.theta || r.PartialRotaryFactor != tt.partial || r.Type != tt.typ || r.Factor != tt.factor {
				t.Errorf("RoPE = %+v; want theta %g partial %g type %s factor %g", r, tt.theta, tt.partial, tt.typ, tt.factor)
			}
		})
	}
}

func TestLayerTypes(t *testing.T) {
	F, L := FullAttention, LinearAttention
	tests := []struct {
		name    string
		data    []byte
		want    []LayerType
		wantErr bool
	}{
		{"derived, default interval 4", qwen35("", ""), []LayerType{L, L, L, F, L, L, L, F}, false},
		{"derived, interval 2", qwen35(`, "full_attention_interval": 2`, ""), []LayerType{L, F, L, F, L, F, L, F}, false},
		{"explicit", qwen35(`, "layer_types": ["full_attention", "linear_attention", "linear_attention", "linear_attention",
			"full_attention", "linear_attention", "linear_attention", "full_attention"]`, ""), []LayerType{F, L, L, L, F, L, L, F}, false},
		{"legacy names", qwen35(`, "layer_types": ["mamba", "mamba", "mamba", "attention", "mamba", "mamba", "mamba", "attention"]`, ""),
			[]LayerType{L, L, L, F, L, L, L, F}, false},
		{"wrong length", qwen35(`, "layer_types": ["linear_attention", "full_attention"]`, ""), nil, true},
		{"unknown type", qwen35(`, "layer_types": ["linear_attention", "linear_attention", "linear_attention", "global",
			"linear_attention", "linear_attention", "linear_attention", "full_attention"]`, ""), nil, true},
		{"interval 0", qwen35(`, "full_attention_interval": 0`, ""), nil, true},
		{"linear layer in qwen3", qwen3(`, "layer_types": ["full_attention", "linear_attention"]`), nil, true},
		{"qwen3 all full", qwen3(""), []LayerType{F, F}, false},
		{"qwen3 sliding window", qwen3(`, "use_sliding_window": true, "sliding_window": 512, "max_window_layers": 1`),
			[]LayerType{F, SlidingAttention}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseConfig(tt.data)
			if tt.wantErr {
				if !errors.Is(err, ErrInvalidConfig) {
					t.Fatalf("ParseConfig error = %v, want ErrInvalidConfig", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(c.Text.LayerTypes, tt.want) {
				t.Errorf("LayerTypes = %v, want %v", c.Text.LayerTypes, tt.want)
			}
		})
	}
}

func TestUnknownArchitecture(t *testing.T) {
	tests := []struct {
		name string
		json string
		want error
	}{
		{"unknown model_type", `{"model_type": "mistral", "architectures": ["MistralForCausalLM"]}`, ErrUnknownArchitecture},
		{"unknown architectures entry", `{"architectures": ["MistralForCausalLM"]}`, ErrUnknownArchitecture},
		{"neither given", `{"hidden_size": 64}`, ErrUnknownArchitecture},
		{"model_type and architectures disagree", `{"model_type": "qwen3", "architectures": ["Qwen3MoeForCausalLM"]}`, ErrInvalidConfig},
		{"wrong text_config model_type", string(qwen35(`, "model_type": "qwen3_5_moe_text"`, "")), ErrInvalidConfig},
		{"qwen3_5 without text_config", `{"model_type": "qwen3_5"}`, ErrInvalidConfig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tt.json))
			if !errors.Is(err, tt.want) {
				t.Fatalf("ParseConfig error = %v, want %v", err, tt.want)
			}
			if tt.want == ErrUnknownArchitecture && !strings.Contains(err.Error(), "Qwen3_5MoeForConditionalGeneration") {
				t.Errorf("error %q does not list the supported architectures", err)
			}
		})
	}
}

func TestMalformedConfig(t *testing.T) {
	for _, data := range []string{"", "{", "[1, 2]", "null", `{"model_type": "qwen3",}`, "\x00", `"qwen3"`} {
		if _, err := ParseConfig([]byte(data)); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("ParseConfig(%q) error = %v, want ErrInvalidConfig", data, err)
		}
	}
}

func TestWrongTypes(t *testing.T) {
	tests := []struct{ name, extra, inError string }{
		{"hidden_size as string", `, "hidden_size": "64"`, "hidden_size: want an integer, got a string"},
		{"fractional size", `, "num_hidden_layers": 2.5`, "num_hidden_layers: want an integer"},
		{"exponent size", `, "vocab_size": 1e2`, "vocab_size: want an integer"},
		{"bool as string", `, "tie_word_embeddings": "true"`, "tie_word_embeddings: want a boolean"},
		{"rope_theta as string", `, "rope_theta": "1e6"`, "rope_theta: want a number"},
		{"eos as string", `, "eos_token_id": "2"`, "eos_token_id: want an integer or an array"},
		{"eos list of strings", `, "eos_token_id": [1, "2"]`, "eos_token_id[1]: want an integer"},
		{"layer_types not a list", `, "layer_types": "full_attention"`, "layer_types: want an array"},
		{"rope_parameters not an object", `, "rope_parameters": [1]`, "rope_parameters: want an object"},
		{"architectures not a list", `, "architectures": "Qwen3ForCausalLM"`, "architectures: want an array"},
		{"huge integer", `, "hidden_size": 123456789012345678901234567890`, "hidden_size: want an integer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The extra key is appended after the defaults, so the last
			// occurrence wins, as in Python's json.loads.
			_, err := ParseConfig(qwen3(tt.extra))
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tt.inError) {
				t.Fatalf("error = %v; want ErrInvalidConfig containing %q", err, tt.inError)
			}
		})
	}
}
