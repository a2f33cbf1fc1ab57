package synth

import (
	"fmt"

	"github.com/lowbit-ai/lowbit/checkpoint"
)

// dimsOf reads the tensor-shape facts of a parsed config.
func dimsOf(cfg *checkpoint.Config) (dims, error) {
	t := &cfg.Text
	d := dims{
		arch:    cfg.Arch.String(),
		prefix:  "model.",
		vocab:   int64(t.VocabSize),
		hidden:  int64(t.HiddenSize),
		inter:   int64(t.IntermediateSize),
		layers:  t.NumHiddenLayers,
		heads:   int64(t.NumAttentionHeads),
		kvHeads: int64(t.NumKeyValueHeads),
		headDim: int64(t.HeadDim),
		tied:    t.TieWordEmbeddings,
	}
	switch cfg.Arch {
	case checkpoint.Llama:
	case checkpoint.Qwen3, checkpoint.Qwen3MoE:
		d.qkNorm = true
	case checkpoint.Qwen35, checkpoint.Qwen35MoE:
		// The published Qwen3.5 checkpoints are multimodal: the text model
		// lives under model.language_model.
		d.prefix = "model.language_model."
		d.qkNorm = true
		d.gatedQ = t.AttnOutputGate
		d.zeroCenterd = true
		d.fusedExperts = true
		d.linearLayer = func(i int) bool { return t.LayerType(i) == checkpoint.LinearAttention }
		d.linKeyHeads = int64(t.LinearNumKeyHeads)
		d.linValHeads = int64(t.LinearNumValueHeads)
		d.linKeyDim = int64(t.LinearKeyHeadDim)
		d.linValDim = int64(t.LinearValueHeadDim)
		d.convKernel = int64(t.LinearConvKernelDim)
	default:
		return dims{}, fmt.Errorf("synth: no tensor layout for architecture %s", cfg.Arch)
	}
	if t.NumExperts > 0 {
		d.experts = int64(t.NumExperts)
		d.moeInter = int64(t.MoEIntermediateSize)
		d.sharedInter = int64(t.SharedExpertIntermediateSize)
		d.moeLayer = t.IsMoELayer
	}
	return d, nil
}
