package quantize

import (
	"regexp"

	"github.com/lowbit-ai/lowbit/checkpoint"
)

// The quantization policy, as data. A module (a Hugging Face tensor name
// without its ".weight") is quantized when it is a linear layer of a
// transformer block, nothing below forbids it, and neither the architecture's
// defaults nor the user's --ignore patterns keep it. Everything else is
// copied unchanged.

// linearModule matches the linear layers of the decoder blocks of every
// supported architecture: attention projections, dense, shared-expert and
// per-expert MLP projections, and Qwen3.5's Gated DeltaNet projections.
var linearModule = regexp.MustCompile(`\.(` +
	`self_attn\.(q|k|v|o)_proj|` +
	`mlp\.(experts\.[0-9]+\.|shared_expert\.)?(gate|up|down)_proj|` +
	`linear_attn\.(in_proj_qkv|in_proj_z|in_proj_a|in_proj_b|out_proj)` +
	`)$`)

// neverQuantized lists what is never quantized, whatever the options: token
// embeddings and the output head (their error reaches every token
// directly), norms (q_norm and k_norm included), MoE routers (mlp.gate) and
// the shared-expert gate (tiny, and routing is sensitive), Gated DeltaNet's
// conv1d, A_log and dt_bias (state dynamics), the vision tower and the
// multi-token-prediction head (loaders build them unquantized).
var neverQuantized = regexp.MustCompile(`(^|\.)(` +
	`embed_tokens|lm_head|[a-z_]*norm|mlp\.gate|shared_expert_gate|conv1d|A_log|dt_bias` +
	`)(\.|$)|(^|\.)(visual|vision_tower|mtp)\.|^mtp\.`)

// archPolicy is what differs between architectures.
type archPolicy struct {
	// keptWithFP4 matches modules kept in BF16 by default when weights are
	// NVFP4: llm-compressor's Qwen3.5 recipes keep the Gated DeltaNet
	// projections, whose fused in_proj_qkvz/in_proj_ba layers lose too much
	// accuracy in FP4 ("incompatible with NVFP4 / microscale formats").
	keptWithFP4 *regexp.Regexp
	// fusedExperts: the checkpoint stores each MoE layer's experts as
	// experts.gate_up_proj [E, 2F, D] and experts.down_proj [E, D, F];
	// quantized checkpoints hold them per expert.
	fusedExperts bool
}

var linearAttn = regexp.MustCompile(`\.linear_attn\.`)

var policies = map[checkpoint.Arch]archPolicy{
	checkpoint.Qwen3:     {},
	checkpoint.Qwen3MoE:  {},
	checkpoint.Llama:     {},
	checkpoint.Qwen35:    {keptWithFP4: linearAttn},
	checkpoint.Qwen35MoE: {keptWithFP4: linearAttn, fusedExperts: true},
}

// fusedGroups map a module to the fused layer vLLM and SGLang build from it.
// The members of one fused layer share one ignore status (the loaders reject
// a partly quantized fused layer) and, with NVFP4, one global scale (the
// loaders keep one per fused layer).
var fusedGroups = []struct {
	re    *regexp.Regexp
	group string
}{
	{regexp.MustCompile(`^(.*\.self_attn)\.(q|k|v)_proj$`), "${1}.qkv_proj"},
	{regexp.MustCompile(`^(.*\.mlp(\.experts\.[0-9]+|\.shared_expert)?)\.(gate|up)_proj$`), "${1}.gate_up_proj"},
	{regexp.MustCompile(`^(.*\.linear_attn)\.(in_proj_qkv|in_proj_z)$`), "${1}.in_proj_qkvz"},
	{regexp.MustCompile(`^(.*\.linear_attn)\.(in_proj_b|in_proj_a)$`), "${1}.in_proj_ba"},
}

// fusedGroup returns the fused layer of module, or module itself.
func fusedGroup(module string) string {
	for _, g := range fusedGroups {
		if g.re.MatchString(module) {
			return g.re.ReplaceAllString(module, g.group)
		}
	}
	return module
}

// fusedExpertTensor matches the fused expert tensors of qwen3_5_moe
// checkpoints.
var fusedExpertTensor = regexp.MustCompile(`^(.*\.mlp\.experts)\.(gate_up_proj|down_proj)$`)
