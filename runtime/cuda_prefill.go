//go:build cgo

package runtime

import (
	"fmt"
	"os"

	"github.com/lowbit-ai/lowbit/kernels/cuda"
)

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

// WithBF16Activations is WithPrefillBF16 for every row: generated rows
// (decode steps, and the rows beside a prompt chunk) take their linear
// layers' inputs rounded to the nearest BF16 (one mma term instead of
// three: cuda.TermsBF16For, lb_mma_gemv_bulk1) and their attention BF16 q
// and P, as vLLM and transformers decode a BF16 model. The lm_head takes
// BF16 inputs too. The residual stream and every sum stay float32. A row's
// numerics still depend on its kind (prompt rows run cuBLASLt, generated
// rows the tensor-core GEMVs) and nothing else, so results stay batch
// invariant. It is for speed: a decode step of 32 tokens reads a third of
// the activation terms and issues a third of the mma.
func WithBF16Activations() CUDAOption {
	return func(e *CUDAExecutor) { e.prefillBF16, e.decodeBF16 = true, true }
}

// GEMVNorms says whether a decode step's input RMSNorms run inside the
// q/k/v GEMV that takes their output (cuda.MatMulRMS: the bits of the norm
// launch, without it; the down projection writes the residual's tile sums)
// where the kernel can (cuda.K.RMSInGemv: BF16 activations, a token or
// two). LOWBIT_RMS_GEMV sets it for measurement: 0, qkv or auto.
type GEMVNorms int

const (
	// GEMVNormsAuto fuses for hidden widths up to gemvNormsWidthMax: on
	// the H200 the fusion took 7 to 16 µs off a Qwen3-0.6B step (width
	// 1,024; three pairs) and added 7 to 22 µs to a Qwen3-8B one (4,096;
	// four pairs; BENCHMARKS.md), where each of the GEMV's warps adds up
	// 256 tile sums before its first span.
	GEMVNormsAuto GEMVNorms = iota
	// GEMVNormsInput puts each layer's input norm into its q/k/v GEMV.
	GEMVNormsInput
	// GEMVNormsNone launches every norm (RMSNormTerms).
	GEMVNormsNone
)

// gemvNormsWidthMax is the widest hidden size GEMVNormsAuto fuses: between
// the two widths measured (1,024 faster, 4,096 slower).
const gemvNormsWidthMax = 2048

// fuses reports whether n puts the input norms of a model of hidden width
// hidden into the q/k/v GEMVs.
func (n GEMVNorms) fuses(hidden int) bool {
	return n == GEMVNormsInput || n == GEMVNormsAuto && hidden <= gemvNormsWidthMax
}

// gemvNormsFromEnv parses LOWBIT_RMS_GEMV.
func gemvNormsFromEnv() (GEMVNorms, error) {
	switch v := os.Getenv("LOWBIT_RMS_GEMV"); v {
	case "", "auto":
		return GEMVNormsAuto, nil
	case "qkv":
		return GEMVNormsInput, nil
	case "0":
		return GEMVNormsNone, nil
	default:
		return 0, fmt.Errorf("runtime: LOWBIT_RMS_GEMV=%q: want 0, qkv or auto", v)
	}
}

// WithGEMVNorms sets whether the input norms go into the GEMVs, over
// LOWBIT_RMS_GEMV.
func WithGEMVNorms(n GEMVNorms) CUDAOption { return func(e *CUDAExecutor) { e.gemvNorms = n } }

// matmulShared is k.MatMulShared, on BF16 activations under
// WithBF16Activations.
func (e *CUDAExecutor) matmulShared(k *cuda.K, x cuda.Buf, T int, ys []cuda.Buf, ws []*cuda.Weight) error {
	if e.decodeBF16 {
		return k.MatMulSharedBF16(x, T, ys, ws)
	}
	return k.MatMulShared(x, T, ys, ws)
}

