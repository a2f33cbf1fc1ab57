package quantize

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lowbit-ai/lowbit/checkpoint"
)

// Expected files after formats.md §2 and ModelOpt's get_quant_config and
// convert_hf_quant_config_format.
var moJSONGolden = []struct {
	name     string
	spec     QuantConfigSpec
	hf       string // hf_quant_config.json, exactly
	cfg      string // config.json quantization_config
	kv       string
	excluded []string
}{
	{
		name: "nvfp4 with fp8 kv",
		spec: QuantConfigSpec{Scheme: checkpoint.SchemeNVFP4, Ignore: []string{"re:.*mlp.gate$"}, Modules: moeModules, KVCacheFP8: true, Producer: "lowbit dev"},
		hf: `{
    "producer": {
        "name": "modelopt",
        "version": "lowbit dev"
    },
    "quantization": {
        "quant_algo": "NVFP4",
        "kv_cache_quant_algo": "FP8",
        "group_size": 16,
        "exclude_modules": [
            "model.layers.0.mlp.gate",
            "model.layers.1.mlp.gate",
            "lm_head"
        ]
    }
}
`,
		cfg: `{
  "config_groups": {"group_0": {
    "input_activations": {"dynamic": false, "num_bits": 4, "type": "float", "group_size": 16},
    "weights": {"dynamic": false, "num_bits": 4, "type": "float", "group_size": 16},
    "targets": ["Linear"]}},
  "ignore": ["model.layers.0.mlp.gate", "model.layers.1.mlp.gate", "lm_head"],
  "quant_algo": "NVFP4",
  "kv_cache_scheme": {"dynamic": false, "num_bits": 8, "type": "float"},
  "producer": {"name": "modelopt", "version": "lowbit dev"},
  "quant_method": "modelopt"}`,
		kv:       checkpoint.KVCacheFP8,
		excluded: []string{"model.layers.0.mlp.gate", "model.layers.1.mlp.gate", "lm_head"},
	},
	{
		name: "fp8 static",
		spec: QuantConfigSpec{Scheme: checkpoint.SchemeFP8, Ignore: []string{"lm_head"}, Producer: "lowbit 0.1"},
		hf: `{
    "producer": {
        "name": "modelopt",
        "version": "lowbit 0.1"
    },
    "quantization": {
        "quant_algo": "FP8",
        "kv_cache_quant_algo": null,
        "exclude_modules": [
            "lm_head"
        ]
    }
}
`,
		cfg: `{
  "config_groups": {"group_0": {
    "input_activations": {"dynamic": false, "num_bits": 8, "type": "float"},
    "weights": {"dynamic": false, "num_bits": 8, "type": "float"},
    "targets": ["Linear"]}},
  "ignore": ["lm_head"],
  "quant_algo": "FP8",
  "producer": {"name": "modelopt", "version": "lowbit 0.1"},
  "quant_method": "modelopt"}`,
		kv:       checkpoint.KVCacheAuto,
		excluded: []string{"lm_head"},
	},
	{
		name: "fp8 dynamic, explicit names",
		spec: QuantConfigSpec{Scheme: checkpoint.SchemeFP8Dynamic, Ignore: []string{"model.layers.0.mlp.gate_proj", "model.layers.0.mlp.up_proj"}, Modules: hybridModules, KVCacheFP8: true},
		hf: `{
    "producer": {
        "name": "modelopt",
        "version": "lowbit"
    },
    "quantization": {
        "quant_algo": "FP8_PER_CHANNEL_PER_TOKEN",
        "kv_cache_quant_algo": "FP8",
        "exclude_modules": [
            "model.layers.0.mlp.gate_proj",
            "model.layers.0.mlp.up_proj",
            "lm_head"
        ]
    }
}
`,
		cfg: `{
  "ignore": ["model.layers.0.mlp.gate_proj", "model.layers.0.mlp.up_proj", "lm_head"],
  "quant_algo": "FP8_PER_CHANNEL_PER_TOKEN",
  "kv_cache_scheme": {"dynamic": false, "num_bits": 8, "type": "float"},
  "producer": {"name": "modelopt", "version": "lowbit"},
  "quant_method": "modelopt"}`,
		kv:       checkpoint.KVCacheFP8,
		excluded: []string{"model.layers.0.mlp.gate_proj", "model.layers.0.mlp.up_proj", "lm_head"},
	},
}

