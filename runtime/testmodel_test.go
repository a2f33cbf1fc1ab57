package runtime

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/lowbit-ai/lowbit/checkpoint"
	"github.com/lowbit-ai/lowbit/format"
)

// smallSpec is a hand-made model, much smaller than synth's tiny one (whose
// vocabulary is Qwen3's 151936), so that tests of the forward run in
// milliseconds with the reference kernels.
type smallSpec struct {
	arch                         string // "qwen3" or "llama"
	vocab, hidden, inter, layers int
	heads, kvHeads, headDim      int
	maxPos                       int
	tied                         bool
	seed                         uint64
	extraConfig                  map[string]any
	edit                         func([]tensorSpec) []tensorSpec // changes the tensor list before writing
}

// small128 has every dimension a multiple of 128, so that every scheme,
// fp8-block included, can quantize it.
var small128 = smallSpec{arch: "qwen3", vocab: 384, hidden: 128, inter: 256, layers: 2,
	heads: 4, kvHeads: 2, headDim: 64, maxPos: 64, seed: 1}

// tensorSpec is a tensor to write: name, dtype, shape and how to draw it.
type tensorSpec struct {
	name  string
	dtype format.DType
	shape []int64
	std   float64 // values N(mean, std²)
	mean  float64
}

func (s smallSpec) config() map[string]any {
	arch := map[string]string{"qwen3": "Qwen3ForCausalLM", "llama": "LlamaForCausalLM"}[s.arch]
	cfg := map[string]any{
		"architectures": []string{arch}, "model_type": s.arch,
		"vocab_size": s.vocab, "hidden_size": s.hidden, "intermediate_size": s.inter,
		"num_hidden_layers": s.layers, "num_attention_heads": s.heads, "num_key_value_heads": s.kvHeads,
		"head_dim": s.headDim, "max_position_embeddings": s.maxPos, "rms_norm_eps": 1e-6,
		"rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": s.tied,
		"torch_dtype": "bfloat16", "eos_token_id": 2, "bos_token_id": 1,
	}
	for k, v := range s.extraConfig {
		cfg[k] = v
	}
	return cfg
}

func (s smallSpec) tensors() []tensorSpec {
	var ts []tensorSpec
	add := func(name string, std, mean float64, shape ...int) {
		ts = append(ts, tensorSpec{name: name, dtype: format.BF16, shape: dimsOf64(shape), std: std, mean: mean})
	}
	lin := func(name string, out, in int) { add(name, 1/math.Sqrt(float64(in)), 0, out, in) }
	add("model.embed_tokens.weight", 1, 0, s.vocab, s.hidden)
	for i := range s.layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		add(p+"input_layernorm.weight", 0.1, 1, s.hidden)
		lin(p+"self_attn.q_proj.weight", s.heads*s.headDim, s.hidden)
		lin(p+"self_attn.k_proj.weight", s.kvHeads*s.headDim, s.hidden)
		lin(p+"self_attn.v_proj.weight", s.kvHeads*s.headDim, s.hidden)
		lin(p+"self_attn.o_proj.weight", s.hidden, s.heads*s.headDim)
		if s.arch == "qwen3" {
			add(p+"self_attn.q_norm.weight", 0.1, 1, s.headDim)
			add(p+"self_attn.k_norm.weight", 0.1, 1, s.headDim)
		}
		add(p+"post_attention_layernorm.weight", 0.1, 1, s.hidden)
		lin(p+"mlp.gate_proj.weight", s.inter, s.hidden)
		lin(p+"mlp.up_proj.weight", s.inter, s.hidden)
		lin(p+"mlp.down_proj.weight", s.hidden, s.inter)
	}
	add("model.norm.weight", 0.1, 1, s.hidden)
	if !s.tied {
		lin("lm_head.weight", s.vocab, s.hidden)
	}
	return ts
}

func dimsOf64(d []int) []int64 {
	s := make([]int64, len(d))
	for i, v := range d {
		s[i] = int64(v)
	}
	return s
}

// write writes the model into a new directory under t.TempDir and returns
// it.
func (s smallSpec) write(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "model")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg, err := json.MarshalIndent(s.config(), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	ts := s.tensors()
	if s.edit != nil {
		ts = s.edit(ts)
	}
	specs := make([]checkpoint.TensorSpec, len(ts))
	for i, x := range ts {
		specs[i] = checkpoint.TensorSpec{Name: x.name, DType: x.dtype, Shape: x.shape}
	}
	_, err = checkpoint.WriteTensors(dir, specs, func(i int, w io.Writer) error {
		_, err := w.Write(tensorBytes(ts[i], s.seed))
		return err
	}, checkpoint.WriteOptions{Metadata: map[string]string{"format": "pt"}})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// tensorBytes draws a tensor's values from a generator seeded by the seed
// and the tensor's name.
func tensorBytes(x tensorSpec, seed uint64) []byte {
	var h uint64 = 14695981039346656037
	for _, c := range []byte(x.name) {
		h = (h ^ uint64(c)) * 1099511628211
	}
	r := rand.New(rand.NewPCG(seed, h))
	n := int64(1)
	for _, d := range x.shape {
		n *= d
	}
	vals := make([]float32, n)
	for i := range vals {
		vals[i] = float32(x.mean + x.std*r.NormFloat64())
	}
	b := make([]byte, n*int64(x.dtype.Size()))
	switch x.dtype {
	case format.BF16:
		format.EncodeBF16(b, vals)
	case format.F32:
		format.EncodeF32(b, vals)
	case format.F16:
		format.EncodeF16(b, vals)
	default:
		for i := range b {
			b[i] = byte(r.Uint32())
		}
	}
	return b
}

// without returns an edit that drops the named tensors.
func without(names ...string) func([]tensorSpec) []tensorSpec {
	return func(ts []tensorSpec) []tensorSpec {
		return slices.DeleteFunc(ts, func(x tensorSpec) bool { return slices.Contains(names, x.name) })
	}
}

// changed returns an edit that applies f to the named tensor.
func changed(name string, f func(*tensorSpec)) func([]tensorSpec) []tensorSpec {
	return func(ts []tensorSpec) []tensorSpec {
		for i := range ts {
			if ts[i].name == name {
				f(&ts[i])
			}
		}
		return ts
	}
}

// with returns an edit that appends a tensor.
func with(x tensorSpec) func([]tensorSpec) []tensorSpec {
	return func(ts []tensorSpec) []tensorSpec { return append(ts, x) }
}
