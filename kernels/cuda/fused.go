//go:build cgo

package cuda

import "fmt"

// The decode step's fused GEMVs (matmul_mma_bulk.cu): a step of a few
// tokens is bound by its weights' bytes and by its chain of small
// launches, so the bulk GEMV takes over the work after it (the residual
// add, the SiLU product), each with the bits of the unfused kernels. Each reports false, and does nothing, where
// another GEMV kernel would run; the runtime then takes the unfused path.

// MatMulTermsAdd is y += w·x for the terms t of x, where MatMulTerms would
// run lb_mma_gemv_bulk or _bulk1 (a decode step of a few tokens): the
// float32 sum each output gets is MatMulTerms's, added to y once, the bits
// of MatMulTerms then Add. It reports false, and does nothing, where
// another kernel would run.
func (k *K) MatMulTermsAdd(t Terms, y Buf, w *Weight) (bool, error) {
	if !w.Tiled || w.In != t.In {
		return false, fmt.Errorf("cuda: MatMulTermsAdd: a %dx%d weight (tiled %v) on terms of width %d", w.Out, w.In, w.Tiled, t.In)
	}
	if t.T == 0 || t.T > mmaGemvTokens || t.nt == 1 && t.T >= mmaTiles1From {
		return false, nil
	}
	return k.gemvBulk(t, []Buf{y}, []*Weight{w}, 1, Terms{})
}

// MatMulSiLUTerms runs a layer's gate and up weights on t, as MatMulTerms
// does, and where lb_mma_gemv_bulk runs (a decode step of a few tokens)
// also writes silu(gate)·up, the down projection's input, as terms: the
// bits of SiLUMulTerms, without its launch. Those terms have a buffer of
// their own, valid until the next MatMulSiLUTerms. It reports false, and
// does nothing, where another kernel would run.
func (k *K) MatMulSiLUTerms(t Terms, gate, up Buf, wg, wu *Weight) (Terms, bool, error) {
	if err := checkGateUp(t.In, wg, wu); err != nil {
		return Terms{}, false, err
	}
	if !k.d.siluGemv || t.T == 0 || t.T > mmaGemvTokens || t.nt == 1 && t.T >= mmaTiles1From {
		return Terms{}, false, nil
	}
	silu, err := k.siluTerms(t.T, wg.Out, t.nt)
	if err != nil {
		return Terms{}, false, err
	}
	ok, err := k.gemvBulk(t, []Buf{gate, up}, []*Weight{wg, wu}, 0, silu)
	return silu, ok, err
}

// checkGateUp checks a gate and an up weight for a fused SiLU: tiled, on
// inputs of width in, of equal rows.
func checkGateUp(in int, wg, wu *Weight) error {
	for _, w := range []*Weight{wg, wu} {
		if !w.Tiled || w.In != in {
			return fmt.Errorf("cuda: fused SiLU: a %dx%d weight (tiled %v) on inputs of width %d", w.Out, w.In, w.Tiled, in)
		}
	}
	if wg.Out != wu.Out {
		return fmt.Errorf("cuda: fused SiLU: gate of %d rows, up of %d", wg.Out, wu.Out)
	}
	return nil
}

// siluTerms returns the buffer a fused SiLU writes the down projection's
// input into: terms of T tokens, D wide, nt terms.
func (k *K) siluTerms(T, D, nt int) (Terms, error) {
	groups := (T + 7) / 8
	b, err := k.d.persistent("mma_terms_silu", groups*((D+15)/16)*3*32*8)
	return Terms{b, T, D, groups, nt}, err
}

// siluArrivals returns the arrival counts of a fused SiLU's n (row tile,
// token groups) pairs, zeros the kernels return to zeros (mma_gemv_silu);
// none without silu.
func (k *K) siluArrivals(silu Terms, n int) (Buf, error) {
	if silu.buf.ptr == 0 {
		return Buf{}, nil
	}
	return k.d.persistentZeroed("gemv_arrivals", 4*n)
}

// RMSNormTerms writes RMSNorm(x) [T, D] into t (t.In = D) as
// AddRMSNormTerms without h does, bit for bit, each row spread over
// ⌈D / 512⌉ blocks (lb_rmsnorm_terms_slices): for decode steps, whose few
// rows would otherwise run on as many SMs.
func (k *K) RMSNormTerms(x Buf, t Terms, w Buf, D int, eps float32, zeroCentered bool) error {
	if t.In != D {
		return fmt.Errorf("cuda: RMSNormTerms of width %d into terms of %d", D, t.In)
	}
	nc := (D + 15) / 16
	return k.d.launch("lb_rmsnorm_terms_slices", [3]int{t.T, (nc*8 + 255) / 256, 1}, [3]int{256, 1, 1}, 0,
		ptrArg(x.ptr), ptrArg(t.buf.ptr), ptrArg(w.ptr), intArg(D), f32Arg(eps), flagArg(zeroCentered), intArg(nc), intArg(t.nt))
}
