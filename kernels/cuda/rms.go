//go:build cgo

package cuda

import "fmt"

// rmsGemvTokens is RMS_GEMV_TOKENS in matmul_mma_bulk.cu: the most tokens
// an RMS input carries.
const rmsGemvTokens = 2

// RMSInput is a matmul input given as RMSNorm(X) rather than as terms: X
// [T, D] float32, the residual stream that a MatMulTermsAdd with Sums has
// just added into, Sums its rows' RMS tile sums (RMSSumsFor), W the
// norm's weight. The GEMV that takes it (MatMulRMS) normalizes and rounds
// the columns itself, with the bits of RMSNormTerms into BF16 terms, so a
// decode step has no norm launch between the down projection and the next
// layer's q/k/v.
type RMSInput struct {
	X, Sums, W   Buf
	T, D         int
	Eps          float32
	ZeroCentered bool
}

// RMSSumsFor returns the buffer for the RMS tile sums of a [T, D] residual
// stream ([T][D/16] float32, in the device's persistent buffer rms_sums).
func (k *K) RMSSumsFor(T, D int) (Buf, error) {
	return k.d.persistent("rms_sums", 4*T*((D+15)/16))
}

// RMSInGemv reports whether MatMulRMS can run for T tokens of width D
// (sm_90, BF16 activations of up to rmsGemvTokens tokens, D a multiple of
// 16 within the norm kernels' widths); where it cannot, the caller runs
// RMSNormTerms and the terms' GEMVs, and its producer need not write sums.
// Whether it should is the caller's choice (the runtime's
// LOWBIT_RMS_GEMV).
func (k *K) RMSInGemv(T, D int) bool {
	return k.d.Major >= 9 && T >= 1 && T <= rmsGemvTokens && D%16 == 0 && rmsWidth("", D) == nil
}

// check validates in for a GEMV of input width inWidth.
func (in RMSInput) check(op string, inWidth int) error {
	switch {
	case in.D != inWidth:
		return fmt.Errorf("cuda: %s: an RMS input of width %d for weights of input width %d", op, in.D, inWidth)
	case in.X.bytes < 4*in.T*in.D || in.W.bytes < 4*in.D || in.Sums.bytes < 4*in.T*(in.D/16):
		return fmt.Errorf("cuda: %s: an RMS input of %d x %d with x %d, weight %d and sums %d bytes", op, in.T, in.D, in.X.bytes, in.W.bytes, in.Sums.bytes)
	case in.X.ptr%16 != 0 || in.W.ptr%16 != 0:
		return fmt.Errorf("cuda: %s: an RMS input's x and weight must be 16-byte aligned (vector loads)", op)
	}
	return nil
}

// MatMulRMS runs tiled weights ws on the RMS input in (ys [T, Out]
// float32) with lb_mma_gemv_bulk1_rms: the bits of RMSNormTerms into BF16
// terms then MatMulTerms. It reports false, and does nothing, where that
// kernel does not run (RMSInGemv, untiled weights, no room in shared
// memory).
func (k *K) MatMulRMS(in RMSInput, ys []Buf, ws []*Weight) (bool, error) {
	if len(ys) != len(ws) {
		return false, fmt.Errorf("cuda: MatMulRMS of %d outputs and %d weights", len(ys), len(ws))
	}
	if !k.RMSInGemv(in.T, in.D) {
		return false, nil
	}
	for _, w := range ws {
		if !w.Tiled {
			return false, nil
		}
		if err := in.check("MatMulRMS", w.In); err != nil {
			return false, err
		}
	}
	spans := (in.D/16 + mmaSpan - 1) / mmaSpan
	tiles := 0
	for _, w := range ws[:min(3, len(ws))] {
		tiles += (w.Out + 15) / 16
	}
	warps, ring := bulkShape(spans, tiles, k.d.SMs)
	shared := warps*ring*mmaSpan*512 + spans*512 + warps*rmsStageBytes
	if shared > mmaGemvShared {
		return false, nil
	}
	return true, k.gemvLaunches(ys, ws, "lb_mma_gemv_bulk1_rms", 16, 32*warps, 1, shared,
		ptrArg(in.X.ptr), ptrArg(in.Sums.ptr), ptrArg(in.W.ptr), f32Arg(in.Eps), flagArg(in.ZeroCentered),
		intArg(in.T), intArg(in.D), intArg(ring))
}

// rmsStageBytes is a warp's stage of an RMS input's B fragments: 16
// chunks × 8 lanes × 8 bytes (matmul_mma_bulk.cu, mma_gemv_span_rms).
const rmsStageBytes = mmaSpan * 8 * 8
