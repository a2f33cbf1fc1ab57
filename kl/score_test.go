package kl

import (
	"math"
	"slices"
	"testing"
)

// TestScore checks LowBArena's formula on hand-computed cases.
func TestScore(t *testing.T) {
	cases := []struct {
		name      string
		kl        float64
		in        ScoreInputs
		d, e, sc  float64
		final     float64
		failedAll []string
	}{
		// BF16 against itself scores 1 (its speed gate: 1 − 0.0475 ≥ 0.95).
		{"bf16", 0, ScoreInputs{Memory: 1, Speed: 1}, 0, 1, 1, 1, nil},
		// FP8-like: half the memory, 1.1× speed, 0.5 points and 0.02 nats.
		{"fp8", 0.02, ScoreInputs{AccDrop: 0.5, Memory: 2, Speed: 1.1},
			0.79*0.5 + 0.21*42.8*0.02, math.Sqrt(2.2), math.Sqrt(2.2) * math.Exp(-(0.395+0.17976)/10), math.Sqrt(2.2) * math.Exp(-(0.395+0.17976)/10), nil},
		// Longer output is charged in E; a negative D is not rewarded.
		{"longer", 0, ScoreInputs{AccDrop: -1, Memory: 1, Speed: 1, Length: 0.05}, -0.79, math.Sqrt(1 / 1.05), math.Sqrt(1 / 1.05), math.Sqrt(1 / 1.05), nil},
		// Failed gates keep 0.1.
		{"slow", 0.01, ScoreInputs{Memory: 3, Speed: 0.9}, 0.21 * 42.8 * 0.01, math.Sqrt(2.7), math.Sqrt(2.7) * math.Exp(-0.08988/10), 0.1 * math.Sqrt(2.7) * math.Exp(-0.08988/10), []string{"speed"}},
		{"accuracy+length", 0, ScoreInputs{AccDrop: 6, Memory: 1, Speed: 1, Length: -0.2}, 0.79 * 6, 1, math.Exp(-0.474), 0.1 * math.Exp(-0.474), []string{"accuracy", "length"}},
		// Over the contract's KL: 0.
		{"kl contract", 0.2, ScoreInputs{Memory: 2, Speed: 2}, 0.21 * 42.8 * 0.2, 2, 2 * math.Exp(-1.7976/10), 0, []string{"kl-contract"}},
	}
	for _, c := range cases {
		s, err := NewScore(c.kl, c.kl, c.kl, c.in)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		for _, x := range []struct {
			what      string
			got, want float64
		}{{"D", s.D, c.d}, {"E", s.E, c.e}, {"LowBScore", s.LowBScore, c.sc}, {"final", s.Final, c.final}} {
			if math.Abs(x.got-x.want) > 1e-9 {
				t.Errorf("%s: %s = %.10g, want %.10g", c.name, x.what, x.got, x.want)
			}
		}
		if !slices.Equal(s.Failed, c.failedAll) {
			t.Errorf("%s: failed gates %v, want %v", c.name, s.Failed, c.failedAll)
		}
	}
	s, _ := NewScore(0.1, 0.05, 0.16, ScoreInputs{Memory: 2, Speed: 1.2})
	if !(s.FinalLo == 0 && s.FinalHi > s.Final && s.Final > 0) {
		t.Errorf("score over the KL interval: %g ≤ %g ≤ %g", s.FinalLo, s.Final, s.FinalHi)
	}
	for _, in := range []ScoreInputs{{Memory: 0, Speed: 1}, {Memory: 1, Speed: -1}, {Memory: 1, Speed: 1, Length: -1}, {Memory: 1, Speed: 1, AccDrop: math.NaN()}} {
		if _, err := NewScore(0, 0, 0, in); err == nil {
			t.Errorf("inputs %+v accepted", in)
		}
	}
}
