package quantize

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lowbit-ai/lowbit/checkpoint"
)

// compactJSON compacts a hand-written expected JSON document.
func compactJSON(t *testing.T, s string) string {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(s)); err != nil {
		t.Fatalf("bad expected JSON: %v\n%s", err, s)
	}
	return buf.String()
}

// The expected configs are formats.md §1.a-§1.c's llm-compressor output
// with the QuantizationArgs reduced to the kept keys and without "version".
const (
	ctJSONWantFP8Dynamic = `{
  "config_groups": {"group_0": {
    "format": "float-quantized",
    "input_activations": {"dynamic": true, "num_bits": 8, "strategy": "token", "symmetric": true, "type": "float"},
    "output_activations": null,
    "targets": ["Linear"],
    "weights": {"dynamic": false, "num_bits": 8, "strategy": "channel", "symmetric": true, "type": "float"}}},
  "format": "float-quantized",
  "global_compression_ratio": null,
  "ignore": ["lm_head"],
  "kv_cache_scheme": null,
  "quant_method": "compressed-tensors",
  "quantization_status": "compressed",
  "sparsity_config": {},
  "transform_config": {}}`

	ctJSONWantFP8 = `{
  "config_groups": {"group_0": {
    "format": "float-quantized",
    "input_activations": {"dynamic": false, "num_bits": 8, "strategy": "tensor", "symmetric": true, "type": "float"},
    "output_activations": null,
    "targets": ["Linear"],
    "weights": {"dynamic": false, "num_bits": 8, "strategy": "tensor", "symmetric": true, "type": "float"}}},
  "format": "float-quantized",
  "global_compression_ratio": null,
  "ignore": ["lm_head"],
  "kv_cache_scheme": {"dynamic": false, "num_bits": 8, "strategy": "tensor", "symmetric": true, "type": "float"},
  "quant_method": "compressed-tensors",
  "quantization_status": "compressed",
  "sparsity_config": {},
  "transform_config": {}}`

	ctJSONWantFP8Block = `{
  "config_groups": {"group_0": {
    "format": "float-quantized",
    "input_activations": {"dynamic": true, "group_size": 128, "num_bits": 8, "strategy": "group", "symmetric": true, "type": "float"},
    "output_activations": null,
    "targets": ["Linear"],
    "weights": {"block_structure": [128, 128], "dynamic": false, "num_bits": 8, "strategy": "block", "symmetric": true, "type": "float"}}},
  "format": "float-quantized",
  "global_compression_ratio": null,
  "ignore": ["lm_head", "re:.*mlp.gate$"],
  "kv_cache_scheme": null,
  "quant_method": "compressed-tensors",
  "quantization_status": "compressed",
  "sparsity_config": {},
  "transform_config": {}}`

	ctJSONWantNVFP4 = `{
  "config_groups": {"group_0": {
    "format": "nvfp4-pack-quantized",
    "input_activations": {"dynamic": "local", "group_size": 16, "num_bits": 4, "strategy": "tensor_group", "symmetric": true, "type": "float"},
    "output_activations": null,
    "targets": ["Linear"],
    "weights": {"dynamic": false, "group_size": 16, "num_bits": 4, "strategy": "tensor_group", "symmetric": true, "type": "float"}}},
  "format": "nvfp4-pack-quantized",
  "global_compression_ratio": null,
  "ignore": ["model.layers.0.mlp.gate", "model.layers.1.mlp.gate", "lm_head"],
  "kv_cache_scheme": {"dynamic": false, "num_bits": 8, "strategy": "tensor", "symmetric": true, "type": "float"},
  "quant_method": "compressed-tensors",
  "quantization_status": "compressed",
  "sparsity_config": {},
  "transform_config": {}}`

	ctJSONWantNVFP4A16 = `{
  "config_groups": {"group_0": {
    "format": "nvfp4-pack-quantized",
    "input_activations": null,
    "output_activations": null,
    "targets": ["Linear"],
    "weights": {"dynamic": false, "group_size": 16, "num_bits": 4, "strategy": "tensor_group", "symmetric": true, "type": "float"}}},
  "format": "nvfp4-pack-quantized",
  "global_compression_ratio": null,
  "ignore": ["model.layers.0.linear_attn.in_proj_qkv", "model.layers.0.linear_attn.in_proj_z",
    "model.layers.0.linear_attn.in_proj_b", "model.layers.0.linear_attn.in_proj_a",
    "model.layers.0.linear_attn.out_proj", "lm_head"],
  "kv_cache_scheme": null,
  "quant_method": "compressed-tensors",
  "quantization_status": "compressed",
  "sparsity_config": {},
  "transform_config": {}}`
)

