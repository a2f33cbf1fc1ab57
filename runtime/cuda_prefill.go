//go:build cgo

package runtime

import "github.com/lowbit-ai/lowbit/kernels/cuda"

// CUDAOption configures a CUDAExecutor.
type CUDAOption func(*CUDAExecutor)

// WithPrefillBF16 runs the linear layers of prompt rows (BatchEntry.Prompt)
// with BF16 activations through cuBLASLt, as vLLM and transformers compute
// a BF16 model, instead of the float32-activation contract of
// kernels.Ops; generated tokens keep that contract. It is for speed:
// prefill on cuBLASLt's tensor-core GEMMs instead of three BF16 products a
// weight. A row's kind depends on its position in its request only, and
// cuBLASLt runs one algorithm a weight shape at every row count, so
// results stay batch invariant. It keeps a second, row-major copy of the
// BF16 layer weights (Model.BF16LinearBytes more device memory); other
// weight formats are unaffected.
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
