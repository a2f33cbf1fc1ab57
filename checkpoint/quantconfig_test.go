package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Fixtures after shared/specs/formats.md §1-§3: the quantization_config
// objects llm-compressor (compressed-tensors), ModelOpt and Qwen's own FP8
// releases write.
const (
	ctFP8Dynamic = `{
  "config_groups": {"group_0": {"format": "float-quantized",
    "input_activations": {"actorder": null, "block_structure": null, "dynamic": true, "group_size": null,
      "num_bits": 8, "observer": null, "observer_kwargs": {}, "scale_dtype": null, "strategy": "token",
      "symmetric": true, "type": "float", "zp_dtype": null},
    "output_activations": null, "targets": ["Linear"],
    "weights": {"actorder": null, "block_structure": null, "dynamic": false, "group_size": null, "num_bits": 8,
      "observer": "memoryless_minmax", "observer_kwargs": {}, "scale_dtype": null, "strategy": "channel",
      "symmetric": true, "type": "float", "zp_dtype": null}}},
  "format": "float-quantized", "global_compression_ratio": null, "ignore": ["lm_head"],
  "kv_cache_scheme": null, "quant_method": "compressed-tensors", "quantization_status": "compressed",
  "sparsity_config": {}, "transform_config": {}, "version": "0.15.0"}`

	ctFP8Static = `{"config_groups": {"group_0": {"targets": ["Linear"],
    "weights": {"num_bits": 8, "type": "float", "strategy": "tensor", "symmetric": true, "dynamic": false},
    "input_activations": {"num_bits": 8, "type": "float", "strategy": "tensor", "symmetric": true, "dynamic": false,
      "observer": "static_minmax"}}},
  "format": "float-quantized", "ignore": ["lm_head"], "quant_method": "compressed-tensors"}`

	ctFP8Block = `{"config_groups": {"group_0": {"targets": ["Linear"],
    "weights": {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128],
      "symmetric": true, "dynamic": false},
    "input_activations": {"num_bits": 8, "type": "float", "strategy": "group", "group_size": 128,
      "symmetric": true, "dynamic": true}}},
  "format": "float-quantized", "ignore": ["lm_head", "re:.*mlp.gate$"], "quant_method": "compressed-tensors"}`

	ctNVFP4 = `{
  "config_groups": {"group_0": {"format": "nvfp4-pack-quantized",
    "input_activations": {"actorder": null, "block_structure": null, "dynamic": "local", "group_size": 16,
      "num_bits": 4, "observer": "static_minmax", "observer_kwargs": {}, "scale_dtype": "torch.float8_e4m3fn",
      "strategy": "tensor_group", "symmetric": true, "type": "float", "zp_dtype": null},
    "output_activations": null, "targets": ["Linear"],
    "weights": {"actorder": null, "block_structure": null, "dynamic": false, "group_size": 16, "num_bits": 4,
      "observer": "memoryless_minmax", "observer_kwargs": {}, "scale_dtype": "torch.float8_e4m3fn",
      "strategy": "tensor_group", "symmetric": true, "type": "float", "zp_dtype": null}}},
  "format": "nvfp4-pack-quantized", "global_compression_ratio": null,
  "ignore": ["lm_head", "model.layers.0.mlp.gate"],
  "kv_cache_scheme": {"num_bits": 8, "type": "float", "symmetric": true, "strategy": "tensor", "dynamic": false,
    "group_size": null, "block_structure": null, "actorder": null, "observer": "static_minmax",
    "observer_kwargs": {}, "scale_dtype": null, "zp_dtype": null},
  "quant_method": "compressed-tensors", "quantization_status": "compressed", "sparsity_config": {},
  "transform_config": {}, "version": "0.15.0"}`

	ctNVFP4A16 = `{"config_groups": {"group_0": {"format": "nvfp4-pack-quantized", "targets": ["Linear"],
    "input_activations": null,
    "weights": {"dynamic": false, "group_size": 16, "num_bits": 4, "strategy": "tensor_group",
      "symmetric": true, "type": "float"}}},
  "format": "nvfp4-pack-quantized", "ignore": ["lm_head", "re:.*visual.*", "re:.*linear_attn.*"],
  "kv_cache_scheme": null, "quant_method": "compressed-tensors"}`

	ctW4A16Int = `{"config_groups": {"group_0": {"targets": ["Linear"],
    "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "symmetric": true,
      "dynamic": false}}}, "format": "pack-quantized", "quant_method": "compressed-tensors"}`

	mOptConfigJSON = `{"config_groups": {"group_0": {
    "input_activations": {"dynamic": false, "num_bits": 4, "type": "float", "group_size": 16},
    "weights": {"dynamic": false, "num_bits": 4, "type": "float", "group_size": 16}, "targets": ["Linear"]}},
  "ignore": ["lm_head", "model.layers.0.mlp.gate"], "quant_algo": "NVFP4",
  "kv_cache_scheme": {"dynamic": false, "num_bits": 8, "type": "float"},
  "producer": {"name": "modelopt", "version": "0.37.0"}, "quant_method": "modelopt"}`

	mOptHFQuant = `{"producer": {"name": "modelopt", "version": "0.37.0"},
  "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8", "group_size": 16,
    "exclude_modules": ["lm_head", "model.layers.30.self_attn*"]}}`

	qwenFP8Block = `{"activation_scheme": "dynamic", "modules_to_not_convert": ["lm_head"], "fmt": "e4m3",
  "quant_method": "fp8", "weight_block_size": [128, 128]}`
)

