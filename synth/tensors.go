package synth

import "fmt"

// dims are the shape facts a tensor list needs, read from a typed config.
type dims struct {
	arch        string // qwen3, qwen3_moe, qwen3_5, qwen3_5_moe, llama
	prefix      string // "model." or, for the multimodal Qwen3.5 layout, "model.language_model."
	vocab       int64
	hidden      int64
	inter       int64 // dense MLP width
	layers      int
	heads       int64
	kvHeads     int64
	headDim     int64
	tied        bool
	qkNorm      bool // Qwen3 family: per-head q_norm and k_norm
	gatedQ      bool // Qwen3.5 full attention: q_proj also emits the output gate
	zeroCenterd bool // Qwen3.5 RMSNorm: y = norm(x) * (1 + w), weights near 0

	experts      int64 // 0 for dense
	moeInter     int64
	sharedInter  int64 // Qwen3.5-MoE shared expert width; 0 when absent
	fusedExperts bool  // qwen3_5_moe checkpoints store experts.gate_up_proj [E, 2I, H]
	moeLayer     func(i int) bool

	linearLayer              func(i int) bool // Qwen3.5 Gated DeltaNet layers
	linKeyHeads, linValHeads int64
	linKeyDim, linValDim     int64
	convKernel               int64
}

// initKind says how a tensor's values are drawn.
type initKind int

const (
	initLinear    initKind = iota // N(0, 1/fan_in) x row gain x outlier columns
	initEmbedding                 // N(0, 0.02^2), like trained token embeddings
	initNorm                      // 1 + N(0, 0.05^2): an RMSNorm gain near identity
	initNormZero                  // N(0, 0.05^2): a zero-centered RMSNorm gain, y = x(1+w)
	initALog                      // log U(1, 16): Gated DeltaNet decay rates
	initDtBias                    // 1 + N(0, 0.1^2)
	initConv                      // N(0, 1/kernel): depthwise causal conv taps
)

// tensorPlan is one tensor to generate. For linear weights the last dimension
// is the input (fan-in) dimension, as in PyTorch's [out, in] layout.
type tensorPlan struct {
	name  string
	shape []int64
	init  initKind
}

func (t tensorPlan) numElements() int64 {
	n := int64(1)
	for _, d := range t.shape {
		n *= d
	}
	return n
}

// plan lists every tensor of the model in checkpoint order: embeddings, then
// layer by layer, then the final norm and the output head.
func plan(d dims) []tensorPlan {
	var ts []tensorPlan
	add := func(name string, init initKind, shape ...int64) {
		ts = append(ts, tensorPlan{name: name, shape: shape, init: init})
	}
	norm := initNorm
	if d.zeroCenterd {
		norm = initNormZero
	}
	add(d.prefix+"embed_tokens.weight", initEmbedding, d.vocab, d.hidden)
	for i := range d.layers {
		p := fmt.Sprintf("%slayers.%d.", d.prefix, i)
		add(p+"input_layernorm.weight", norm, d.hidden)
		if d.linearLayer != nil && d.linearLayer(i) {
			keyDim := d.linKeyHeads * d.linKeyDim
			valDim := d.linValHeads * d.linValDim
			convDim := 2*keyDim + valDim
			la := p + "linear_attn."
			add(la+"A_log", initALog, d.linValHeads)
			add(la+"conv1d.weight", initConv, convDim, 1, d.convKernel)
			add(la+"dt_bias", initDtBias, d.linValHeads)
			add(la+"in_proj_a.weight", initLinear, d.linValHeads, d.hidden)
			add(la+"in_proj_b.weight", initLinear, d.linValHeads, d.hidden)
			add(la+"in_proj_qkv.weight", initLinear, convDim, d.hidden)
			add(la+"in_proj_z.weight", initLinear, valDim, d.hidden)
			add(la+"norm.weight", initNorm, d.linValDim) // gated RMSNorm: ordinary gain
			add(la+"out_proj.weight", initLinear, d.hidden, valDim)
		} else {
			sa := p + "self_attn."
			qOut := d.heads * d.headDim
			if d.gatedQ {
				qOut *= 2
			}
			add(sa+"q_proj.weight", initLinear, qOut, d.hidden)
			add(sa+"k_proj.weight", initLinear, d.kvHeads*d.headDim, d.hidden)
			add(sa+"v_proj.weight", initLinear, d.kvHeads*d.headDim, d.hidden)
			add(sa+"o_proj.weight", initLinear, d.hidden, d.heads*d.headDim)
			if d.qkNorm {
				add(sa+"q_norm.weight", norm, d.headDim)
				add(sa+"k_norm.weight", norm, d.headDim)
			}
		}
		add(p+"post_attention_layernorm.weight", norm, d.hidden)
		mlp := p + "mlp."
		if d.experts > 0 && (d.moeLayer == nil || d.moeLayer(i)) {
			add(mlp+"gate.weight", initLinear, d.experts, d.hidden)
			if d.fusedExperts {
				add(mlp+"experts.gate_up_proj", initLinear, d.experts, 2*d.moeInter, d.hidden)
				add(mlp+"experts.down_proj", initLinear, d.experts, d.hidden, d.moeInter)
			} else {
				for e := range d.experts {
					ep := fmt.Sprintf("%sexperts.%d.", mlp, e)
					add(ep+"gate_proj.weight", initLinear, d.moeInter, d.hidden)
					add(ep+"up_proj.weight", initLinear, d.moeInter, d.hidden)
					add(ep+"down_proj.weight", initLinear, d.hidden, d.moeInter)
				}
			}
			if d.sharedInter > 0 {
				add(mlp+"shared_expert.gate_proj.weight", initLinear, d.sharedInter, d.hidden)
				add(mlp+"shared_expert.up_proj.weight", initLinear, d.sharedInter, d.hidden)
				add(mlp+"shared_expert.down_proj.weight", initLinear, d.hidden, d.sharedInter)
				add(mlp+"shared_expert_gate.weight", initLinear, 1, d.hidden)
			}
		} else {
			add(mlp+"gate_proj.weight", initLinear, d.inter, d.hidden)
			add(mlp+"up_proj.weight", initLinear, d.inter, d.hidden)
			add(mlp+"down_proj.weight", initLinear, d.hidden, d.inter)
		}
	}
	add(d.prefix+"norm.weight", norm, d.hidden)
	if !d.tied {
		add("lm_head.weight", initLinear, d.vocab, d.hidden)
	}
	return ts
}
