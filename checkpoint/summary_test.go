package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lowbit-ai/lowbit/format"
)

// An NVFP4 compressed-tensors checkpoint in miniature: the summary must name
// the scheme from the config, count the scale tensors by suffix and total
// the bytes per dtype.
func TestInspectQuantizedDir(t *testing.T) {
	dir := writeFiles(t, map[string]string{"config.json": `{
		"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 16,
		"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
		"num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
		"rope_theta": 1000000, "tie_word_embeddings": true, "max_position_embeddings": 128,
		"quantization_config": {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
			"config_groups": {"group_0": {"targets": ["Linear"], "format": "nvfp4-pack-quantized",
				"weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16, "symmetric": true, "dynamic": false},
				"input_activations": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16, "symmetric": true, "dynamic": "local"}}},
			"ignore": ["lm_head"], "kv_cache_scheme": null}}`})
	specs := []TensorSpec{
		{Name: "model.embed_tokens.weight", DType: format.BF16, Shape: []int64{16, 32}},
		{Name: "model.layers.0.mlp.down_proj.weight_packed", DType: format.U8, Shape: []int64{32, 32}},
		{Name: "model.layers.0.mlp.down_proj.weight_scale", DType: format.F8E4M3, Shape: []int64{32, 4}},
		{Name: "model.layers.0.mlp.down_proj.weight_global_scale", DType: format.F32, Shape: []int64{1}},
		{Name: "model.layers.0.mlp.down_proj.input_global_scale", DType: format.F32, Shape: []int64{1}},
	}
	if _, err := WriteTensors(dir, specs, patternFill(specs), WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	s, err := Inspect(dir, true)
	if err != nil {
		t.Fatal(err)
	}
	if s.Quant == nil || s.Quant.Scheme != SchemeNVFP4 || s.Quant.KVCacheDType != KVCacheAuto {
		t.Errorf("Quant = %+v, want NVFP4 with auto KV cache", s.Quant)
	}
	wantScales := map[string]int{"weight_packed": 1, "weight_scale": 1, "weight_global_scale": 1, "input_global_scale": 1}
	for k, v := range wantScales {
		if s.ScaleTensors[k] != v {
			t.Errorf("ScaleTensors[%s] = %d, want %d (all: %v)", k, s.ScaleTensors[k], v, s.ScaleTensors)
		}
	}
	if s.Tensors != 5 || s.Bytes != 16*32*2+32*32+32*4+4+4 || len(s.TensorList) != 5 {
		t.Errorf("Tensors = %d, Bytes = %d, list %d", s.Tensors, s.Bytes, len(s.TensorList))
	}
	if s.ByDType[0].DType != format.U8 && s.ByDType[0].DType != format.BF16 {
		t.Errorf("ByDType not sorted by bytes: %+v", s.ByDType)
	}
	if s.Config == nil || s.Config.KVBytesPerToken != 1*2*1*16*2 {
		t.Errorf("Config = %+v", s.Config)
	}
	var text bytes.Buffer
	if err := s.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"compressed-tensors, NVFP4", "1 weight_packed", "model.layers.0.mlp.down_proj.weight_scale"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
	if _, err := json.Marshal(s); err != nil {
		t.Errorf("json: %v", err)
	}
}

func TestInspectSingleFileAndWarnings(t *testing.T) {
	dir := t.TempDir()
	specs := []TensorSpec{{Name: "x.weight_scale", DType: format.BF16, Shape: []int64{2}}}
	if _, err := WriteTensors(dir, specs, patternFill(specs), WriteOptions{Metadata: map[string]string{"format": "pt"}}); err != nil {
		t.Fatal(err)
	}
	s, err := Inspect(filepath.Join(dir, SingleFileName), false)
	if err != nil {
		t.Fatal(err)
	}
	if s.Directory || s.Config != nil || s.Metadata["format"] != "pt" || len(s.Warnings) != 0 {
		t.Errorf("single file summary = %+v", s)
	}
	// The same tensors as a directory with no config.json: both warnings.
	s, err = Inspect(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Warnings) != 2 {
		t.Errorf("Warnings = %q, want no-config and scale-names warnings", s.Warnings)
	}
	if _, err := Inspect(filepath.Join(dir, "absent"), false); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Inspect(absent) = %v, want not-exist", err)
	}
}