func TestParseQuantizationConfig(t *testing.T) {
	tests := []struct {
		name, json, scheme, kv, format string
		method                         QuantMethod
		ignore                         []string
		block                          []int
		groupSize                      int
	}{
		{"compressed-tensors FP8_DYNAMIC", ctFP8Dynamic, SchemeFP8Dynamic, KVCacheAuto, "float-quantized",
			QuantCompressedTensors, []string{"lm_head"}, nil, 0},
		{"compressed-tensors FP8 static", ctFP8Static, SchemeFP8, KVCacheAuto, "float-quantized",
			QuantCompressedTensors, []string{"lm_head"}, nil, 0},
		{"compressed-tensors FP8_BLOCK", ctFP8Block, SchemeFP8Block, KVCacheAuto, "float-quantized",
			QuantCompressedTensors, []string{"lm_head", "re:.*mlp.gate$"}, []int{128, 128}, 0},
		{"compressed-tensors FP8_BLOCK, old string block", strings.Replace(ctFP8Block, "[128, 128]", `"128x128"`, 1),
			SchemeFP8Block, KVCacheAuto, "float-quantized", QuantCompressedTensors, []string{"lm_head", "re:.*mlp.gate$"}, []int{128, 128}, 0},
		{"compressed-tensors NVFP4 with FP8 KV", ctNVFP4, SchemeNVFP4, KVCacheFP8, "nvfp4-pack-quantized",
			QuantCompressedTensors, []string{"lm_head", "model.layers.0.mlp.gate"}, nil, 16},
		{"compressed-tensors NVFP4A16", ctNVFP4A16, SchemeNVFP4A16, KVCacheAuto, "nvfp4-pack-quantized",
			QuantCompressedTensors, []string{"lm_head", "re:.*visual.*", "re:.*linear_attn.*"}, nil, 16},
		{"modelopt config.json NVFP4", mOptConfigJSON, SchemeNVFP4, KVCacheFP8, "",
			QuantModelOpt, []string{"lm_head", "model.layers.0.mlp.gate"}, nil, 16},
		{"vLLM fp8 block (Qwen -FP8)", qwenFP8Block, SchemeFP8Block, KVCacheAuto, "",
			QuantFP8, []string{"lm_head"}, []int{128, 128}, 0},
		{"vLLM fp8 static", `{"quant_method": "fp8", "activation_scheme": "static"}`, SchemeFP8, KVCacheAuto, "",
			QuantFP8, nil, nil, 0},
		{"vLLM fp8 dynamic per-tensor", `{"quant_method": "fp8", "ignored_layers": ["lm_head"]}`, SchemeFP8PerTensorDynamic,
			KVCacheAuto, "", QuantFP8, []string{"lm_head"}, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, err := ParseQuantizationConfig([]byte(tt.json))
			if err != nil {
				t.Fatal(err)
			}
			if q.Method != tt.method || q.Scheme != tt.scheme || q.KVCacheDType != tt.kv || q.Format != tt.format ||
				!slices.Equal(q.Ignore, tt.ignore) || !slices.Equal(q.WeightBlockSize, tt.block) || q.GroupSize != tt.groupSize {
				t.Errorf("got method %s scheme %s kv %s format %q ignore %q block %v group %d",
					q.Method, q.Scheme, q.KVCacheDType, q.Format, q.Ignore, q.WeightBlockSize, q.GroupSize)
			}
			if string(q.Raw) != tt.json {
				t.Error("Raw does not hold the object as written")
			}
		})
	}
}

