package runtime

import (
	"errors"
	"fmt"

	"github.com/lowbit-ai/lowbit/checkpoint"
	"github.com/lowbit-ai/lowbit/format"
	"github.com/lowbit-ai/lowbit/kernels"
)

// Model is a loaded decoder-only language model: its config, its weights
// bound by Hugging Face tensor names (views of the mapped checkpoint where
// the kernels read them as stored), and the Ops it computes with. A Model is
// read-only after Load: any number of Sequences may run Forward on it
// concurrently, provided the Ops allow concurrent calls.
type Model struct {
	cfg    *checkpoint.Config
	quant  *checkpoint.Quantization
	ops    kernels.Ops
	ck     *checkpoint.Model
	d      dims
	embed  []byte // BF16 [vocab, hidden], a view of the mapping
	layers []layer
	norm   []float32 // [hidden]
	lmHead kernels.Weight
	notes  []string
	arena  *arena // the weights of a LoadOptions.NoMmap model; nil when they are views of the mapping
}

// dims are the sizes and constants of the forward pass.
type dims struct {
	vocab, hidden, inter, layers int
	heads, kvHeads, headDim      int
	rotaryDim, maxPos            int
	eps                          float32
	theta                        float64
	qkNorm                       bool // Qwen3: per-head RMSNorm of q and k before RoPE
}

// layer is one decoder layer's weights.
type layer struct {
	inputNorm, postNorm []float32 // [hidden]
	qNorm, kNorm        []float32 // [headDim]; nil without qkNorm (Llama)
	q, k, v, o          kernels.Weight
	gate, up, down      kernels.Weight
	// kScale and vScale are an FP8 KV cache's scales: checked at load and
	// applied by an FP8 KVPool (a Sequence's cache is float32; see Notes).
	kScale, vScale float32
}

// Load opens the Hugging Face checkpoint in dir (config.json, optional
// hf_quant_config.json, and the safetensors shards, mapped read-only) and
// binds every tensor the architecture needs, by name:
//
//	model.embed_tokens.weight                        BF16 [vocab, hidden]
//	model.layers.N.input_layernorm.weight            [hidden]
//	model.layers.N.self_attn.{q,k,v,o}_proj          linear, see below
//	model.layers.N.self_attn.{q,k}_norm.weight       [head_dim] (qwen3 only)
//	model.layers.N.post_attention_layernorm.weight   [hidden]
//	model.layers.N.mlp.{gate,up,down}_proj           linear
//	model.norm.weight                                [hidden]
//	lm_head                                          linear [vocab, hidden]; the embedding when tied
//
// Norm gains may be BF16, F16 or F32 and are converted to float32. A linear
// layer X is X.weight BF16 [out, in] or, in a quantized checkpoint, the
// tensors of the checkpoint's scheme (see linear.go; they become a
// kernels.Weight whose data is a view of the mapping and whose scales are
// decoded to float32 once). The embedding stays a BF16 view and its rows
// are converted as tokens are looked up: a Qwen3-8B embedding is 1.2 GB in
// BF16 and would be 2.5 GB in float32, for T rows read per forward.
//
// Every missing tensor, wrong dtype or shape, and every tensor the model
// does not use is an error wrapping ErrBinding that names the tensor and
// what was expected. Tensors that may be left over: X.rotary_emb.inv_freq
// (recomputed from the config) and, for a model with tied embeddings,
// lm_head.weight (vLLM skips it too). Architectures and settings the forward
// does not implement (qwen3_moe, qwen3_5, qwen3_5_moe, sliding windows, RoPE
// scaling, attention biases) are errors wrapping ErrUnsupported.
//
// The Model keeps the checkpoint mapped until Close; LoadWith with
// LoadOptions.NoMmap copies what the forward reads and unmaps it instead.
func Load(dir string, ops kernels.Ops) (*Model, error) {
	return LoadWith(dir, ops, LoadOptions{})
}

// LoadWith is Load with options.
func LoadWith(dir string, ops kernels.Ops, opts LoadOptions) (*Model, error) {
	if ops == nil {
		return nil, errors.New("runtime: Load needs kernels.Ops")
	}
	cfg, err := checkpoint.ReadConfig(dir)
	if err != nil {
		return nil, err
	}
	q, err := checkpoint.ReadQuantConfig(dir)
	if err != nil {
		return nil, err
	}
	d, err := dimsOf(cfg)
	if err != nil {
		return nil, fmt.Errorf("runtime: %s: %w", dir, err)
	}
	s, err := schemeOf(q)
	if err != nil {
		return nil, err
	}
	ck, err := checkpoint.OpenModel(dir)
	if err != nil {
		return nil, err
	}
	m := &Model{cfg: cfg, quant: q, ops: ops, ck: ck, d: d}
	b := newBinder(ck)
	m.bind(b, s)
	if err := b.err(); err != nil {
		ck.Close()
		return nil, err
	}
	if opts.NoMmap {
		if err := m.moveWeights(); err != nil {
			m.Close()
			return nil, err
		}
	}
	return m, nil
}

