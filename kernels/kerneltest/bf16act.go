package kerneltest

import (
	"github.com/lowbit-ai/lowbit/format"
	"github.com/lowbit-ai/lowbit/kernels"
)

// BF16Activations wraps ops so that MatMul rounds x to BF16 (to nearest
// even) before multiplying the weights round selects: the reference for
// an executor that runs linear layers on BF16 activations (the CUDA
// executor's prefill option), built from the float32 kernels themselves.
func BF16Activations(ops kernels.Ops, round func(w *kernels.Weight) bool) kernels.Ops {
	return bf16Act{ops, round}
}

type bf16Act struct {
	kernels.Ops
	round func(w *kernels.Weight) bool
}

func (o bf16Act) MatMul(y, x []float32, T int, w *kernels.Weight) {
	if !o.round(w) {
		o.Ops.MatMul(y, x, T, w)
		return
	}
	xb := make([]float32, T*w.In)
	for i, v := range x[:T*w.In] {
		xb[i] = format.BF16ToFloat32(format.BF16FromFloat32(v))
	}
	o.Ops.MatMul(y, xb, T, w)
}