func TestQuantizationErrors(t *testing.T) {
	tests := []struct {
		name, json string
		want       error
		inError    string
	}{
		{"unknown quant_method", `{"quant_method": "gptq", "bits": 4}`, ErrUnsupportedQuantization, `"gptq"`},
		{"no quant_method (MLX)", `{"group_size": 64, "bits": 4}`, ErrUnsupportedQuantization, "no quant_method"},
		{"int W4A16", ctW4A16Int, ErrUnsupportedQuantization, "int4 group"},
		{"FP8 weight-only", strings.Replace(ctFP8Static, `"input_activations"`, `"unused"`, 1), ErrUnsupportedQuantization, "input_activations none"},
		{"NVFP4 group 32", strings.ReplaceAll(ctNVFP4A16, `"group_size": 16`, `"group_size": 32`), ErrUnsupportedQuantization, "group_size=32"},
		{"asymmetric FP8", strings.Replace(ctFP8Dynamic, `"symmetric": true`, `"symmetric": false`, 1), ErrUnsupportedQuantization, ""},
		{"int8 KV cache", strings.Replace(ctNVFP4, `"type": "float", "symmetric": true, "strategy": "tensor"`, `"type": "int", "symmetric": true, "strategy": "tensor"`, 1),
			ErrUnsupportedQuantization, "KV cache"},
		{"output activations", strings.Replace(ctFP8Dynamic, `"output_activations": null`, `"output_activations": {"num_bits": 8, "type": "float"}`, 1),
			ErrUnsupportedQuantization, "output activation"},
		{"transforms", strings.Replace(ctFP8Dynamic, `"transform_config": {}`, `"transform_config": {"config_groups": {"u": {}}}`, 1),
			ErrUnsupportedQuantization, "transforms"},
		{"no config_groups", `{"quant_method": "compressed-tensors", "format": "float-quantized"}`, ErrInvalidConfig, "config_groups"},
		{"num_bits as string", strings.Replace(ctFP8Static, `"num_bits": 8`, `"num_bits": "8"`, 1), ErrInvalidConfig, "num_bits: want an integer"},
		{"dynamic as number", strings.Replace(ctFP8Static, `"dynamic": false`, `"dynamic": 0`, 1), ErrInvalidConfig, "dynamic"},
		{"unknown ModelOpt algo", strings.Replace(mOptConfigJSON, `"NVFP4"`, `"W4A8_AWQ"`, 1), ErrUnsupportedQuantization, `"W4A8_AWQ"`},
		{"ModelOpt group disagrees with algo", strings.Replace(mOptConfigJSON, `"quant_algo": "NVFP4"`, `"quant_algo": "FP8"`, 1), ErrInvalidConfig, "quant_algo is FP8"},
		{"fp8 block with static activations", `{"quant_method": "fp8", "activation_scheme": "static", "weight_block_size": [128, 128]}`,
			ErrUnsupportedQuantization, "dynamic"},
		{"fp8 bad block", `{"quant_method": "fp8", "weight_block_size": [128]}`, ErrInvalidConfig, "weight_block_size"},
		{"not an object", `[]`, ErrInvalidConfig, "not a JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseQuantizationConfig([]byte(tt.json))
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.inError) {
				t.Fatalf("error = %v; want %v containing %q", err, tt.want, tt.inError)
			}
		})
	}
}