// moeModules are the linear modules of a tiny two-layer Qwen3-MoE.
var moeModules = func() []string {
	var ms []string
	for _, l := range []string{"0", "1"} {
		p := "model.layers." + l
		for _, x := range []string{"q", "k", "v", "o"} {
			ms = append(ms, p+".self_attn."+x+"_proj")
		}
		ms = append(ms, p+".mlp.gate")
		for _, e := range []string{"0", "1"} {
			for _, x := range []string{"gate", "up", "down"} {
				ms = append(ms, p+".mlp.experts."+e+"."+x+"_proj")
			}
		}
	}
	return append(ms, "lm_head")
}()

// hybridModules are the linear modules of one Qwen3.5 Gated DeltaNet layer
// and one full-attention layer.
var hybridModules = []string{
	"model.layers.0.linear_attn.in_proj_qkv", "model.layers.0.linear_attn.in_proj_z",
	"model.layers.0.linear_attn.in_proj_b", "model.layers.0.linear_attn.in_proj_a",
	"model.layers.0.linear_attn.out_proj",
	"model.layers.0.mlp.gate_proj", "model.layers.0.mlp.up_proj", "model.layers.0.mlp.down_proj",
	"model.layers.1.self_attn.q_proj", "model.layers.1.self_attn.k_proj", "model.layers.1.self_attn.v_proj", "model.layers.1.self_attn.o_proj",
	"model.layers.1.mlp.gate_proj", "model.layers.1.mlp.up_proj", "model.layers.1.mlp.down_proj",
}

var ctJSONGolden = []struct {
	name string
	spec QuantConfigSpec
	want string
	kv   string
}{
	{"fp8-dynamic", QuantConfigSpec{Scheme: checkpoint.SchemeFP8Dynamic}, ctJSONWantFP8Dynamic, checkpoint.KVCacheAuto},
	{"fp8 with fp8 kv", QuantConfigSpec{Scheme: checkpoint.SchemeFP8, Ignore: []string{"lm_head"}, KVCacheFP8: true}, ctJSONWantFP8, checkpoint.KVCacheFP8},
	{"fp8-block, regex kept", QuantConfigSpec{Scheme: checkpoint.SchemeFP8Block, Ignore: []string{"lm_head", "re:.*mlp.gate$"}}, ctJSONWantFP8Block, checkpoint.KVCacheAuto},
	{"nvfp4, regex expanded", QuantConfigSpec{Scheme: checkpoint.SchemeNVFP4, Ignore: []string{"re:.*mlp.gate$", "re:.*visual.*", "lm_head"}, Modules: moeModules, KVCacheFP8: true}, ctJSONWantNVFP4, checkpoint.KVCacheFP8},
	{"nvfp4a16", QuantConfigSpec{Scheme: checkpoint.SchemeNVFP4A16, Ignore: []string{"re:.*linear_attn.*"}, Modules: hybridModules}, ctJSONWantNVFP4A16, checkpoint.KVCacheAuto},
}

func TestCompressedTensorsGolden(t *testing.T) {
	for _, tc := range ctJSONGolden {
		t.Run(tc.name, func(t *testing.T) {
			got, err := CompressedTensorsConfig(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			if want := compactJSON(t, tc.want); string(got) != want {
				t.Errorf("got\n%s\nwant\n%s", got, want)
			}
		})
	}
}

// TestCompressedTensorsMinimalArgs: no QuantizationArgs carries a key that
// compressed-tensors before 0.13 (extra="forbid") rejects or that the
// scheme does not need.
func TestCompressedTensorsMinimalArgs(t *testing.T) {
	allowed := []string{"num_bits", "type", "strategy", "symmetric", "dynamic", "group_size", "block_structure"}
	for _, tc := range ctJSONGolden {
		raw, err := CompressedTensorsConfig(tc.spec)
		if err != nil {
			t.Fatal(err)
		}
		var cfg struct {
			ConfigGroups map[string]map[string]json.RawMessage `json:"config_groups"`
			KV           json.RawMessage                       `json:"kv_cache_scheme"`
		}
		if err := json.Unmarshal(raw, &cfg); err != nil {
			t.Fatal(err)
		}
		args := []json.RawMessage{cfg.KV}
		for _, g := range cfg.ConfigGroups {
			args = append(args, g["weights"], g["input_activations"], g["output_activations"])
		}
		for _, a := range args {
			var m map[string]any
			if err := json.Unmarshal(a, &m); err != nil {
				t.Fatal(err)
			}
			for k := range m {
				if !slices.Contains(allowed, k) {
					t.Errorf("%s: QuantizationArgs key %q", tc.name, k)
				}
			}
		}
	}
}

// TestCompressedTensorsRoundTrip reads each config back with lowbit's
// reader, from memory and from a model directory.
func TestCompressedTensorsRoundTrip(t *testing.T) {
	for _, tc := range ctJSONGolden {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := CompressedTensorsConfig(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			q, err := checkpoint.ParseQuantizationConfig(raw)
			if err != nil {
				t.Fatal(err)
			}
			checkReadBack(t, q, checkpoint.QuantCompressedTensors, tc.spec.Scheme, tc.kv)
			dir := t.TempDir()
			writeTestConfig(t, dir, raw)
			q, err = checkpoint.ReadQuantConfig(dir)
			if err != nil {
				t.Fatal(err)
			}
			checkReadBack(t, q, checkpoint.QuantCompressedTensors, tc.spec.Scheme, tc.kv)
			wantIgnore, _ := resolveIgnore(tc.spec, true, "")
			if !slices.Equal(q.Ignore, wantIgnore) {
				t.Errorf("Ignore = %q, want %q", q.Ignore, wantIgnore)
			}
			switch tc.spec.Scheme {
			case checkpoint.SchemeFP8Block:
				if !slices.Equal(q.WeightBlockSize, []int{128, 128}) {
					t.Errorf("WeightBlockSize = %v", q.WeightBlockSize)
				}
			case checkpoint.SchemeNVFP4, checkpoint.SchemeNVFP4A16:
				if q.GroupSize != 16 {
					t.Errorf("GroupSize = %d", q.GroupSize)
				}
			}
		})
	}
}

