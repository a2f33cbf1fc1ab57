package quantize

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/lowbit-ai/lowbit/checkpoint"
	"github.com/lowbit-ai/lowbit/format"
	"github.com/lowbit-ai/lowbit/synth"
)

var (
	tinyOnce sync.Map // arch -> *tinyModel
)

type tinyModel struct {
	dir     string
	cfgJSON []byte
	inv     *checkpoint.Inventory
}

// tiny returns the synthetic tiny model of arch, written once per test run.
func tiny(t *testing.T, arch checkpoint.Arch) *tinyModel {
	t.Helper()
	if v, ok := tinyOnce.Load(arch); ok {
		return v.(*tinyModel)
	}
	dir := filepath.Join(testTempDir, arch.String())
	if _, err := synth.Write(dir, synth.Options{Arch: arch, Size: synth.Tiny, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	inv, err := checkpoint.ReadInventory(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := &tinyModel{dir: dir, cfgJSON: cfg, inv: inv}
	tinyOnce.Store(arch, m)
	return m
}

var testTempDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "lowbit-quantize-test")
	if err != nil {
		panic(err)
	}
	testTempDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func outputNames(p *Plan) []string {
	var names []string
	for _, o := range p.Outputs {
		names = append(names, o.Name)
	}
	return names
}

func TestPlanQwen3FP8Dynamic(t *testing.T) {
	m := tiny(t, checkpoint.Qwen3)
	p, err := NewPlan(m.inv, m.cfgJSON, Options{Scheme: FP8Dynamic, Format: CompressedTensors})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(p.Quantized); got != 2*7 {
		t.Errorf("quantized %d modules, want 14: %v", got, p.Quantized)
	}
	if !slices.Equal(p.Ignore, []string{"lm_head"}) {
		t.Errorf("Ignore = %v, want [lm_head]", p.Ignore)
	}
	names := outputNames(p)
	for _, want := range []string{
		"model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.q_proj.weight_scale",
		"model.layers.1.mlp.down_proj.weight_scale", "model.embed_tokens.weight", "lm_head.weight",
		"model.layers.0.self_attn.q_norm.weight", "model.norm.weight",
	} {
		if !slices.Contains(names, want) {
			t.Errorf("outputs lack %s", want)
		}
	}
	for i, o := range p.Outputs {
		if o.Name == "model.layers.0.self_attn.q_proj.weight" && o.DType != format.F8E4M3 {
			t.Errorf("q_proj.weight dtype %v, want F8_E4M3", o.DType)
		}
		if o.Name == "model.layers.0.self_attn.q_proj.weight_scale" && !slices.Equal(o.Shape, []int64{64, 1}) {
			t.Errorf("output %d %s shape %v, want [64 1]", i, o.Name, o.Shape)
		}
	}
	cfg, err := checkpoint.ParseConfig(p.ConfigJSON)
	if err != nil {
		t.Fatalf("written config.json does not parse: %v", err)
	}
	if cfg.Quantization == nil || cfg.Quantization.Scheme != checkpoint.SchemeFP8Dynamic || cfg.Quantization.KVCacheDType != checkpoint.KVCacheAuto {
		t.Errorf("written quantization = %+v", cfg.Quantization)
	}
	if !strings.Contains(string(p.ConfigJSON), `"kv_cache_scheme": null`) {
		t.Errorf("config.json lacks an explicit null kv_cache_scheme")
	}
}

// Qwen3.5-MoE with NVFP4: fused experts split per expert, Gated DeltaNet
// projections, routers and the shared-expert gate kept in BF16.
func TestPlanQwen35MoENVFP4(t *testing.T) {
	m := tiny(t, checkpoint.Qwen35MoE)
	p, err := NewPlan(m.inv, m.cfgJSON, Options{Scheme: NVFP4A16, Format: CompressedTensors})
	if err != nil {
		t.Fatal(err)
	}
	names := outputNames(p)
	pre := "model.language_model.layers.0."
	for _, want := range []string{
		pre + "mlp.experts.0.gate_proj.weight_packed", pre + "mlp.experts.7.up_proj.weight_global_scale",
		pre + "mlp.experts.3.down_proj.weight_scale", pre + "mlp.shared_expert.gate_proj.weight_packed",
		pre + "mlp.gate.weight", pre + "mlp.shared_expert_gate.weight", pre + "linear_attn.in_proj_qkv.weight",
		pre + "linear_attn.conv1d.weight", pre + "linear_attn.A_log",
	} {
		if !slices.Contains(names, want) {
			t.Errorf("outputs lack %s", want)
		}
	}
	for _, absent := range []string{pre + "mlp.experts.gate_up_proj", pre + "mlp.experts.down_proj"} {
		if slices.Contains(names, absent) {
			t.Errorf("fused expert tensor %s was not split", absent)
		}
	}
	for _, want := range []string{"lm_head", pre + "mlp.gate", pre + "mlp.shared_expert_gate", pre + "linear_attn.in_proj_qkv", pre + "linear_attn.out_proj"} {
		if !slices.Contains(p.Ignore, want) {
			t.Errorf("Ignore lacks %s: %v", want, p.Ignore)
		}
	}
	for _, q := range p.Quantized {
		if strings.Contains(q, "linear_attn") {
			t.Errorf("%s quantized; Gated DeltaNet stays BF16 with NVFP4 by default", q)
		}
	}
	// --quantize-linear-attn overrides the default.
	p2, err := NewPlan(m.inv, m.cfgJSON, Options{Scheme: NVFP4A16, Format: CompressedTensors, QuantizeLinearAttn: true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(p2.Quantized, pre+"linear_attn.in_proj_qkv") {
		t.Errorf("--quantize-linear-attn did not quantize in_proj_qkv")
	}
}

// Ignoring one member of a fused layer keeps the whole layer in BF16.
func TestPlanFusedIgnore(t *testing.T) {
	m := tiny(t, checkpoint.Qwen3)
	p, err := NewPlan(m.inv, m.cfgJSON, Options{Scheme: FP8Dynamic, Format: CompressedTensors,
		Ignore: []string{`re:.*layers\.0\.self_attn\.k_proj$`, "model.layers.1.mlp.up_proj"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, kept := range []string{"model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.k_proj", "model.layers.0.self_attn.v_proj",
		"model.layers.1.mlp.gate_proj", "model.layers.1.mlp.up_proj"} {
		if slices.Contains(p.Quantized, kept) || !slices.Contains(p.Ignore, kept) {
			t.Errorf("%s should be kept in BF16 and ignored", kept)
		}
	}
	for _, q := range []string{"model.layers.0.self_attn.o_proj", "model.layers.1.mlp.down_proj", "model.layers.1.self_attn.k_proj"} {
		if !slices.Contains(p.Quantized, q) {
			t.Errorf("%s should be quantized", q)
		}
	}
	if len(p.Notes) != 3 {
		t.Errorf("Notes = %q, want one per module pulled in by its fused layer", p.Notes)
	}
}

func TestPlanErrors(t *testing.T) {
	m := tiny(t, checkpoint.Qwen3)
	quantCfg := strings.Replace(string(m.cfgJSON), "{", `{"quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic"},`, 1)
	cases := []struct {
		name string
		cfg  []byte
		opts Options
		want string
		is   error
	}{
		{"static fp8 without stats", m.cfgJSON, Options{Scheme: FP8, Format: CompressedTensors}, "run lowbit calibrate", nil},
		{"nvfp4 without stats", m.cfgJSON, Options{Scheme: NVFP4, Format: CompressedTensors}, "nvfp4a16", nil},
		{"fp8 kv without stats", m.cfgJSON, Options{Scheme: FP8Dynamic, Format: CompressedTensors, KVCacheFP8: true}, "--kv-scale-one", nil},
		{"modelopt fp8-block", m.cfgJSON, Options{Scheme: FP8Block, Format: ModelOpt}, "modelopt", nil},
		{"bad ignore regexp", m.cfgJSON, Options{Scheme: FP8Dynamic, Format: CompressedTensors, Ignore: []string{"re:("}}, `ignore "re:("`, nil},
		{"already quantized config", []byte(quantCfg), Options{Scheme: FP8Dynamic, Format: CompressedTensors}, "", ErrAlreadyQuantized},
		{"unknown architecture", []byte(`{"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}`), Options{Scheme: FP8Dynamic, Format: CompressedTensors}, "", checkpoint.ErrUnknownArchitecture},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewPlan(m.inv, c.cfg, c.opts)
			if err == nil || (c.want != "" && !strings.Contains(err.Error(), c.want)) || (c.is != nil && !errors.Is(err, c.is)) {
				t.Errorf("NewPlan = %v, want an error containing %q / wrapping %v", err, c.want, c.is)
			}
		})
	}
}

func TestPlanKVScaleOne(t *testing.T) {
	m := tiny(t, checkpoint.Qwen35)
	for _, f := range []Format{CompressedTensors, ModelOpt} {
		p, err := NewPlan(m.inv, m.cfgJSON, Options{Scheme: FP8Dynamic, Format: f, KVCacheFP8: true, KVScaleOne: true})
		if err != nil {
			t.Fatal(err)
		}
		var kv []string
		for _, o := range p.Outputs {
			if strings.HasSuffix(o.Name, "k_scale") || strings.HasSuffix(o.Name, "v_scale") {
				kv = append(kv, o.Name)
			}
		}
		// The tiny Qwen3.5 has one full-attention layer (layer 3).
		want := []string{"model.language_model.layers.3.self_attn.k_scale", "model.language_model.layers.3.self_attn.v_scale"}
		if f == ModelOpt {
			want = []string{"model.language_model.layers.3.self_attn.k_proj.k_scale", "model.language_model.layers.3.self_attn.v_proj.v_scale"}
		}
		if !slices.Equal(kv, want) {
			t.Errorf("%s: KV scales %v, want %v", f, kv, want)
		}
	}
}

// Ignoring one routed expert keeps every expert of its MoE layer in BF16:
// loaders build a layer's experts as one fused module.
func TestPlanExpertIgnoreCoversLayer(t *testing.T) {
	m := tiny(t, checkpoint.Qwen3MoE)
	p, err := NewPlan(m.inv, m.cfgJSON, Options{Scheme: FP8Dynamic, Format: CompressedTensors,
		Ignore: []string{"model.layers.1.mlp.experts.3.down_proj"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range p.Quantized {
		if strings.HasPrefix(q, "model.layers.1.mlp.experts.") {
			t.Errorf("%s quantized; layer 1's experts should all stay BF16", q)
		}
	}
	if !slices.Contains(p.Quantized, "model.layers.0.mlp.experts.3.down_proj") {
		t.Errorf("layer 0's experts should be quantized")
	}
}
