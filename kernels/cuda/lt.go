//go:build cgo

package cuda

// #include <stdlib.h>
// #include "driver.h"
import "C"

import (
	"errors"
	"fmt"
)

// The cuBLASLt prefill matmul: y [T, out] float32 = BF16(x) [T, in] ·
// wᵀ with BF16 weights row-major (Weight.Rows), float32 accumulation in
// cuBLASLt's order. It is not the float32-activation contract of
// matmul_mma.cu (x is rounded to BF16 first, as vLLM and transformers
// compute a BF16 model); the runtime uses it only where asked to
// (runtime.CUDAOptions.PrefillBF16). One algorithm a weight shape, chosen
// once at ltPickTokens tokens without split-K and then run at every T, so
// that a row's result depends on its own x and the weight only, not on the
// rows beside it (batch invariance; TestMatMulLtRows checks it on the GPU).

// ltWorkspace is the workspace cuBLASLt's algorithms may use.
const ltWorkspace = 32 << 20

// ltPickTokens is the token count the algorithm of a shape is picked at: a
// prefill chunk's size.
const ltPickTokens = 4096

// ltState is the device's cuBLASLt handle and pinned algorithms, opened on
// first use (the library is only needed there).
type ltState struct {
	handle C.lb_handle
	algos  map[[2]int][8]C.uint64_t
	err    error
}

// checkLt turns a cublasStatus_t into an error naming the call: nil for
// success.
func checkLt(call string, r C.lb_ltres) error {
	if r == 0 {
		return nil
	}
	return fmt.Errorf("cuda: %s: %s (%d): %s", call, C.GoString(C.lb_ltStatusName(r)), int(r), C.GoString(C.lb_ltStatusString(r)))
}

// ErrNoCuBLASLt wraps the error of a cuBLASLt matmul on a machine whose
// libcublasLt cannot be loaded.
var ErrNoCuBLASLt = errors.New("cuda: cuBLASLt is not available")

// lt opens cuBLASLt once (locked by the caller).
func (d *Device) lt() (*ltState, error) {
	s := &d.ltState
	if s.handle != nil || s.err != nil {
		return s, s.err
	}
	var errbuf [512]C.char
	if C.lb_cublaslt_open(nil, &errbuf[0], C.size_t(len(errbuf))) != 0 {
		s.err = fmt.Errorf("%w: libcublasLt cannot be loaded: %s", ErrNoCuBLASLt, C.GoString(&errbuf[0]))
		return s, s.err
	}
	if err := checkLt("cublasLtCreate", C.lb_ltCreate(&s.handle)); err != nil {
		s.err = fmt.Errorf("%w: %w", ErrNoCuBLASLt, err)
		return s, s.err
	}
	s.algos = map[[2]int][8]C.uint64_t{}
	return s, nil
}

// OpenCuBLASLt loads cuBLASLt and creates its handle now, so that a
// machine without the library hears of it when it asks for the BF16
// prefill, not at its first prompt.
func (d *Device) OpenCuBLASLt() error {
	return d.do(func() error {
		_, err := d.lt()
		return err
	})
}

// closeLt releases the handle (locked by the caller).
func (d *Device) closeLt() {
	if d.ltState.handle != nil {
		C.lb_ltDestroy(d.ltState.handle)
		d.ltState = ltState{}
	}
}

// algo returns the pinned algorithm for an [out, in] weight.
func (s *ltState) algo(out, in int) ([8]C.uint64_t, error) {
	key := [2]int{out, in}
	if a, ok := s.algos[key]; ok {
		return a, nil
	}
	var a [8]C.uint64_t
	var found C.int
	if err := checkLt("cublasLtMatmulAlgoGetHeuristic", C.lb_lt_pick_bf16(s.handle, C.int(out), C.int(in), ltPickTokens,
		ltWorkspace, &a[0], &found)); err != nil {
		return a, err
	}
	if found == 0 {
		return a, fmt.Errorf("cuda: cuBLASLt has no algorithm without split-K for a BF16 %dx%d weight", out, in)
	}
	s.algos[key] = a
	return a, nil
}

// RowsBytes is the size of a weight's row-major BF16 copy (Weight.Rows).
func RowsBytes(out, in int) int { return 2 * out * in }

// ToBF16 writes src's n float32 values rounded to BF16 into dst.
func (k *K) ToBF16(dst, src Buf, n int) error {
	if dst.bytes < 2*n || src.bytes < 4*n {
		return fmt.Errorf("cuda: ToBF16 of %d values from %d bytes into %d", n, src.bytes, dst.bytes)
	}
	return k.d.launch("lb_to_bf16", grid1((n+1)/2, 256), [3]int{256, 1, 1}, 0, ptrArg(dst.ptr), ptrArg(src.ptr), i64Arg(int64(n)))
}

