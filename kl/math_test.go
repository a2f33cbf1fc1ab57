package kl

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lowbit-ai/lowbit/kernels/ref"
)

// kl64 is the float64 reference: log-softmax of both logit rows and the KL
// sum, all in float64 straight from the logits.
func kl64(p, q []float32) float64 {
	lse := func(x []float32) float64 {
		m := math.Inf(-1)
		for _, v := range x {
			m = max(m, float64(v))
		}
		var s float64
		for _, v := range x {
			s += math.Exp(float64(v) - m)
		}
		return m + math.Log(s)
	}
	lp, lq := lse(p), lse(q)
	var kl float64
	for i := range p {
		a, b := float64(p[i])-lp, float64(q[i])-lq
		kl += math.Exp(a) * (a - b)
	}
	return kl
}

func randLogits(rng *rand.Rand, V int, scale float64) []float32 {
	x := make([]float32, V)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * scale)
	}
	return x
}

func logSoftmax(t *testing.T, x []float32) []float32 {
	t.Helper()
	out := make([]float32, len(x))
	testOps(t).LogSoftmax(out, x, 1, len(x))
	return out
}

// TestFullKLSelfIsZero: KL(x ‖ x) is exactly 0, for flat and peaked rows
// of every size, through both kernels' log-softmax.
func TestFullKLSelfIsZero(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, V := range []int{1, 2, 7, 1000, 151936} {
		for _, scale := range []float64{0, 0.1, 3, 30} {
			x := randLogits(rng, V, scale)
			for name, lp := range map[string][]float32{"test ops": logSoftmax(t, x), "ref": func() []float32 {
				o := make([]float32, V)
				ref.Ops{}.LogSoftmax(o, x, 1, V)
				return o
			}()} {
				if got := FullKL(lp, lp); got != 0 {
					t.Errorf("V=%d scale=%g %s: KL(x‖x) = %g, want exactly 0", V, scale, name, got)
				}
			}
		}
	}
}

// TestFullKLMatchesFloat64 compares FullKL of the kernels' float32
// log-softmax with the float64 reference on fixed logits: hand cases with
// closed forms, and random rows of Qwen3's vocabulary size.
func TestFullKLMatchesFloat64(t *testing.T) {
	cases := []struct {
		name string
		p, q []float32
		want float64 // closed form; NaN: use kl64
	}{
		// p = (1/2, 1/2), q = (e/(1+e), 1/(1+e)).
		{"two tokens", []float32{0, 0}, []float32{1, 0}, 0.5*math.Log(0.5*(1+math.E)/math.E) + 0.5*math.Log(0.5*(1+math.E))},
		// Shifting logits changes nothing.
		{"shift", []float32{1, 2, 3}, []float32{11, 12, 13}, 0},
		// p = (1/3)×3 against q = (1/2, 1/4, 1/4).
		{"three", []float32{0, 0, 0}, []float32{float32(math.Log(2)), 0, 0}, math.Log(1.0/3) - (math.Log(0.5)+2*math.Log(0.25))/3},
		{"peaked vs flat", []float32{20, 0, 0, 0}, []float32{0, 0, 0, 0}, math.NaN()},
		{"flat vs peaked", []float32{0, 0, 0, 0}, []float32{20, 0, 0, 0}, math.NaN()},
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 4 {
		V := 151936
		p := randLogits(rng, V, 2)
		q := make([]float32, V)
		for j := range q {
			q[j] = p[j] + float32(rng.NormFloat64()*0.05*float64(i+1))
		}
		cases = append(cases, struct {
			name string
			p, q []float32
			want float64
		}{"random vocab", p, q, math.NaN()})
	}
	for _, c := range cases {
		want := c.want
		if math.IsNaN(want) {
			want = kl64(c.p, c.q)
		}
		got := FullKL(logSoftmax(t, c.p), logSoftmax(t, c.q))
		// float32 log-softmax errs by about 1e-7 per entry (relative to
		// the log-sum-exp), which moves the KL by about that much.
		if tol := 1e-6 + 1e-5*want; math.Abs(got-want) > tol {
			t.Errorf("%s: KL %.9g, float64 reference %.9g (|diff| %.2g > %.2g)", c.name, got, want, math.Abs(got-want), tol)
		}
		if got < 0 {
			t.Errorf("%s: KL %g < 0", c.name, got)
		}
	}
}

// TestRowStats checks the argmaxes (lowest id among ties) and the entropy.
func TestRowStats(t *testing.T) {
	lp := logSoftmax(t, []float32{0, 3, 3, 1})
	lq := logSoftmax(t, []float32{5, 0, 0, 5})
	r := Row(lp, lq)
	if r.RefTop1 != 1 || r.CandTop1 != 0 {
		t.Errorf("argmaxes %d, %d; want 1, 0", r.RefTop1, r.CandTop1)
	}
	var h float64
	for _, v := range lp {
		h -= math.Exp(float64(v)) * float64(v)
	}
	if math.Abs(r.RefEntropy-h) > 1e-6 {
		t.Errorf("entropy %g, want %g", r.RefEntropy, h)
	}
	uni := logSoftmax(t, make([]float32, 1000))
	if r := Row(uni, uni); math.Abs(r.RefEntropy-math.Log(1000)) > 1e-5 {
		t.Errorf("uniform entropy %g, want log 1000 = %g", r.RefEntropy, math.Log(1000))
	}
}
