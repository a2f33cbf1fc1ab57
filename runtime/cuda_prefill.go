//go:build cgo

package runtime

import "github.com/lowbit-ai/lowbit/kernels/cuda"

// CUDAOption configures a CUDAExecutor.
type CUDAOption func(*CUDAExecutor)

// WithPrefillBF16 runs prompt rows (BatchEntry.Prompt) on BF16 activations,
// as vLLM and transformers compute a BF16 model: their linear layers take
// BF16 x through cuBLASLt, their attention BF16 q and softmax weights
// (attention_mma.cu's _q1 kernels), instead of the float32-activation
// contract of kernels.Ops, which generated tokens keep. It is for speed:
// prefill on cuBLASLt's tensor-core GEMMs and a third of the attention's
// mma, instead of three BF16 products a value. A row's kind depends on its
// position in its request only, and cuBLASLt runs one algorithm a weight
// shape at every row count, so results stay batch invariant. It keeps a
// second, row-major copy of the BF16 layer weights
// (Model.BF16LinearBytes more device memory); other weight formats, and
// attention where the tensor-core kernels do not serve the head shape,
// keep float32 activations.
func WithPrefillBF16() CUDAOption { return func(e *CUDAExecutor) { e.prefillBF16 = true } }

// matmul runs x [T, in] through the weights ws into ys (MatMulShared):
// the step's first e.prompt rows through cuBLASLt on BF16 x when the
// weights have row-major copies, the others on the float32-activation
// kernels.
func (e *CUDAExecutor) matmul(k *cuda.K, x cuda.Buf, T int, ys []cuda.Buf, ws ...*cuda.Weight) error {
	p := e.prompt
	for _, w := range ws {
		if w.Rows.Bytes() == 0 {
			p = 0
		}
	}
	if p == 0 {
		return k.MatMulShared(x, T, ys, ws)
	}
	in := ws[0].In
	head, rest := make([]cuda.Buf, len(ys)), make([]cuda.Buf, len(ys))
	for i, w := range ws {
		head[i], rest[i] = ys[i].F32(0, p*w.Out), ys[i].F32(p*w.Out, T*w.Out)
	}
	if err := k.MatMulLtShared(x.F32(0, p*in), p, head, ws); err != nil {
		return err
	}
	if T == p {
		return nil
	}
	return k.MatMulShared(x.F32(p*in, T*in), T-p, rest, ws)
}
