package calibrate

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// TestSiteAgainstNaive folds random samples into a site and compares every
// statistic with a plain float64 computation over all tokens at once.
func TestSiteAgainstNaive(t *testing.T) {
	const n = 13
	r := rand.New(rand.NewPCG(1, 2))
	s := newSite(n, new([]float32))
	var all [][]float32
	for _, T := range []int{1, 7, 3, 20} {
		x := make([]float32, T*n)
		for i := range x {
			x[i] = float32(r.NormFloat64() * float64(1+i%n))
		}
		if err := s.add(x, T); err != nil {
			t.Fatal(err)
		}
		for k := range T {
			all = append(all, x[k*n:(k+1)*n])
		}
	}
	l := s.linear("model.layers.0.mlp.down_proj")
	if l.HessianTokens != int64(len(all)) || s.tokens != int64(len(all)) {
		t.Fatalf("tokens %d, %d, want %d", l.HessianTokens, s.tokens, len(all))
	}
	row := make([]float32, n)
	var total float32
	for c := range n {
		var amax float32
		var sum float64
		for _, x := range all {
			amax = max(amax, float32(math.Abs(float64(x[c]))))
			sum += math.Abs(float64(x[c]))
		}
		total = max(total, amax)
		if l.ChannelAbsMax[c] != amax {
			t.Errorf("channel %d absmax %v, want %v", c, l.ChannelAbsMax[c], amax)
		}
		if want := float32(sum / float64(len(all))); math.Abs(float64(l.MeanAbs[c]-want)) > 1e-6*float64(want) {
			t.Errorf("channel %d mean |x| %v, want %v", c, l.MeanAbs[c], want)
		}
		if err := l.Hessian(c, row); err != nil {
			t.Fatal(err)
		}
		for j := range n {
			var h float64
			for _, x := range all {
				h += float64(x[c]) * float64(x[j])
			}
			if math.Abs(float64(row[j])-h) > 1e-5*math.Abs(h)+1e-6 {
				t.Errorf("H[%d, %d] = %v, want %v", c, j, row[j], h)
			}
		}
	}
	if l.InputAbsMax != total {
		t.Errorf("input absmax %v, want %v", l.InputAbsMax, total)
	}
}

func TestSiteRejectsNonFinite(t *testing.T) {
	for _, v := range []float32{float32(math.NaN()), float32(math.Inf(-1))} {
		s := newSite(4, new([]float32))
		x := []float32{1, 2, 3, 4, 5, 6, v, 8}
		err := s.add(x, 2)
		var nf *nonFiniteError
		if !errors.As(err, &nf) || nf.token != 1 || nf.channel != 2 {
			t.Errorf("%v: err = %v, want token 1 channel 2", v, err)
		}
		if s.tokens != 0 || s.absmax[0] != 0 || s.h[0] != 0 {
			t.Errorf("%v: a rejected sample changed the statistics", v)
		}
	}
}

func TestKVSite(t *testing.T) {
	s := &kvSite{heads: 2, headDim: 2, kHead: make([]float32, 2)}
	// Two tokens of [head0: 2 dims, head1: 2 dims].
	if err := s.addK([]float32{1, -5, 2, 0.5, -3, 1, -7, 2}, 2); err != nil {
		t.Fatal(err)
	}
	if err := s.addV([]float32{1, -9, 2, 3}, 1); err != nil {
		t.Fatal(err)
	}
	a := s.attention("model.layers.3.self_attn")
	if a.KHeadAbsMax[0] != 5 || a.KHeadAbsMax[1] != 7 || a.KAbsMax != 7 || a.VAbsMax != 9 {
		t.Errorf("got %+v", a)
	}
	if err := s.addV([]float32{float32(math.NaN())}, 1); err == nil {
		t.Error("NaN value accepted")
	}
}
