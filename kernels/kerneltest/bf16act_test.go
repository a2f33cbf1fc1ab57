package kerneltest

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lowbit-ai/lowbit/format"
	"github.com/lowbit-ai/lowbit/kernels"
	"github.com/lowbit-ai/lowbit/kernels/ref"
)

// TestBF16Activations: the wrapper's MatMul multiplies BF16(x) exactly as
// the wrapped kernels multiply x, and its chunked BF16 attention stays
// within BF16 rounding of the float64 reference over 200 positions (three
// chunks folded): q and P rounded to 8 significant bits move each output
// by about 2⁻⁸ of the values' scale; a wrong fold or mask misses by O(1).
func TestBF16Activations(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	ops := BF16Activations(ref.Ops{}, func(*kernels.Weight) bool { return true })
	const out, in, T = 8, 32, 3
	w := &kernels.Weight{Format: kernels.WeightBF16, Out: out, In: in, Data: make([]byte, 2*out*in), Act: kernels.ActNone}
	for i := range out * in {
		h := format.BF16FromFloat32(float32(rng.NormFloat64()))
		w.Data[2*i], w.Data[2*i+1] = byte(h), byte(h>>8)
	}
	x := make([]float32, T*in)
	xb := make([]float32, T*in)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
		xb[i] = format.BF16ToFloat32(format.BF16FromFloat32(x[i]))
	}
	got, want := make([]float32, T*out), make([]float32, T*out)
	ops.MatMul(got, x, T, w)
	ref.Ops{}.MatMul(want, xb, T, w)
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("MatMul y[%d] = %g, want %g (the reference on BF16 x)", i, got[i], want[i])
		}
	}

	const H, KVH, Dh, start, n = 4, 2, 16, 190, 10
	q := randn(rng, n*H*Dh)
	k, v := randn(rng, (start+n)*KVH*Dh), randn(rng, (start+n)*KVH*Dh)
	a, b := make([]float32, n*H*Dh), make([]float32, n*H*Dh)
	ops.Attention(a, q, k, v, n, start, H, KVH, Dh, 0.25)
	ref.Ops{}.Attention(b, q, k, v, n, start, H, KVH, Dh, 0.25)
	var worst float64
	for i := range a {
		worst = max(worst, math.Abs(float64(a[i]-b[i])))
	}
	t.Logf("BF16 attention vs float64: max |Δ| %.3g", worst)
	if worst > 0.02 || worst == 0 {
		t.Errorf("BF16 attention differs from the float64 reference by %.3g, want (0, 0.02]", worst)
	}
}

func randn(rng *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(rng.NormFloat64())
	}
	return s
}