// dimsOf checks that the forward implements cfg and returns its sizes.
func dimsOf(cfg *checkpoint.Config) (dims, error) {
	t := &cfg.Text
	d := dims{
		vocab: t.VocabSize, hidden: t.HiddenSize, inter: t.IntermediateSize, layers: t.NumHiddenLayers,
		heads: t.NumAttentionHeads, kvHeads: t.NumKeyValueHeads, headDim: t.HeadDim,
		rotaryDim: t.RotaryDim(), maxPos: t.MaxPositionEmbeddings,
		eps: float32(t.RMSNormEps), theta: t.RoPE.Theta,
	}
	switch cfg.Arch {
	case checkpoint.Qwen3:
		d.qkNorm = true
	case checkpoint.Llama:
	default:
		return d, fmt.Errorf("%w: architecture %s (the runtime runs qwen3 and llama)", ErrUnsupported, cfg.Arch)
	}
	switch {
	case t.NumExperts != 0:
		return d, fmt.Errorf("%w: %d experts in a dense %s config", ErrUnsupported, t.NumExperts, cfg.Arch)
	case t.HiddenAct != "silu":
		return d, fmt.Errorf("%w: hidden_act %q (the MLP is SwiGLU with silu)", ErrUnsupported, t.HiddenAct)
	case t.AttentionBias:
		return d, fmt.Errorf("%w: attention_bias true", ErrUnsupported)
	case t.RoPE.Type != "default":
		return d, fmt.Errorf("%w: rope_type %q (only default RoPE, without scaling)", ErrUnsupported, t.RoPE.Type)
	case d.rotaryDim <= 0 || d.rotaryDim%2 != 0 || d.rotaryDim > d.headDim:
		return d, fmt.Errorf("%w: rotary dimension %d of head_dim %d", ErrUnsupported, d.rotaryDim, d.headDim)
	}
	for i := range d.layers {
		if lt := t.LayerType(i); lt != checkpoint.FullAttention {
			return d, fmt.Errorf("%w: layer %d is %s (only full attention)", ErrUnsupported, i, lt)
		}
	}
	return d, nil
}

// bind binds every tensor of the model, recording errors in b.
func (m *Model) bind(b *binder, s scheme) {
	d := m.d
	if t, ok := b.get("model.embed_tokens.weight", want{[]format.DType{format.BF16}, [][]int64{shape(d.vocab, d.hidden)}}); ok {
		m.embed = t.Data
	}
	kvFP8 := m.quant != nil && m.quant.KVCacheDType == checkpoint.KVCacheFP8
	m.layers = make([]layer, d.layers)
	for i := range m.layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		ly := &m.layers[i]
		ly.inputNorm = b.vector(p+"input_layernorm.weight", d.hidden)
		ly.postNorm = b.vector(p+"post_attention_layernorm.weight", d.hidden)
		if d.qkNorm {
			ly.qNorm = b.vector(p+"self_attn.q_norm.weight", d.headDim)
			ly.kNorm = b.vector(p+"self_attn.k_norm.weight", d.headDim)
		}
		qd, kvd := d.heads*d.headDim, d.kvHeads*d.headDim
		q := b.linear(s, p+"self_attn.q_proj", qd, d.hidden)
		k := b.linear(s, p+"self_attn.k_proj", kvd, d.hidden)
		v := b.linear(s, p+"self_attn.v_proj", kvd, d.hidden)
		o := b.linear(s, p+"self_attn.o_proj", d.hidden, qd)
		gate := b.linear(s, p+"mlp.gate_proj", d.inter, d.hidden)
		up := b.linear(s, p+"mlp.up_proj", d.inter, d.hidden)
		down := b.linear(s, p+"mlp.down_proj", d.hidden, d.inter)
		if q.w.Data != nil && k.w.Data != nil && v.w.Data != nil {
			b.reduceFused(s, p+"self_attn.qkv_proj", &q, &k, &v)
		}
		if gate.w.Data != nil && up.w.Data != nil {
			b.reduceFused(s, p+"mlp.gate_up_proj", &gate, &up)
		}
		for _, l := range []struct {
			name string
			l    linear
			dst  *kernels.Weight
		}{{"self_attn.q_proj", q, &ly.q}, {"self_attn.k_proj", k, &ly.k}, {"self_attn.v_proj", v, &ly.v},
			{"self_attn.o_proj", o, &ly.o}, {"mlp.gate_proj", gate, &ly.gate}, {"mlp.up_proj", up, &ly.up},
			{"mlp.down_proj", down, &ly.down}} {
			b.check(p+l.name, l.l)
			*l.dst = l.l.w
		}
		if kvFP8 {
			kName, vName := p+"self_attn.k_scale", p+"self_attn.v_scale"
			if s.modelOpt {
				kName, vName = p+"self_attn.k_proj.k_scale", p+"self_attn.v_proj.v_scale"
			}
			ly.kScale, ly.vScale = b.scalar(kName), b.scalar(vName)
		}
	}
	if kvFP8 {
		m.notes = append(m.notes, "the checkpoint asks for an FP8 KV cache: the engine applies its k/v scales with --kv-cache-dtype fp8; a standalone Sequence (generate) keeps K and V in float32")
	}
	m.norm = b.vector("model.norm.weight", d.hidden)
	var skip func(string) bool
	if m.cfg.Text.TieWordEmbeddings {
		m.lmHead = kernels.Weight{Format: kernels.WeightBF16, Out: d.vocab, In: d.hidden, Data: m.embed, Act: kernels.ActNone}
		skip = func(name string) bool { return name == "lm_head.weight" }
	} else {
		l := b.linear(s, "lm_head", d.vocab, d.hidden)
		b.check("lm_head", l)
		m.lmHead = l.w
	}
	b.leftovers(skip)
}