func TestMixedCompressedTensors(t *testing.T) {
	mixed := `{"quant_method": "compressed-tensors", "format": "mixed-precision", "config_groups": {
	  "group_0": {"targets": ["re:.*self_attn.*"], "format": "float-quantized",
	    "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
	    "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": true}},
	  "group_1": {"targets": ["re:.*mlp.*"], "format": "nvfp4-pack-quantized",
	    "weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16}}}}`
	q, err := ParseQuantizationConfig([]byte(mixed))
	if err != nil {
		t.Fatal(err)
	}
	if q.Scheme != SchemeMixed || len(q.Groups) != 2 || q.Groups[0].Scheme != SchemeFP8Dynamic ||
		q.Groups[1].Scheme != SchemeNVFP4A16 || q.Groups[1].Format != "nvfp4-pack-quantized" || q.GroupSize != 16 {
		t.Errorf("got %+v", q)
	}
}

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestReadQuantConfig(t *testing.T) {
	base := `{"model_type": "qwen3", "hidden_size": 64%s}`
	withQ := func(q string) string { return strings.Replace(base, "%s", `, "quantization_config": `+q, 1) }
	plain := strings.Replace(base, "%s", "", 1)
	mixedHF := `{"producer": {"name": "modelopt", "version": "0.44.0"}, "quantization": {"quant_algo": "MIXED_PRECISION",
	  "kv_cache_quant_algo": "FP8", "quantized_layers": {"model.layers.0.self_attn.q_proj": {"quant_algo": "FP8"},
	  "model.layers.0.mlp.experts": {"quant_algo": "NVFP4", "group_size": 16}}}}`
	tests := []struct {
		name    string
		files   map[string]string
		scheme  string
		kv      string
		method  QuantMethod
		wantNil bool
		want    error
	}{
		{"unquantized", map[string]string{ConfigFileName: plain}, "", "", "", true, nil},
		{"compressed-tensors in config.json", map[string]string{ConfigFileName: withQ(ctFP8Block)}, SchemeFP8Block, KVCacheAuto, QuantCompressedTensors, false, nil},
		{"hf_quant_config.json only", map[string]string{ConfigFileName: plain, HFQuantConfigFileName: mOptHFQuant}, SchemeNVFP4, KVCacheFP8, QuantModelOpt, false, nil},
		{"both ModelOpt, agreeing", map[string]string{ConfigFileName: withQ(mOptConfigJSON), HFQuantConfigFileName: mOptHFQuant}, SchemeNVFP4, KVCacheFP8, QuantModelOpt, false, nil},
		{"both ModelOpt, KV disagrees", map[string]string{ConfigFileName: withQ(strings.Replace(mOptConfigJSON,
			`"kv_cache_scheme": {"dynamic": false, "num_bits": 8, "type": "float"}`, `"kv_cache_scheme": null`, 1)),
			HFQuantConfigFileName: mOptHFQuant}, "", "", "", false, ErrInvalidConfig},
		{"compressed-tensors plus hf_quant_config.json", map[string]string{ConfigFileName: withQ(ctNVFP4), HFQuantConfigFileName: mOptHFQuant}, "", "", "", false, ErrInvalidConfig},
		{"ModelOpt mixed precision", map[string]string{ConfigFileName: plain, HFQuantConfigFileName: mixedHF}, SchemeMixed, KVCacheFP8, QuantModelOpt, false, nil},
		{"legacy NVFP4 without group_size", map[string]string{ConfigFileName: plain,
			HFQuantConfigFileName: strings.Replace(mOptHFQuant, `"group_size": 16,`, "", 1)}, "", "", "", false, ErrInvalidConfig},
		{"unknown kv algo", map[string]string{ConfigFileName: plain,
			HFQuantConfigFileName: strings.Replace(mOptHFQuant, `"kv_cache_quant_algo": "FP8"`, `"kv_cache_quant_algo": "INT8"`, 1)}, "", "", "", false, ErrUnsupportedQuantization},
		{"missing config.json", map[string]string{HFQuantConfigFileName: mOptHFQuant}, "", "", "", false, os.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := writeFiles(t, tt.files)
			q, err := ReadQuantConfig(dir)
			if tt.want != nil {
				if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), dir) {
					t.Fatalf("error = %v; want %v naming %s", err, tt.want, dir)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.wantNil {
				if q != nil {
					t.Fatalf("got %+v, want nil", q)
				}
				return
			}
			if q.Scheme != tt.scheme || q.KVCacheDType != tt.kv || q.Method != tt.method {
				t.Errorf("got %s %s %s, want %s %s %s", q.Method, q.Scheme, q.KVCacheDType, tt.method, tt.scheme, tt.kv)
			}
		})
	}
	// The mixed-precision module map and the producer.
	dir := writeFiles(t, map[string]string{ConfigFileName: plain, HFQuantConfigFileName: mixedHF})
	q, err := ReadQuantConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	if q.QuantizedLayers["model.layers.0.mlp.experts"] != SchemeNVFP4 || q.QuantizedLayers["model.layers.0.self_attn.q_proj"] != SchemeFP8 || q.Producer != "modelopt 0.44.0" {
		t.Errorf("QuantizedLayers %v, Producer %q", q.QuantizedLayers, q.Producer)
	}
}