// MatMulLt: y [T, w.Out] float32 = xb [T, w.In] BF16 · w.Rowsᵀ through
// cuBLASLt (see the top of this file). y, xb and w.Rows must start on
// 256-byte boundaries, as device allocations and arena spans do.
func (k *K) MatMulLt(y, xb Buf, T int, w *Weight) error {
	if w.Rows.bytes < RowsBytes(w.Out, w.In) {
		return fmt.Errorf("cuda: MatMulLt: the %dx%d weight has no row-major BF16 copy", w.Out, w.In)
	}
	if y.bytes < 4*T*w.Out || xb.bytes < 2*T*w.In {
		return fmt.Errorf("cuda: MatMulLt of %d tokens of a %dx%d weight: y %d bytes, x %d", T, w.Out, w.In, y.bytes, xb.bytes)
	}
	if T == 0 {
		return nil
	}
	d := k.d
	s, err := d.lt()
	if err != nil {
		return err
	}
	a, err := s.algo(w.Out, w.In)
	if err != nil {
		return err
	}
	ws, err := d.persistent("lt_workspace", ltWorkspace)
	if err != nil {
		return err
	}
	return d.timed(fmt.Sprintf("cublasLt %dx%d", w.Out, w.In), func() error {
		return checkLt(fmt.Sprintf("cublasLtMatmul(%dx%d, T=%d)", w.Out, w.In, T), C.lb_lt_gemm_bf16(s.handle, d.stream,
			y.ptr, w.Rows.ptr, xb.ptr, C.int(T), C.int(w.Out), C.int(w.In), &a[0], ws.ptr, C.size_t(ltWorkspace)))
	})
}

// MatMulLtShared runs MatMulLt for weights that read the same float32 x
// [T, in], rounded to BF16 once (into LtInput's buffer).
func (k *K) MatMulLtShared(x Buf, T int, ys []Buf, ws []*Weight) error {
	if len(ws) == 0 {
		return fmt.Errorf("cuda: MatMulLtShared of no weights")
	}
	xb, err := k.LtInputOf(x, T*ws[0].In)
	if err != nil {
		return err
	}
	return k.MatMulLtBF16(xb, T, ys, ws)
}

// LtInputOf rounds x's first n float32 values to BF16 into LtInput's
// buffer and returns it.
func (k *K) LtInputOf(x Buf, n int) (Buf, error) {
	xb, err := k.LtInput(n)
	if err != nil {
		return Buf{}, err
	}
	return xb, k.ToBF16(xb, x, n)
}

// LtInput is the device's buffer for n BF16 matmul inputs, which the
// producers with a BF16 output (AddRMSNormBF16, SiLUMulBF16) write for
// MatMulLtBF16; it is reused by every call (stream order keeps it safe),
// and growing it waits for the device, so it is not for graph capture.
func (k *K) LtInput(n int) (Buf, error) { return k.d.persistent("lt_x", 2*n) }

// MatMulLtBF16 runs MatMulLt for weights that read the same BF16 xb [T, in].
func (k *K) MatMulLtBF16(xb Buf, T int, ys []Buf, ws []*Weight) error {
	if len(ys) != len(ws) || len(ws) == 0 {
		return fmt.Errorf("cuda: MatMulLtBF16 of %d outputs and %d weights", len(ys), len(ws))
	}
	for i, w := range ws {
		if w.In != ws[0].In {
			return fmt.Errorf("cuda: MatMulLtBF16: a %dx%d weight beside one of %d columns", w.Out, w.In, ws[0].In)
		}
		if err := k.MatMulLt(ys[i], xb, T, w); err != nil {
			return err
		}
	}
	return nil
}

// AddRMSNormBF16 is AddRMSNorm whose first nb rows go to yb as BF16 [nb, D]
// instead of to y (add_rmsnorm.cu): what ToBF16 would make of them, in one
// pass. D must be even.
func (k *K) AddRMSNormBF16(x, h, y, yb, w Buf, T, D, nb int, eps float32, zeroCentered bool) error {
	if D%2 != 0 || nb < 0 || nb > T || yb.bytes < 2*nb*D || y.bytes < 4*T*D {
		return fmt.Errorf("cuda: AddRMSNormBF16 of %d rows of %d, %d as BF16 (y %d bytes, yb %d)", T, D, nb, y.bytes, yb.bytes)
	}
	if err := rmsWidth("AddRMSNormBF16", D); err != nil {
		return err
	}
	return k.d.launch("lb_add_rmsnorm_bf16", [3]int{T, 1, 1}, [3]int{256, 1, 1}, 0,
		ptrArg(x.ptr), ptrArg(h.ptr), ptrArg(y.ptr), ptrArg(yb.ptr), ptrArg(w.ptr), intArg(D), f32Arg(eps), flagArg(zeroCentered), intArg(nb))
}

// SiLUMulBF16 is SiLUMul over n elements whose first nb (even) go to outb
// as BF16 instead of to out (silu_mul.cu).
func (k *K) SiLUMulBF16(out, outb, gate, up Buf, n, nb int) error {
	if nb%2 != 0 || nb < 0 || nb > n || outb.bytes < 2*nb || out.bytes < 4*n {
		return fmt.Errorf("cuda: SiLUMulBF16 of %d values, %d as BF16 (out %d bytes, outb %d)", n, nb, out.bytes, outb.bytes)
	}
	return k.d.launch("lb_silu_mul_bf16", grid1((n+1)/2, 256), [3]int{256, 1, 1}, 0,
		ptrArg(out.ptr), ptrArg(outb.ptr), ptrArg(gate.ptr), ptrArg(up.ptr), i64Arg(int64(nb)), i64Arg(int64(n)))
}
