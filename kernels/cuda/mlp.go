//go:build cgo

package cuda

import (
	"fmt"
	"os"
)

// MLPStep is the second half of a decoder layer as DecodeMLP runs it: the
// o projection, the post-attention RMSNorm (PostNorm), the gate, up and
// down projections, and, where NextNorm is set, the next layer's input
// RMSNorm. All weights tiled BF16.
type MLPStep struct {
	O, Gate, Up, Down  *Weight
	PostNorm, NextNorm Buf // NextNorm: a zero Buf for none
	Eps                float32
	ZeroCentered       bool
}

// decodeMLPBlocks caps lb_decode_mlp's grid (0: every block the GPU
// holds at once); tests set it to give each block several tiles.
var decodeMLPBlocks = 0

// decodeMLPNormFirst (LOWBIT_MLP_NORM_FIRST=1, to measure) runs the
// post-attention norm before the gate and up GEMV's first copies go out
// rather than after: the same bits.
var decodeMLPNormFirst = os.Getenv("LOWBIT_MLP_NORM_FIRST") == "1"

// Probes, to measure only: LOWBIT_MLP_NOHOLD=1 runs lb_decode_mlp_nohold;
// LOWBIT_MLP_PROBE=nowait gives the kernel counters that every barrier
// finds open (its results are then wrong: what the barriers' waits cost).
var (
	decodeMLPKernel = map[bool]string{false: "lb_decode_mlp", true: "lb_decode_mlp_nohold"}[os.Getenv("LOWBIT_MLP_NOHOLD") == "1"]
	decodeMLPNoWait = os.Getenv("LOWBIT_MLP_PROBE") == "nowait"
)

// DecodeMLP runs, for the attention's BF16 terms att of a decode step of
// up to 8 tokens, x += O·att; x += Down·(silu(Gate·n)·(Up·n)) with n =
// RMSNorm(x, PostNorm); then RMSNorm(x, NextNorm) into the terms it
// returns (where NextNorm is set; valid until the next DecodeMLP) or x's
// RMS tile sums into sums (RMSSumsFor; where it is not a zero Buf), in
// one launch (lb_decode_mlp): the bits of MatMulTermsAdd, RMSNormTerms,
// MatMulSiLUTerms, MatMulTermsAdd and RMSNormTerms. It reports false, and
// does nothing, where that kernel does not run (before sm_90, more than 8
// tokens, three-term activations, untiled weights, a hidden width not a
// multiple of 16, no room in shared memory).
func (k *K) DecodeMLP(att Terms, x Buf, s MLPStep, sums Buf) (next Terms, ran bool, err error) {
	T, D := att.T, s.O.Out
	if k.d.Major < 9 || att.nt != 1 || T < 1 || T > 8 {
		return next, false, nil
	}
	for _, w := range []*Weight{s.O, s.Gate, s.Up, s.Down} {
		if !w.Tiled {
			return next, false, nil
		}
	}
	inter := s.Gate.Out
	if D%16 != 0 || rmsWidth("", D) != nil {
		return next, false, nil // the norms' slices take whole tiles
	}
	switch {
	case s.O.In != att.In || s.Gate.In != D || s.Up.In != D || s.Up.Out != inter || s.Down.In != inter || s.Down.Out != D:
		return next, false, fmt.Errorf("cuda: DecodeMLP: o %dx%d on terms of %d, gate %dx%d, up %dx%d, down %dx%d do not chain",
			s.O.Out, s.O.In, att.In, s.Gate.Out, s.Gate.In, s.Up.Out, s.Up.In, s.Down.Out, s.Down.In)
	case x.bytes < 4*T*D || s.PostNorm.bytes < 4*D:
		return next, false, fmt.Errorf("cuda: DecodeMLP: x (%d bytes) or the post-attention norm (%d) too small for %d x %d", x.bytes, s.PostNorm.bytes, T, D)
	case s.NextNorm.ptr != 0 && sums.ptr != 0:
		return next, false, fmt.Errorf("cuda: DecodeMLP: the next norm and the sums are two ways to the next layer; give one")
	case s.NextNorm.ptr != 0 && s.NextNorm.bytes < 4*D:
		return next, false, fmt.Errorf("cuda: DecodeMLP: the next norm's weight has %d bytes for width %d", s.NextNorm.bytes, D)
	case sums.ptr != 0 && sums.bytes < 4*T*(D/16):
		return next, false, fmt.Errorf("cuda: DecodeMLP: %d bytes for the sums of %d rows of %d", sums.bytes, T, D)
	}
	// The kernel reads att by the read-only path and writes xn, xm and
	// next: buffers of their own, so that nothing it reads that way
	// changes under it.
	xn, err := k.termsIn("mlp_norm_terms", T, D, 1)
	if err != nil {
		return next, false, err
	}
	xm, err := k.termsIn("mlp_silu_terms", T, inter, 1)
	if err != nil {
		return next, false, err
	}
	if s.NextNorm.ptr != 0 {
		if next, err = k.termsIn("mlp_next_terms", T, D, 1); err != nil {
			return next, false, err
		}
	}
	if att.buf.ptr == xn.buf.ptr || att.buf.ptr == xm.buf.ptr || s.NextNorm.ptr != 0 && att.buf.ptr == next.buf.ptr {
		return next, false, fmt.Errorf("cuda: DecodeMLP: the attention's terms are in DecodeMLP's own buffers")
	}
	ctr, err := k.d.persistentZeroed("mlp_barrier", 4*5) // lb_decode_mlp's five counters
	if err != nil {
		return next, false, err
	}
	if decodeMLPNoWait {
		if ctr, err = k.d.persistentFilled("mlp_barrier_open", 4*5, 0x7F); err != nil {
			return next, false, err
		}
	}
	spans := func(in int) int { return ((in+15)/16 + mmaSpan - 1) / mmaSpan }
	sumRows := 0
	if sums.ptr != 0 {
		sumRows = 512
	}
	const slots = mmaBulkWarpsMax * mmaSpan * 512 // a ring of one span a warp
	shared := slots + max(spans(att.In)*512, 2*spans(D)*512, spans(inter)*512+sumRows)
	if shared > mmaGemvShared {
		return next, false, nil
	}
	perSM, err := k.d.residentBlocks(decodeMLPKernel, 32*mmaBulkWarpsMax, shared)
	if err != nil || perSM < 1 {
		return next, false, err
	}
	G := perSM * k.d.SMs
	if decodeMLPBlocks > 0 {
		G = min(G, decodeMLPBlocks)
	}
	return next, true, k.d.launch(decodeMLPKernel, [3]int{G, 1, 1}, [3]int{32 * mmaBulkWarpsMax, 1, 1}, shared,
		ptrArg(x.ptr), intArg(D), intArg(T), ptrArg(att.buf.ptr), ptrArg(s.O.Data.ptr), intArg(att.In),
		ptrArg(s.PostNorm.ptr), ptrArg(xn.buf.ptr), ptrArg(s.Gate.Data.ptr), ptrArg(s.Up.Data.ptr), intArg(inter),
		ptrArg(xm.buf.ptr), ptrArg(s.Down.Data.ptr), ptrArg(sums.ptr), ptrArg(s.NextNorm.ptr), ptrArg(next.buf.ptr),
		f32Arg(s.Eps), flagArg(s.ZeroCentered), flagArg(decodeMLPNormFirst), ptrArg(ctr.ptr))
}