func checkReadBack(t *testing.T, q *checkpoint.Quantization, method checkpoint.QuantMethod, scheme, kv string) {
	t.Helper()
	if q == nil {
		t.Fatal("no quantization read back")
	}
	if q.Method != method || q.Scheme != scheme || q.KVCacheDType != kv {
		t.Errorf("read back %s %s KV %s, want %s %s KV %s", q.Method, q.Scheme, q.KVCacheDType, method, scheme, kv)
	}
}

// writeTestConfig writes a config.json holding quantization_config qc.
func writeTestConfig(t *testing.T, dir string, qc json.RawMessage) {
	t.Helper()
	cfg, err := json.MarshalIndent(map[string]any{
		"architectures": []string{"Qwen3ForCausalLM"}, "model_type": "qwen3", "quantization_config": qc,
	}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, checkpoint.ConfigFileName), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCompressedTensorsErrors(t *testing.T) {
	tests := []struct {
		name string
		spec QuantConfigSpec
		is   error
		want string
	}{
		{"unknown scheme", QuantConfigSpec{Scheme: "W4A16"}, checkpoint.ErrUnsupportedQuantization, `scheme "W4A16"`},
		{"fp8 per-tensor dynamic", QuantConfigSpec{Scheme: checkpoint.SchemeFP8PerTensorDynamic}, checkpoint.ErrUnsupportedQuantization, "FP8_PER_TENSOR_DYNAMIC"},
		{"bad regex", QuantConfigSpec{Scheme: checkpoint.SchemeFP8, Ignore: []string{"re:(?=x)"}}, nil, "not a regular expression lowbit can check"},
		{"wildcard name", QuantConfigSpec{Scheme: checkpoint.SchemeFP8, Ignore: []string{"model.layers.*"}}, nil, "neither a module name"},
		{"split qkv", QuantConfigSpec{Scheme: checkpoint.SchemeFP8, Ignore: []string{"model.layers.1.self_attn.k_proj"}, Modules: hybridModules}, nil,
			"model.layers.1.self_attn.k_proj is left unquantized but model.layers.1.self_attn.q_proj is quantized: vLLM and SGLang fuse them into model.layers.1.self_attn.qkv_proj"},
		{"split qkvz", QuantConfigSpec{Scheme: checkpoint.SchemeNVFP4, Ignore: []string{"re:.*in_proj_z$"}, Modules: hybridModules}, nil, "fuse them into model.layers.0.linear_attn.in_proj_qkvz"},
		{"one expert", QuantConfigSpec{Scheme: checkpoint.SchemeNVFP4, Ignore: []string{"re:.*experts.1.down_proj"}, Modules: moeModules}, nil,
			"model.layers.0.mlp.experts.1.down_proj is left unquantized but model.layers.0.mlp.experts.0.gate_proj is quantized: vLLM and SGLang fuse them into model.layers.0.mlp.experts,"},
		{"duplicate module", QuantConfigSpec{Scheme: checkpoint.SchemeNVFP4, Modules: []string{"a", "a"}}, nil, "listed twice"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := CompressedTensorsConfig(tc.spec)
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