func TestModelOptHFQuantAlgos(t *testing.T) {
	tests := []struct{ json, scheme, kv string }{
		{`{"quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": null, "exclude_modules": ["lm_head"]}}`, SchemeFP8, KVCacheAuto},
		{`{"quantization": {"quant_algo": "FP8_PER_CHANNEL_PER_TOKEN"}}`, SchemeFP8Dynamic, KVCacheAuto},
		{`{"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8", "group_size": 16, "exclude_modules": []}`, SchemeNVFP4, KVCacheFP8},
	}
	for _, tt := range tests {
		q, err := parseModelOptHFQuantConfig([]byte(tt.json))
		if err != nil || q.Scheme != tt.scheme || q.KVCacheDType != tt.kv || q.Method != QuantModelOpt {
			t.Errorf("parseModelOptHFQuantConfig(%s) = %+v, %v; want %s %s", tt.json, q, err, tt.scheme, tt.kv)
		}
	}
	for _, bad := range []string{
		`{"quantization": {"quant_algo": "FP8_PB_WO"}}`,
		`{"quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": null, "group_size": 32, "exclude_modules": []}}`,
		`{"quantization": {"quant_algo": "MIXED_PRECISION"}}`,
		`{"quantization": {"quant_algo": "MIXED_PRECISION", "quantized_layers": {"a": {"quant_algo": "INT4_AWQ"}}}}`,
	} {
		if _, err := parseModelOptHFQuantConfig([]byte(bad)); err == nil {
			t.Errorf("parseModelOptHFQuantConfig(%s) succeeded", bad)
		}
	}
}

func FuzzParseQuantizationConfig(f *testing.F) {
	for _, s := range []string{ctFP8Dynamic, ctFP8Static, ctFP8Block, ctNVFP4, ctNVFP4A16, ctW4A16Int, mOptConfigJSON, qwenFP8Block} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		q, err := ParseQuantizationConfig(data)
		if err == nil && (q.Scheme == "" || q.KVCacheDType == "") {
			t.Fatalf("accepted without a scheme or KV dtype: %+v", q)
		}
		_, _ = parseModelOptHFQuantConfig(data)
	})
}
