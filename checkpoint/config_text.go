package checkpoint

import (
	"fmt"
	"slices"
)

// LayerType is the token mixer of one decoder layer. The zero value is invalid.
type LayerType uint8

const (
	// FullAttention is softmax attention over the whole context.
	FullAttention LayerType = iota + 1
	// LinearAttention is a Gated DeltaNet layer (Qwen3.5), with a fixed-size
	// recurrent state instead of a KV cache.
	LinearAttention
	// SlidingAttention is softmax attention over a sliding window (Qwen3 with
	// use_sliding_window).
	SlidingAttention
)

var layerTypeNames = map[LayerType]string{
	FullAttention:    "full_attention",
	LinearAttention:  "linear_attention",
	SlidingAttention: "sliding_attention",
}

// String returns the layer type as config.json spells it.
func (l LayerType) String() string {
	if s, ok := layerTypeNames[l]; ok {
		return s
	}
	return fmt.Sprintf("LayerType(%d)", uint8(l))
}

// ParseLayerType parses a layer_types entry. The legacy names "attention" and
// "mamba" map to full_attention and linear_attention, as transformers'
// remap_legacy_layer_types does.
func ParseLayerType(s string) (LayerType, error) {
	switch s {
	case "attention":
		return FullAttention, nil
	case "mamba":
		return LinearAttention, nil
	}
	for l, name := range layerTypeNames {
		if s == name {
			return l, nil
		}
	}
	return 0, cfgErrorf("unknown layer type %q (want full_attention, linear_attention or sliding_attention)", s)
}

// Text is the text model's settings, every absent field set to its
// transformers default for the architecture.
type Text struct {
	ModelType             string // model_type of the object the settings came from
	VocabSize             int
	HiddenSize            int
	IntermediateSize      int // dense MLP width; 0 for qwen3_5_moe, which has no dense MLP
	NumHiddenLayers       int
	NumAttentionHeads     int
	NumKeyValueHeads      int
	HeadDim               int
	RMSNormEps            float64
	MaxPositionEmbeddings int
	TieWordEmbeddings     bool
	HiddenAct             string
	AttentionBias         bool
	RoPE                  RoPE

	// LayerTypes has one entry per layer. For qwen3_5* it comes from
	// layer_types or, when absent, from FullAttentionInterval; for the other
	// architectures every layer is FullAttention (or SlidingAttention for a
	// Qwen3 with use_sliding_window).
	LayerTypes []LayerType

	// MoE settings; NumExperts is 0 for a dense model.
	NumExperts                   int
	NumExpertsPerTok             int
	MoEIntermediateSize          int
	SharedExpertIntermediateSize int  // 0 when there is no shared expert (qwen3_moe)
	NormTopKProb                 bool // renormalize the top-k router weights
	DecoderSparseStep            int  // every step-th layer is MoE (qwen3_moe)
	MLPOnlyLayers                []int

	// Qwen3.5 hybrid settings.
	FullAttentionInterval int
	LinearConvKernelDim   int
	LinearKeyHeadDim      int
	LinearValueHeadDim    int
	LinearNumKeyHeads     int
	LinearNumValueHeads   int
	AttnOutputGate        bool // full attention output is gated by sigmoid(gate)
	MTPNumHiddenLayers    int  // multi-token-prediction layers stored under mtp.*

	// Qwen3 sliding-window settings.
	UseSlidingWindow bool
	SlidingWindow    int
	MaxWindowLayers  int

	BOSTokenIDs []int // nil when the config has none
	EOSTokenIDs []int
	PadTokenID  *int
	DType       string // "dtype" (transformers 5) or "torch_dtype", e.g. "bfloat16"
}

// KVHeads returns the number of key/value heads of a full-attention layer.
func (t *Text) KVHeads() int { return t.NumKeyValueHeads }

// LayerType returns the token mixer of layer i.
func (t *Text) LayerType(i int) LayerType {
	if i < 0 || i >= len(t.LayerTypes) {
		panic(fmt.Sprintf("checkpoint: layer %d out of range [0,%d)", i, len(t.LayerTypes)))
	}
	return t.LayerTypes[i]
}

// IsMoELayer reports whether layer i has a routed-experts MLP: a Qwen3-MoE
// layer is sparse iff it is not in mlp_only_layers and (i+1) is a multiple
// of decoder_sparse_step (Qwen3MoeDecoderLayer); every Qwen3.5-MoE layer is
// sparse.
func (t *Text) IsMoELayer(i int) bool {
	if t.NumExperts == 0 || i < 0 || i >= t.NumHiddenLayers || slices.Contains(t.MLPOnlyLayers, i) {
		return false
	}
	step := max(t.DecoderSparseStep, 1)
	return (i+1)%step == 0
}

// RotaryDim returns the number of rotated dimensions of each head,
// head_dim × partial_rotary_factor (64 of 256 for Qwen3.5).
func (t *Text) RotaryDim() int { return int(float64(t.HeadDim) * t.RoPE.PartialRotaryFactor) }

// textDefaults are the transformers class defaults of one architecture.
type textDefaults struct {
	vocab, hidden, intermediate, layers, heads int
	kvHeads                                    int // 0: same as heads
	headDim                                    int // 0: hidden / heads
	maxPos                                     int
	bos, eos                                   []int
	partialRotary                              float64
}

func defaultsFor(a Arch) textDefaults {
	switch a {
	case Qwen3: // Qwen3Config
		return textDefaults{vocab: 151936, hidden: 4096, intermediate: 22016, layers: 32, heads: 32,
			kvHeads: 32, headDim: 128, maxPos: 32768, partialRotary: 1}
	case Qwen3MoE: // Qwen3MoeConfig; it has no head_dim field, the model uses hidden/heads
		return textDefaults{vocab: 151936, hidden: 2048, intermediate: 6144, layers: 24, heads: 32,
			kvHeads: 4, maxPos: 32768, partialRotary: 1}
	case Qwen35: // Qwen3_5TextConfig; partial_rotary_factor is set with kwargs.setdefault(..., 0.25)
		return textDefaults{vocab: 248320, hidden: 4096, intermediate: 12288, layers: 32, heads: 16,
			kvHeads: 4, headDim: 256, maxPos: 32768, partialRotary: 0.25}
	case Qwen35MoE: // Qwen3_5MoeTextConfig; no intermediate_size field
		return textDefaults{vocab: 248320, hidden: 2048, layers: 40, heads: 16,
			kvHeads: 2, headDim: 256, maxPos: 32768, partialRotary: 0.25}
	default: // LlamaConfig: bos 1, eos 2, kv heads and head_dim derived
		return textDefaults{vocab: 32000, hidden: 4096, intermediate: 11008, layers: 32, heads: 32,
			maxPos: 2048, bos: []int{1}, eos: []int{2}, partialRotary: 1}
	}
}
