package quantize

import (
	"bytes"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"gonum.org/v1/gonum/mat"
)

// correlatedInputs returns T tokens of n correlated input channels, as
// [T, n]: a few latent factors mixed into every channel, plus noise, plus
// two channels with ten times the variance (activation outliers). The
// channels' structure comes from seed; draw picks the tokens.
func correlatedInputs(seed uint64, T, n int) []float64 { return correlatedDraw(seed, seed, T, n) }

func correlatedDraw(seed, draw uint64, T, n int) []float64 {
	r := rand.New(rand.NewPCG(seed, 11))
	const k = 8
	mix := make([]float64, k*n)
	for i := range mix {
		mix[i] = r.NormFloat64()
	}
	big1, big2 := r.IntN(n), r.IntN(n)
	x := make([]float64, T*n)
	z := make([]float64, k)
	r = rand.New(rand.NewPCG(draw, 12))
	for t := range T {
		for j := range z {
			z[j] = r.NormFloat64()
		}
		for c := range n {
			v := 0.3 * r.NormFloat64()
			for j := range z {
				v += z[j] * mix[j*n+c] / math.Sqrt(k)
			}
			if c == big1 || c == big2 {
				v *= 10
			}
			x[t*n+c] = v
		}
	}
	return x
}

// gram returns XᵀX of x [T, n].
func gram(x []float64, T, n int) []float64 {
	h := make([]float64, n*n)
	for t := range T {
		row := x[t*n : (t+1)*n]
		for i, a := range row {
			for j, b := range row {
				h[i*n+j] += a * b
			}
		}
	}
	return h
}

// outputErr is ||(Q - W) Xᵀ||², the error of the layer's outputs on x.
func outputErr(q, w, x []float64, rows, n, T int) float64 {
	var s float64
	for t := range T {
		xt := x[t*n : (t+1)*n]
		for r := range rows {
			var d float64
			for c := range n {
				d += (q[r*n+c] - w[r*n+c]) * xt[c]
			}
			s += d * d
		}
	}
	return s
}

// TestGPTQLowersOutputError checks GPTQ's purpose on correlated inputs: a
// lower output error than RTN's with the same scales, for every scheme, on
// held-out tokens of the same distribution as the calibration ones.
func TestGPTQLowersOutputError(t *testing.T) {
	const rows, n, T = 64, 256, 1024
	s := hessianFile(t, n, gram(correlatedInputs(1, T, n), T, n), "m")
	x := correlatedDraw(1, 99, T, n)
	h, err := s.Hessian("m")
	if err != nil {
		t.Fatal(err)
	}
	hi := newHessianInv(h)
	if hi.fallback {
		t.Fatal("the Hessian fell back to RTN")
	}
	for _, c := range methodCases {
		t.Run(c.String(), func(t *testing.T) {
			m, w := heavyMatrix(3, rows, n)
			rtnOut := quantizeWith(t, c, RTN, m, nil)
			gptqOut := quantizeWith(t, c, GPTQ, m, hi)
			for i := 1; i < len(rtnOut); i++ {
				if !bytes.Equal(rtnOut[i], gptqOut[i]) {
					t.Errorf("output %d (a scale) differs between GPTQ and RTN", i)
				}
			}
			er := outputErr(dequant(c, rtnOut, rows, n), w, x, rows, n, T)
			eg := outputErr(dequant(c, gptqOut, rows, n), w, x, rows, n, T)
			t.Logf("output error: RTN %.4g, GPTQ %.4g (%.0f%%)", er, eg, 100*(eg/er-1))
			if !(eg < 0.8*er) {
				t.Errorf("GPTQ output error %.4g is not 20%% below RTN's %.4g", eg, er)
			}
		})
	}
}

