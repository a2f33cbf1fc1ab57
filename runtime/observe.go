package runtime

// ObservePoint names an activation inside a decoder layer that
// ForwardOptions.Observe is shown: the input of each linear layer, as the
// layer multiplies it, and the keys and values as they enter the KV cache.
// Calibration records their ranges (static input scales, FP8 KV-cache
// scales) and second moments (GPTQ Hessians).
type ObservePoint uint8

const (
	// ObserveAttnInput is RMSNorm(x)·input_layernorm, [T, hidden]: the
	// input of q_proj, k_proj and v_proj.
	ObserveAttnInput ObservePoint = iota + 1
	// ObserveOProjInput is the attention output, [T, heads·head_dim]: the
	// input of o_proj.
	ObserveOProjInput
	// ObserveMLPInput is RMSNorm(x)·post_attention_layernorm, [T, hidden]:
	// the input of gate_proj and up_proj.
	ObserveMLPInput
	// ObserveDownInput is silu(h·Wgateᵀ) ⊙ h·Wupᵀ, [T, intermediate]: the
	// input of down_proj.
	ObserveDownInput
	// ObserveKey is the keys after k_norm (Qwen3) and RoPE,
	// [T, kv_heads·head_dim]: the values written to the KV cache, which
	// vLLM's k_scale and compressed-tensors' k observer calibrate.
	ObserveKey
	// ObserveValue is the values, [T, kv_heads·head_dim], as written to the
	// KV cache.
	ObserveValue
)

var observeNames = [...]string{
	ObserveAttnInput:  "attn_input",
	ObserveOProjInput: "o_proj_input",
	ObserveMLPInput:   "mlp_input",
	ObserveDownInput:  "down_proj_input",
	ObserveKey:        "key",
	ObserveValue:      "value",
}

// String names the point ("attn_input", "key", ...).
func (p ObservePoint) String() string {
	if int(p) < len(observeNames) && observeNames[p] != "" {
		return observeNames[p]
	}
	return "unknown"
}

// ObservePoints lists every point in the order a layer reaches them.
func ObservePoints() []ObservePoint {
	return []ObservePoint{ObserveAttnInput, ObserveKey, ObserveValue, ObserveOProjInput, ObserveMLPInput, ObserveDownInput}
}

// observe calls f, if set, for one point of layer i; x holds T rows.
func observe(f func(layer int, p ObservePoint, x []float32, T int), i int, p ObservePoint, x []float32, T int) {
	if f != nil {
		f(i, p, x, T)
	}
}