func TestModelOptGolden(t *testing.T) {
	for _, tc := range moJSONGolden {
		t.Run(tc.name, func(t *testing.T) {
			hf, cfg, err := ModelOptConfig(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			if string(hf) != tc.hf {
				t.Errorf("hf_quant_config.json:\n%s\nwant\n%s", hf, tc.hf)
			}
			if want := compactJSON(t, tc.cfg); string(cfg) != want {
				t.Errorf("quantization_config:\n%s\nwant\n%s", cfg, want)
			}
		})
	}
}

// TestModelOptRoundTrip reads the files back with lowbit's reader: each on
// its own, and both from a model directory, where the reader requires them
// to agree.
func TestModelOptRoundTrip(t *testing.T) {
	for _, tc := range moJSONGolden {
		t.Run(tc.name, func(t *testing.T) {
			hf, cfg, err := ModelOptConfig(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			q, err := checkpoint.ParseQuantizationConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			checkReadBack(t, q, checkpoint.QuantModelOpt, tc.spec.Scheme, tc.kv)
			if !slices.Equal(q.Ignore, tc.excluded) {
				t.Errorf("config.json ignore = %q, want %q", q.Ignore, tc.excluded)
			}
			dir := t.TempDir()
			writeTestConfig(t, dir, cfg)
			if err := os.WriteFile(filepath.Join(dir, checkpoint.HFQuantConfigFileName), hf, 0o644); err != nil {
				t.Fatal(err)
			}
			q, err = checkpoint.ReadQuantConfig(dir)
			if err != nil {
				t.Fatal(err)
			}
			checkReadBack(t, q, checkpoint.QuantModelOpt, tc.spec.Scheme, tc.kv)
			if !slices.Equal(q.Ignore, tc.excluded) {
				t.Errorf("exclude_modules = %q, want %q", q.Ignore, tc.excluded)
			}
			if wantProducer := "modelopt " + orDefault(tc.spec.Producer, "lowbit"); q.Producer != wantProducer {
				t.Errorf("Producer = %q, want %q", q.Producer, wantProducer)
			}
			if tc.spec.Scheme == checkpoint.SchemeNVFP4 && q.GroupSize != 16 {
				t.Errorf("GroupSize = %d", q.GroupSize)
			}
		})
	}
}

func orDefault(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func TestModelOptErrors(t *testing.T) {
	tests := []struct {
		name string
		spec QuantConfigSpec
		is   error
		want string
	}{
		{"fp8 block", QuantConfigSpec{Scheme: checkpoint.SchemeFP8Block}, checkpoint.ErrUnsupportedQuantization, "FP8_PB_WO is weight-only"},
		{"nvfp4a16", QuantConfigSpec{Scheme: checkpoint.SchemeNVFP4A16}, checkpoint.ErrUnsupportedQuantization, "W4A16_NVFP4 is read only by recent vLLM"},
		{"unknown", QuantConfigSpec{Scheme: "MXFP4"}, checkpoint.ErrUnsupportedQuantization, "not a scheme lowbit writes"},
		{"regex without modules", QuantConfigSpec{Scheme: checkpoint.SchemeNVFP4, Ignore: []string{"re:.*mlp.gate$"}}, nil, "cannot express a regular expression"},
		{"substring", QuantConfigSpec{Scheme: checkpoint.SchemeFP8, Ignore: []string{"model.layers.0.mlp.gate"}, Modules: []string{"model.layers.0.mlp.gate", "model.layers.0.mlp.gate_proj", "model.layers.0.mlp.up_proj"}}, nil,
			`exclude_modules entry "model.layers.0.mlp.gate" is part of the name model.layers.0.mlp.gate_proj of a quantized module`},
		{"substring of fused layer", QuantConfigSpec{Scheme: checkpoint.SchemeFP8, Ignore: []string{"model.layers.0.self_attn.qkv"}, Modules: []string{"model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.k_proj", "model.layers.0.self_attn.v_proj", "model.layers.0.self_attn.qkv"}}, nil,
			"part of the name model.layers.0.self_attn.qkv_proj"},
		{"unanchored router pattern", QuantConfigSpec{Scheme: checkpoint.SchemeFP8, Ignore: []string{"re:.*mlp.gate"}, Modules: hybridModules}, nil,
			"model.layers.0.mlp.gate_proj is left unquantized but model.layers.0.mlp.up_proj is quantized"},
		{"split gate/up", QuantConfigSpec{Scheme: checkpoint.SchemeFP8, Ignore: []string{"model.layers.1.mlp.up_proj"}, Modules: hybridModules}, nil, "fuse them into model.layers.1.mlp.gate_up_proj"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := ModelOptConfig(tc.spec)
			if err == nil {
				t.Fatal("no error")
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %v does not wrap %v", err, tc.is)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

// TestModelOptWholeMoELayer: a decoder layer's experts may stay unquantized
// together; the fused MoE layer is excluded by name and collides with no
// quantized module.
func TestModelOptWholeMoELayer(t *testing.T) {
	hf, _, err := ModelOptConfig(QuantConfigSpec{Scheme: checkpoint.SchemeNVFP4, Ignore: []string{"re:.*mlp.gate$", "re:model\\.layers\\.0\\.mlp\\.experts\\."}, Modules: moeModules})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(hf), `"model.layers.0.mlp.experts.1.down_proj",
            "model.layers.0.mlp.experts",
            "model.layers.1.mlp.gate",`) {
		t.Errorf("hf_quant_config.json:\n%s", hf)
	}
}

func TestExpandIgnore(t *testing.T) {
	tests := []struct {
		name    string
		ignore  []string
		modules []string
		want    []string
	}{
		{"none", nil, moeModules, nil},
		{"anchored at the start", []string{"re:mlp.gate$"}, moeModules, nil},
		{"not at the end", []string{"re:.*self_attn.q"}, []string{"m.self_attn.q_proj", "m.self_attn.o_proj"}, []string{"m.self_attn.q_proj"}},
		{"model order", []string{"lm_head", "re:.*\\.mlp\\.gate$"}, moeModules, []string{"model.layers.0.mlp.gate", "model.layers.1.mlp.gate", "lm_head"}},
		{"unknown names kept, once", []string{"model.embed_tokens", "lm_head", "model.embed_tokens"}, hybridModules, []string{"model.embed_tokens", "lm_head"}},
		{"no match", []string{"re:.*visual.*"}, hybridModules, nil},
		{"whole fused layers", []string{"re:model\\.layers\\.1\\.self_attn\\."}, hybridModules, hybridModules[8:12]},
		{"whole MoE layer", []string{"re:model\\.layers\\.1\\.mlp\\.experts\\."}, moeModules, []string{
			"model.layers.1.mlp.experts.0.gate_proj", "model.layers.1.mlp.experts.0.up_proj", "model.layers.1.mlp.experts.0.down_proj",
			"model.layers.1.mlp.experts.1.gate_proj", "model.layers.1.mlp.experts.1.up_proj", "model.layers.1.mlp.experts.1.down_proj",
			"model.layers.1.mlp.experts"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ExpandIgnore(tc.ignore, tc.modules)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("ExpandIgnore = %q, want %q", got, tc.want)
			}
		})
	}
}
