package hub

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lowbit-ai/lowbit/checkpoint"
	"github.com/lowbit-ai/lowbit/synth"
)

// An NVFP4 compressed-tensors config with an FP8 KV cache, as llm-compressor
// writes it (shared/specs/formats.md).
const nvfp4KV8 = `{"config_groups": {"group_0": {"format": "nvfp4-pack-quantized", "targets": ["Linear"],
    "input_activations": {"dynamic": "local", "group_size": 16, "num_bits": 4, "strategy": "tensor_group",
      "symmetric": true, "type": "float"},
    "weights": {"dynamic": false, "group_size": 16, "num_bits": 4, "strategy": "tensor_group",
      "symmetric": true, "type": "float"}}},
  "format": "nvfp4-pack-quantized", "ignore": ["lm_head"],
  "kv_cache_scheme": {"num_bits": 8, "type": "float", "symmetric": true, "strategy": "tensor", "dynamic": false},
  "quant_method": "compressed-tensors"}`

func TestModelCard(t *testing.T) {
	dir := t.TempDir()
	if _, err := synth.Write(dir, synth.Options{Arch: checkpoint.Qwen3, Size: synth.Tiny, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	kl := 0.0123
	bf16, err := ModelCard(dir, CardOptions{Repo: RepoID{"me", "tiny"}, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	b, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	json.Unmarshal(b, &cfg)
	cfg["quantization_config"] = json.RawMessage(nvfp4KV8)
	b, _ = json.Marshal(cfg)
	os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644)
	q, err := ModelCard(dir, CardOptions{Repo: RepoID{"me", "tiny-nvfp4"}, BaseModel: "Qwen/Qwen3-8B",
		Method: "lowbit quantize --scheme nvfp4 --kv-cache-dtype fp8 --calib stats.safetensors", KL: &kl,
		KLData: "512 prompts | 131072 tokens", Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		card string
		want []string
	}{
		{string(bf16), []string{"# tiny\n", "| Scheme | BF16 (not quantized), W16A16KV16 |", "| KL(BF16 ‖ this) | not measured |",
			"Not recorded.", "qwen3", "vllm serve me/tiny --revision COMMIT\n"}},
		{string(q), []string{"base_model: Qwen/Qwen3-8B\nbase_model_relation: quantized\n", "- nvfp4\n- compressed-tensors\n",
			"| Scheme | NVFP4, W4A4KV8 |", "| Format | compressed-tensors (nvfp4-pack-quantized) |",
			"FP8 E4M3", "| Left in 16 bits | lm_head |", "0.0123 nats per token (512 prompts \\| 131072 tokens)",
			"--calib stats.safetensors", "--kv-cache-dtype fp8\n"}},
	} {
		for _, w := range tt.want {
			if !strings.Contains(tt.card, w) {
				t.Errorf("card lacks %q:\n%s", w, tt.card)
			}
		}
	}
	bad := -1.0
	if _, err := ModelCard(dir, CardOptions{KL: &bad}); err == nil {
		t.Error("a negative KL was accepted")
	}
	if _, err := ModelCard(t.TempDir(), CardOptions{}); err == nil {
		t.Error("a directory without a checkpoint got a card")
	}
}
