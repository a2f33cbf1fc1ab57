//go:build cgo

package cpu

import (
	"math/rand/v2"
	"testing"

	"github.com/lowbit-ai/lowbit/kernels"
)

// TestPrefetchChangesNothing checks that a Prefetch hint, taken up by the
// idle workers and by attention, leaves MatMul, MatMuls and Attention
// outputs bit-identical, including hints of weights the next matmul does
// not read and empty hints.
func TestPrefetchChangesNothing(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	const H, KVH, Dh, ctx = 8, 2, 64, 300
	q, k, v := randn(rng, H*Dh, 1), randn(rng, ctx*KVH*Dh, 1), randn(rng, ctx*KVH*Dh, 1)
	for _, f := range []kernels.WeightFormat{kernels.WeightBF16, kernels.WeightFP8Channel, kernels.WeightNVFP4} {
		a := randWeight(rng, f, kernels.ActNone, 512, 1024)
		b := randWeight(rng, f, kernels.ActNone, 256, 1024)
		x := randn(rng, a.In, 1)
		forEachISA(t, func(t *testing.T, ops *Ops) {
			wantA, wantB := make([]float32, a.Out), make([]float32, b.Out)
			wantAtt := make([]float32, H*Dh)
			ops.MatMul(wantA, x, 1, a)
			ops.MatMuls(x, 1, [][]float32{wantB}, []*kernels.Weight{b})
			ops.Attention(wantAtt, q, k, v, 1, ctx-1, H, KVH, Dh, 0.125)
			other := randWeight(rng, f, kernels.ActNone, 64, 1024)
			for it, hint := range [][]*kernels.Weight{{a}, {a, b}, {b, a, b}, nil, {other}} {
				ya, yb, att := make([]float32, a.Out), make([]float32, b.Out), make([]float32, H*Dh)
				ops.Prefetch(hint)
				ops.Attention(att, q, k, v, 1, ctx-1, H, KVH, Dh, 0.125)
				ops.MatMul(ya, x, 1, a)
				ops.Prefetch(hint)
				ops.MatMuls(x, 1, [][]float32{yb}, []*kernels.Weight{b})
				if i := diffBits(ya, wantA); i >= 0 {
					t.Fatalf("%v hint %d: MatMul output %d differs", f, it, i)
				}
				if i := diffBits(yb, wantB); i >= 0 {
					t.Fatalf("%v hint %d: MatMuls output %d differs", f, it, i)
				}
				if i := diffBits(att, wantAtt); i >= 0 {
					t.Fatalf("%v hint %d: Attention output %d differs", f, it, i)
				}
			}
		})
	}
}
