package checkpoint

import (
	"math"
	"slices"
)

// maxDim bounds every size field, so that products of a few of them (a
// weight's element count, a KV cache size) cannot overflow int64.
const maxDim = 1 << 30

// validate checks t for the architecture a. It runs after parsing, on the
// flattened settings with defaults applied.
func (t *Text) validate(a Arch) error {
	positive := []struct {
		v    int
		name string
	}{
		{t.VocabSize, "vocab_size"},
		{t.HiddenSize, "hidden_size"},
		{t.NumHiddenLayers, "num_hidden_layers"},
		{t.NumAttentionHeads, "num_attention_heads"},
		{t.NumKeyValueHeads, "num_key_value_heads"},
		{t.HeadDim, "head_dim"},
		{t.MaxPositionEmbeddings, "max_position_embeddings"},
	}
	if needsDenseMLP(t, a) {
		positive = append(positive, struct {
			v    int
			name string
		}{t.IntermediateSize, "intermediate_size"})
	}
	if a.MoE() {
		positive = append(positive, []struct {
			v    int
			name string
		}{
			{t.NumExperts, "num_experts"},
			{t.NumExpertsPerTok, "num_experts_per_tok"},
			{t.MoEIntermediateSize, "moe_intermediate_size"},
			{t.DecoderSparseStep, "decoder_sparse_step"},
		}...)
	}
	if a == Qwen35MoE {
		positive = append(positive, struct {
			v    int
			name string
		}{t.SharedExpertIntermediateSize, "shared_expert_intermediate_size"})
	}
	if a.Hybrid() {
		positive = append(positive, []struct {
			v    int
			name string
		}{
			{t.LinearConvKernelDim, "linear_conv_kernel_dim"},
			{t.LinearKeyHeadDim, "linear_key_head_dim"},
			{t.LinearValueHeadDim, "linear_value_head_dim"},
			{t.LinearNumKeyHeads, "linear_num_key_heads"},
			{t.LinearNumValueHeads, "linear_num_value_heads"},
		}...)
	}
	for _, p := range positive {
		if p.v <= 0 || p.v > maxDim {
			return cfgErrorf("%s = %d, want a positive size (at most %d)", p.name, p.v, maxDim)
		}
	}
	if t.IntermediateSize < 0 || t.IntermediateSize > maxDim || t.SharedExpertIntermediateSize < 0 || t.SharedExpertIntermediateSize > maxDim || t.MTPNumHiddenLayers < 0 {
		return cfgErrorf("intermediate_size = %d, shared_expert_intermediate_size = %d, mtp_num_hidden_layers = %d: want non-negative sizes",
			t.IntermediateSize, t.SharedExpertIntermediateSize, t.MTPNumHiddenLayers)
	}
	if t.NumAttentionHeads%t.NumKeyValueHeads != 0 {
		return cfgErrorf("num_attention_heads = %d is not a multiple of num_key_value_heads = %d", t.NumAttentionHeads, t.NumKeyValueHeads)
	}
	// LlamaConfig.validate_architecture requires hidden_size to divide into
	// the heads; the Qwen classes do not (Qwen3-0.6B has 16 heads of 128 on a
	// hidden size of 1024).
	if a == Llama && t.HiddenSize%t.NumAttentionHeads != 0 {
		return cfgErrorf("hidden_size = %d is not a multiple of num_attention_heads = %d", t.HiddenSize, t.NumAttentionHeads)
	}
	if !(t.RMSNormEps > 0) || t.RMSNormEps >= 1 {
		return cfgErrorf("rms_norm_eps = %g, want a small positive number", t.RMSNormEps)
	}
	if t.HiddenAct != "silu" {
		return cfgErrorf("hidden_act = %q is not supported (want silu)", t.HiddenAct)
	}
	if len(t.LayerTypes) != t.NumHiddenLayers {
		return cfgErrorf("%d layer types for num_hidden_layers = %d", len(t.LayerTypes), t.NumHiddenLayers)
	}
	for i, l := range t.LayerTypes {
		ok := l == FullAttention || l == LinearAttention && a.Hybrid() || l == SlidingAttention && a == Qwen3
		if !ok {
			return cfgErrorf("layer_types[%d] = %s is not supported by %s", i, l, a)
		}
	}
	if err := t.validateMoE(a); err != nil {
		return err
	}
	if a.Hybrid() {
		if !t.AttnOutputGate {
			return cfgErrorf("attn_output_gate = false is not supported: %s attention always has the output gate", a)
		}
		if t.LinearNumValueHeads%t.LinearNumKeyHeads != 0 {
			return cfgErrorf("linear_num_value_heads = %d is not a multiple of linear_num_key_heads = %d", t.LinearNumValueHeads, t.LinearNumKeyHeads)
		}
	}
	for _, id := range slices.Concat(t.BOSTokenIDs, t.EOSTokenIDs) {
		if id < 0 || id >= t.VocabSize {
			return cfgErrorf("token id %d is outside the vocabulary [0, %d)", id, t.VocabSize)
		}
	}
	return t.validateRoPE()
}