// termsFor is k.TermsFor, or k.TermsBF16For under WithBF16Activations.
func (e *CUDAExecutor) termsFor(k *cuda.K, T, in int) (cuda.Terms, error) {
	if e.decodeBF16 {
		return k.TermsBF16For(T, in)
	}
	return k.TermsFor(T, in)
}

// bf16Rows is how many of the step's first rows run through the weights ws
// on BF16 activations: e.prompt when every weight has a row-major copy for
// cuBLASLt, else none.
func (e *CUDAExecutor) bf16Rows(ws ...*cuda.Weight) int {
	for _, w := range ws {
		if w.Rows.Bytes() == 0 {
			return 0
		}
	}
	return e.prompt
}

// matmul runs x [T, in] through the weights ws into ys (MatMulShared):
// the step's first bf16Rows rows through cuBLASLt on BF16 x, the others on
// the float32-activation kernels.
func (e *CUDAExecutor) matmul(k *cuda.K, x cuda.Buf, T int, ys []cuda.Buf, ws ...*cuda.Weight) error {
	p := e.bf16Rows(ws...)
	if p == 0 {
		return e.matmulShared(k, x, T, ys, ws)
	}
	xb, err := k.LtInputOf(x, p*ws[0].In)
	if err != nil {
		return err
	}
	return e.matmulBF16(k, xb, x, p, T, ys, ws...)
}

// matmulBF16 is matmul whose first p rows are already BF16 in xb (made by
// a producer with a BF16 output, AddRMSNormBF16 or SiLUMulBF16: one pass
// less over the activations); x holds the rest, rows p .. T (all of them
// when p is 0).
func (e *CUDAExecutor) matmulBF16(k *cuda.K, xb, x cuda.Buf, p, T int, ys []cuda.Buf, ws ...*cuda.Weight) error {
	if p == 0 {
		return e.matmul(k, x, T, ys, ws...)
	}
	in := ws[0].In
	head, rest := make([]cuda.Buf, len(ys)), make([]cuda.Buf, len(ys))
	for i, w := range ws {
		head[i], rest[i] = ys[i].F32(0, p*w.Out), ys[i].F32(p*w.Out, T*w.Out)
	}
	if err := k.MatMulLtBF16(xb, p, head, ws); err != nil {
		return err
	}
	if T == p {
		return nil
	}
	return e.matmulShared(k, x.F32(p*in, T*in), T-p, rest, ws)
}

// normBF16 is AddRMSNorm of x += h into n whose first bf16Rows(ws) rows go
// to LtInput's buffer as BF16 instead: the input of matmulBF16 through ws.
// It returns that buffer and its row count (0: n holds every row).
func (e *CUDAExecutor) normBF16(k *cuda.K, x, h, n, w cuda.Buf, T int, ws ...*cuda.Weight) (cuda.Buf, int, error) {
	d := e.m.d
	p := e.bf16Rows(ws...)
	if p == 0 || d.hidden%2 != 0 {
		return cuda.Buf{}, 0, k.AddRMSNorm(x, h, n, w, T, d.hidden, d.eps, false)
	}
	xb, err := k.LtInput(p * d.hidden)
	if err != nil {
		return cuda.Buf{}, 0, err
	}
	return xb, p, k.AddRMSNormBF16(x, h, n, xb, w, T, d.hidden, p, d.eps, false)
}

// siluBF16 is SiLUMul of g and u into g whose first bf16Rows(ws) rows go to
// LtInput's buffer as BF16 instead, like normBF16.
func (e *CUDAExecutor) siluBF16(k *cuda.K, g, u cuda.Buf, T int, ws ...*cuda.Weight) (cuda.Buf, int, error) {
	d := e.m.d
	p := e.bf16Rows(ws...)
	if p == 0 || d.inter%2 != 0 {
		return cuda.Buf{}, 0, k.SiLUMul(g, g, u, T*d.inter)
	}
	gb, err := k.LtInput(p * d.inter)
	if err != nil {
		return cuda.Buf{}, 0, err
	}
	return gb, p, k.SiLUMulBF16(g, gb, g, u, T*d.inter, p*d.inter)
}