// Close unmaps the checkpoint (or frees the copy of LoadOptions.NoMmap).
// The Model and its Sequences must not be used afterwards.
func (m *Model) Close() error {
	err := m.ck.Close()
	if aerr := m.arena.free(); err == nil {
		err = aerr
	}
	return err
}

// Config returns the parsed config.json.
func (m *Model) Config() *checkpoint.Config { return m.cfg }

// Quantization returns the checkpoint's quantization, nil for BF16.
func (m *Model) Quantization() *checkpoint.Quantization { return m.quant }

// Ops returns the kernels the model computes with.
func (m *Model) Ops() kernels.Ops { return m.ops }

// Dir returns the checkpoint directory.
func (m *Model) Dir() string { return m.ck.Dir() }

// VocabSize returns the number of logits per token.
func (m *Model) VocabSize() int { return m.d.vocab }

// MaxPositions returns max_position_embeddings, the default limit of a
// Sequence.
func (m *Model) MaxPositions() int { return m.d.maxPos }

// Notes lists what Load decided that a user should know (settings of the
// checkpoint the runtime reads but does not apply).
func (m *Model) Notes() []string { return m.notes }

// WeightBytes returns the bytes a forward pass reads from weights, whatever
// its number of tokens: every linear layer's data and float32 scales, and
// the norm gains. Embedding rows (T of them) are not counted.
func (m *Model) WeightBytes() int64 {
	size := func(w *kernels.Weight) int64 { return int64(len(w.Data)) + 4*int64(len(w.Scales)) }
	n := size(&m.lmHead) + 4*int64(len(m.norm))
	for i := range m.layers {
		ly := &m.layers[i]
		for _, w := range []*kernels.Weight{&ly.q, &ly.k, &ly.v, &ly.o, &ly.gate, &ly.up, &ly.down} {
			n += size(w)
		}
		n += 4 * int64(len(ly.inputNorm)+len(ly.postNorm)+len(ly.qNorm)+len(ly.kNorm))
	}
	return n
}

// BF16LinearBytes returns the bytes of the decoder layers' BF16 linear
// weights with float32 activations: what CUDAExecutor's PrefillBF16 option
// keeps a second, row-major copy of.
func (m *Model) BF16LinearBytes() int64 {
	var n int64
	for i := range m.layers {
		ly := &m.layers[i]
		for _, w := range []*kernels.Weight{&ly.q, &ly.k, &ly.v, &ly.o, &ly.gate, &ly.up, &ly.down} {
			if bf16Linear(w) {
				n += int64(len(w.Data))
			}
		}
	}
	return n
}

// bf16Linear says whether w is a BF16 weight with float32 activations.
func bf16Linear(w *kernels.Weight) bool {
	return w.Format == kernels.WeightBF16 && w.Act == kernels.ActNone
}

// KVBytesPerToken returns the bytes of KV cache each position of a
// Sequence takes: K and V in float32 for every layer (a KVPool takes
// KVBlockBytes per block).
func (m *Model) KVBytesPerToken() int64 {
	return int64(m.d.layers) * 2 * int64(m.d.kvHeads*m.d.headDim) * 4
}

// Shape is a model's sizes, for callers that size buffers.
type Shape struct {
	Vocab, Hidden, Intermediate, Layers int
	Heads, KVHeads, HeadDim             int
}

// Shape returns the model's sizes.
func (m *Model) Shape() Shape {
	d := m.d
	return Shape{Vocab: d.vocab, Hidden: d.hidden, Intermediate: d.inter, Layers: d.layers,
		Heads: d.heads, KVHeads: d.kvHeads, HeadDim: d.headDim}
}