// needsDenseMLP reports whether some layer of the model has a dense MLP,
// whose width is intermediate_size.
func needsDenseMLP(t *Text, a Arch) bool {
	switch a {
	case Qwen35MoE:
		return false
	case Qwen3MoE:
		for i := range t.NumHiddenLayers {
			if !t.IsMoELayer(i) {
				return true
			}
		}
		return false
	}
	return true
}

func (t *Text) validateMoE(a Arch) error {
	if !a.MoE() {
		return nil
	}
	if t.NumExpertsPerTok > t.NumExperts {
		return cfgErrorf("num_experts_per_tok = %d exceeds num_experts = %d", t.NumExpertsPerTok, t.NumExperts)
	}
	seen := make(map[int]bool, len(t.MLPOnlyLayers))
	for _, l := range t.MLPOnlyLayers {
		if l < 0 || l >= t.NumHiddenLayers || seen[l] {
			return cfgErrorf("mlp_only_layers entry %d is out of range or repeated (num_hidden_layers = %d)", l, t.NumHiddenLayers)
		}
		seen[l] = true
	}
	return nil
}

func (t *Text) validateRoPE() error {
	r := &t.RoPE
	if !(r.Theta > 0) {
		return cfgErrorf("rope_theta = %g, want > 0", r.Theta)
	}
	if !(r.PartialRotaryFactor > 0) || r.PartialRotaryFactor > 1 {
		return cfgErrorf("partial_rotary_factor = %g, want in (0, 1]", r.PartialRotaryFactor)
	}
	rot := float64(t.HeadDim) * r.PartialRotaryFactor
	if rot != math.Trunc(rot) || int(rot)%2 != 0 {
		return cfgErrorf("head_dim %d × partial_rotary_factor %g = %g rotary dimensions, want an even integer", t.HeadDim, r.PartialRotaryFactor, rot)
	}
	for _, f := range []struct {
		v    float64
		name string
	}{{r.Factor, "factor"}, {r.AttentionFactor, "attention_factor"}, {r.LowFreqFactor, "low_freq_factor"}, {r.HighFreqFactor, "high_freq_factor"}} {
		if f.v < 0 {
			return cfgErrorf("rope %s = %g, want >= 0", f.name, f.v)
		}
	}
	if r.Type != "default" && ropeTypes[r.Type] != nil && slices.Contains(ropeTypes[r.Type], "factor") && !(r.Factor > 0) {
		return cfgErrorf("rope_type %q with factor %g, want > 0", r.Type, r.Factor)
	}
	if r.OriginalMaxPositionEmbeddings < 0 {
		return cfgErrorf("original_max_position_embeddings = %d, want >= 0", r.OriginalMaxPositionEmbeddings)
	}
	if r.MRoPESection != nil {
		sum := 0
		for _, s := range r.MRoPESection {
			if s < 0 || s > maxDim {
				return cfgErrorf("mrope_section %v has an out-of-range entry", r.MRoPESection)
			}
			sum += s
		}
		if 2*sum != int(rot) {
			return cfgErrorf("mrope_section %v covers %d rotary dimensions, want %d (head_dim × partial_rotary_factor)", r.MRoPESection, 2*sum, int(rot))
		}
	}
	return nil
}