// TestGPTQDiagonalHessian checks that with uncorrelated inputs (a diagonal
// Hessian) there is no error to propagate: GPTQ's codes are RTN's.
func TestGPTQDiagonalHessian(t *testing.T) {
	const rows, n = 32, 64
	h := make([]float64, n*n)
	for i := range n {
		h[i*n+i] = float64(1 + i%5)
	}
	s := hessianFile(t, n, h, "m")
	hs, _ := s.Hessian("m")
	hi := newHessianInv(hs)
	for _, c := range []methodCase{{NVFP4A16, CompressedTensors}, {NVFP4, ModelOpt}, {FP8Dynamic, ModelOpt}} {
		m, _ := heavyMatrix(4, rows, n)
		if !bytes.Equal(quantizeWith(t, c, RTN, m, nil)[0], quantizeWith(t, c, GPTQ, m, hi)[0]) {
			t.Errorf("%v: GPTQ codes with a diagonal Hessian differ from RTN's", c)
		}
	}
}

// TestGPTQActOrder permutes the input channels of a problem: the codes
// must permute with them, since the processing order follows diag(H) and
// not the column index.
func TestGPTQActOrder(t *testing.T) {
	const rows, n, T = 16, 96, 300
	x := correlatedInputs(2, T, n)
	m, w := heavyMatrix(5, rows, n)
	perm := rand.New(rand.NewPCG(3, 3)).Perm(n)
	xp := make([]float64, len(x))
	wp := make([]float32, len(w))
	for t := range T {
		for j, c := range perm {
			xp[t*n+j] = x[t*n+c]
		}
	}
	for r := range rows {
		for j, c := range perm {
			wp[r*n+j] = float32(w[r*n+c])
		}
	}
	mp := refBF16(rows, n, wp)
	c := methodCase{FP8Dynamic, CompressedTensors} // per-row scales: unchanged by a column permutation
	h1, _ := hessianFile(t, n, gram(x, T, n), "m").Hessian("m")
	h2, _ := hessianFile(t, n, gram(xp, T, n), "m").Hessian("m")
	a := quantizeWith(t, c, GPTQ, m, newHessianInv(h1))[0]
	b := quantizeWith(t, c, GPTQ, mp, newHessianInv(h2))[0]
	for r := range rows {
		for j, col := range perm {
			if b[r*n+j] != a[r*n+col] {
				t.Fatalf("row %d: code of permuted column %d (original %d) is %#x, want %#x", r, j, col, b[r*n+j], a[r*n+col])
			}
		}
	}
	if rtn := quantizeWith(t, c, RTN, m, nil)[0]; bytes.Equal(a, rtn) {
		t.Error("GPTQ gave RTN's codes: the test shows nothing")
	}
}

// TestGPTQDeadAndFallback: a channel that was always zero gets zero
// weights; a Hessian that damping cannot make positive definite falls back
// to RTN.
func TestGPTQDeadAndFallback(t *testing.T) {
	const rows, n, T = 8, 32, 200
	x := correlatedInputs(4, T, n)
	for t := range T {
		x[t*n+5] = 0
	}
	h, _ := hessianFile(t, n, gram(x, T, n), "m").Hessian("m")
	hi := newHessianInv(h)
	if !hi.dead[5] || slices.Contains(hi.dead[6:], true) || hi.fallback {
		t.Fatalf("dead %v, fallback %v; want only column 5 dead", hi.dead, hi.fallback)
	}
	m, _ := heavyMatrix(6, rows, n)
	c := methodCase{NVFP4A16, CompressedTensors}
	deq := dequant(c, quantizeWith(t, c, GPTQ, m, hi), rows, n)
	for r := range rows {
		if deq[r*n+5] != 0 {
			t.Errorf("row %d: the dead column dequantizes to %v", r, deq[r*n+5])
		}
	}

	bad := make([]float64, n*n)
	for i := range n {
		bad[i*n+i] = 1
	}
	bad[0*n+1], bad[1*n+0] = 3, 3 // eigenvalues -2 and 4: indefinite
	hb, _ := hessianFile(t, n, bad, "m").Hessian("m")
	hib := newHessianInv(hb)
	if !hib.fallback {
		t.Fatal("an indefinite Hessian did not fall back")
	}
	if !bytes.Equal(quantizeWith(t, c, RTN, m, nil)[0], quantizeWith(t, c, GPTQ, m, hib)[0]) {
		t.Error("the fallback's codes differ from RTN's")
	}
	if _, err := gptq(m, &hessianInv{n: n + 1}, nil, fp4Grid); err == nil {
		t.Error("a Hessian of the wrong size was accepted")
	}
}

