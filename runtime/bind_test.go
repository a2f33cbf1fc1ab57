package runtime

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lowbit-ai/lowbit/checkpoint"
	"github.com/lowbit-ai/lowbit/format"
	"github.com/lowbit-ai/lowbit/kernels/ref"
)

func TestLoadBinding(t *testing.T) {
	base := small128
	llama := base
	llama.arch = "llama"
	tied := base
	tied.tied = true
	q0 := "model.layers.0.self_attn."
	tests := []struct {
		name  string
		spec  smallSpec
		edit  func([]tensorSpec) []tensorSpec
		isErr error    // nil: Load succeeds
		want  []string // substrings of the error
	}{
		{name: "qwen3", spec: base},
		{name: "llama", spec: llama},
		{name: "tied", spec: tied},
		{name: "tied with a stored lm_head", spec: tied,
			edit: with(tensorSpec{name: "lm_head.weight", dtype: format.BF16, shape: shape(384, 128)})},
		{name: "ignorable inv_freq", spec: base,
			edit: with(tensorSpec{name: q0 + "rotary_emb.inv_freq", dtype: format.F32, shape: shape(32)})},
		{name: "F32 norms", spec: base, edit: changed("model.norm.weight", func(x *tensorSpec) { x.dtype = format.F32 })},
		{name: "missing projection", spec: base, edit: without("model.layers.1.self_attn.q_proj.weight"),
			isErr: ErrBinding, want: []string{"model.layers.1.self_attn.q_proj.weight: missing (want BF16 [256 128]"}},
		{name: "missing q_norm", spec: base, edit: without(q0 + "q_norm.weight"),
			isErr: ErrBinding, want: []string{q0 + "q_norm.weight: missing (want BF16 or F16 or F32 [64])"}},
		{name: "missing lm_head", spec: base, edit: without("lm_head.weight"),
			isErr: ErrBinding, want: []string{"lm_head.weight: missing"}},
		{name: "missing embedding", spec: base, edit: without("model.embed_tokens.weight"),
			isErr: ErrBinding, want: []string{"model.embed_tokens.weight: missing (want BF16 [384 128])"}},
		{name: "wrong shape", spec: base, edit: changed(q0+"k_proj.weight", func(x *tensorSpec) { x.shape = shape(64, 128) }),
			isErr: ErrBinding, want: []string{q0 + "k_proj.weight: shape BF16 [64 128], want BF16 [128 128]"}},
		{name: "wrong norm shape", spec: base, edit: changed(q0+"k_norm.weight", func(x *tensorSpec) { x.shape = shape(32) }),
			isErr: ErrBinding, want: []string{q0 + "k_norm.weight: shape BF16 [32], want BF16 or F16 or F32 [64]"}},
		{name: "wrong norm dtype", spec: base, edit: changed("model.norm.weight", func(x *tensorSpec) { x.dtype = format.I32 }),
			isErr: ErrBinding, want: []string{"model.norm.weight: dtype I32 [128], want BF16 or F16 or F32 [128]"}},
		{name: "wrong weight dtype", spec: base, edit: changed(q0+"o_proj.weight", func(x *tensorSpec) { x.dtype = format.F32 }),
			isErr: ErrBinding, want: []string{q0 + "o_proj.weight: dtype F32 [128 256], want BF16 or F8_E4M3 or U8 [128 256]"}},
		{name: "FP8 weight without a quantization config", spec: base,
			edit:  changed(q0+"v_proj.weight", func(x *tensorSpec) { x.dtype = format.F8E4M3 }),
			isErr: ErrBinding, want: []string{"layer " + q0 + "v_proj: stored as FP8 (an F8_E4M3 weight), but the checkpoint's quantization is BF16"}},
		{name: "leftover bias", spec: base, edit: with(tensorSpec{name: q0 + "q_proj.bias", dtype: format.BF16, shape: shape(256)}),
			isErr: ErrBinding, want: []string{"1 tensor(s) the model does not use: " + q0 + "q_proj.bias"}},
		{name: "llama with q_norm", spec: llama, edit: with(tensorSpec{name: q0 + "q_norm.weight", dtype: format.BF16, shape: shape(64)}),
			isErr: ErrBinding, want: []string{"does not use: " + q0 + "q_norm.weight"}},
		{name: "every error at once", spec: base,
			edit: func(ts []tensorSpec) []tensorSpec {
				ts = without("model.norm.weight")(ts)
				return with(tensorSpec{name: "extra", dtype: format.F32, shape: shape(1)})(ts)
			},
			isErr: ErrBinding, want: []string{"model.norm.weight: missing", "does not use: extra"}},
		{name: "qwen3_moe", spec: withConfig(base, map[string]any{"model_type": "qwen3_moe", "architectures": []string{"Qwen3MoeForCausalLM"},
			"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32}),
			isErr: ErrUnsupported, want: []string{"architecture qwen3_moe"}},
		{name: "sliding window", spec: withConfig(base, map[string]any{"use_sliding_window": true, "sliding_window": 16, "max_window_layers": 0}),
			isErr: ErrUnsupported, want: []string{"sliding_attention"}},
		{name: "yarn", spec: withConfig(base, map[string]any{"rope_scaling": map[string]any{"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}}),
			isErr: ErrUnsupported, want: []string{`rope_type "yarn"`}},
		{name: "attention bias", spec: withConfig(base, map[string]any{"attention_bias": true}),
			isErr: ErrUnsupported, want: []string{"attention_bias"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := tt.spec
			if tt.edit != nil {
				spec.edit = tt.edit
			}
			m, err := Load(spec.write(t), ref.Ops{})
			if tt.isErr == nil {
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				defer m.Close()
				if _, err := m.Forward(m.NewSequence(0), []int{1, 2, 3}); err != nil {
					t.Fatalf("Forward: %v", err)
				}
				return
			}
			if err == nil {
				m.Close()
				t.Fatalf("Load succeeded, want an error wrapping %v", tt.isErr)
			}
			if !errors.Is(err, tt.isErr) {
				t.Errorf("Load: %v\nwant an error wrapping %v", err, tt.isErr)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Load: %v\nwant it to contain %q", err, w)
				}
			}
		})
	}
}

func withConfig(s smallSpec, extra map[string]any) smallSpec {
	s.extraConfig = extra
	return s
}

// TestBinderTwice checks that a name is bound once: binding code that asks
// for the same tensor twice is a bug the binder reports.
func TestBinderTwice(t *testing.T) {
	dir := small128.write(t)
	ck, err := checkpoint.OpenModel(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	b := newBinder(ck)
	b.vector("model.norm.weight", 128)
	b.vector("model.norm.weight", 128)
	if err := b.err(); err == nil || !strings.Contains(err.Error(), "model.norm.weight: bound twice") {
		t.Errorf("binding a tensor twice: %v, want a 'bound twice' error", err)
	}
}

func TestLoadErrors(t *testing.T) {
	if _, err := Load(t.TempDir(), ref.Ops{}); err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Errorf("Load of an empty directory: %v, want an error naming config.json", err)
	}
	dir := small128.write(t)
	if _, err := Load(dir, nil); err == nil {
		t.Error("Load with nil Ops succeeded")
	}
	if err := os.Remove(filepath.Join(dir, "model.safetensors")); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir, ref.Ops{}); err == nil {
		t.Error("Load without weights succeeded")
	}
}