// TestHessiansShared: q/k/v with one Hessian prepare it once; a different
// one gets its own.
func TestHessiansShared(t *testing.T) {
	const n, T = 32, 100
	x := correlatedInputs(5, T, n)
	s := hessianFile(t, n, gram(x, T, n), "q", "k")
	got, err := hessiansOf(s, []string{"q", "k"})
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != got[1] {
		t.Error("equal Hessians were prepared twice")
	}
	s2 := hessianFile(t, n, gram(correlatedInputs(6, T, n), T, n), "v")
	if _, err := hessiansOf(s2, []string{"v", "missing"}); err == nil {
		t.Error("a module without statistics gave no error")
	}
}

// TestGPTQMatchesTextbook compares the blocked, lazily updated GPTQ with
// the algorithm as first written: H⁻¹ by explicit inversion, its upper
// Cholesky factor, and every later column updated right after each
// column is rounded. They are the same computation in another order, so
// all but a few codes near rounding boundaries must agree.
func TestGPTQMatchesTextbook(t *testing.T) {
	const rows, n, T = 16, 300, 900 // 300: two full blocks of 128 and a partial one
	x := correlatedInputs(7, T, n)
	h := gram(x, T, n)
	hs, _ := hessianFile(t, n, h, "m").Hessian("m")
	hi := newHessianInv(hs)
	m, w := heavyMatrix(8, rows, n)
	scale := func(r, c int) float32 { return float32(0.01 * (1 + float64(r%3))) }
	got, err := gptq(m, hi, scale, fp8Grid)
	if err != nil {
		t.Fatal(err)
	}

	// The textbook version, on float32 Hessian values as the file holds them.
	perm := hi.perm
	hp := mat.NewSymDense(n, nil)
	var mean float64
	for i := range n {
		mean += float64(float32(h[perm[i]*n+perm[i]]))
	}
	for i := range n {
		for j := i; j < n; j++ {
			v := float64(float32(h[perm[i]*n+perm[j]]))
			if i == j {
				v += 0.01 * mean / n
			}
			hp.SetSym(i, j, v)
		}
	}
	var inv mat.Dense
	if err := inv.Inverse(hp); err != nil {
		t.Fatal(err)
	}
	invSym := mat.NewSymDense(n, nil)
	for i := range n {
		for j := i; j < n; j++ {
			invSym.SetSym(i, j, (inv.At(i, j)+inv.At(j, i))/2)
		}
	}
	var ch mat.Cholesky
	if !ch.Factorize(invSym) {
		t.Fatal("H⁻¹ is not positive definite")
	}
	var u mat.TriDense
	ch.UTo(&u)
	wp := make([]float64, rows*n)
	for r := range rows {
		for j, c := range perm {
			wp[r*n+j] = w[r*n+c]
		}
	}
	want := make([]uint8, rows*n)
	for i := range n {
		c := perm[i]
		for r := range rows {
			code, q := fp8Grid(wp[r*n+i], scale(r, c))
			want[r*n+c] = code
			e := (wp[r*n+i] - q) / u.At(i, i)
			for j := i + 1; j < n; j++ {
				wp[r*n+j] -= e * u.At(i, j)
			}
		}
	}
	diff := 0
	for i := range got {
		if got[i] != want[i] {
			diff++
		}
	}
	t.Logf("%d of %d codes differ from the textbook GPTQ", diff, len(got))
	if diff > len(got)/500 {
		t.Errorf("%d of %d codes differ from the textbook GPTQ", diff, len(got))
	}
}
