package kl

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestTopK(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	row := make([]float32, 3000)
	for i := range row {
		row[i] = float32(rng.IntN(200)) // many ties
	}
	all := make([]int, len(row))
	for i := range all {
		all[i] = i
	}
	slices.SortFunc(all, func(a, b int) int { return cmp.Or(cmp.Compare(row[b], row[a]), cmp.Compare(a, b)) })
	for _, k := range []int{0, 1, 5, 20, 2999, 3000, 5000, -1} {
		got := TopK(row, k)
		want := all[:min(max(k, 0), len(all))]
		if k < 0 || k > len(all) {
			want = all
		}
		if !slices.Equal(got, want) {
			t.Errorf("TopK(k=%d) differs from a full sort", k)
		}
	}
}

// TestEntryFromRow checks vLLM's dict semantics: the actual token with its
// true rank (the count of entries >= it), top ids ranked 1..k, and the top
// rank winning when the actual token is among them.
func TestEntryFromRow(t *testing.T) {
	row := []float32{-1, -3, -0.5, -3, -2}
	cases := []struct {
		actual, k int
		want      []Logprob // by id
	}{
		{1, 2, []Logprob{{ID: 0, Logprob: -1, Rank: 2}, {ID: 1, Logprob: -3, Rank: 5}, {ID: 2, Logprob: -0.5, Rank: 1}}},
		{0, 2, []Logprob{{ID: 0, Logprob: -1, Rank: 2}, {ID: 2, Logprob: -0.5, Rank: 1}}},
		{3, 0, []Logprob{{ID: 3, Logprob: -3, Rank: 5}}},
		{3, 4, []Logprob{{ID: 0, Logprob: -1, Rank: 2}, {ID: 1, Logprob: -3, Rank: 4}, {ID: 2, Logprob: -0.5, Rank: 1},
			{ID: 3, Logprob: -3, Rank: 5}, {ID: 4, Logprob: -2, Rank: 3}}},
	}
	for _, c := range cases {
		e := EntryFromRow(row, c.actual, TopK(row, c.k))
		if !slices.Equal(e.Tokens, c.want) {
			t.Errorf("actual %d k %d: %+v, want %+v", c.actual, c.k, e.Tokens, c.want)
		}
	}
}

// entry builds an Entry from (id, probability) pairs.
func entry(pairs ...float64) *Entry {
	e := &Entry{}
	for i := 0; i < len(pairs); i += 2 {
		e.Tokens = append(e.Tokens, Logprob{ID: int(pairs[i]), Logprob: math.Log(pairs[i+1]), Rank: 1 + i/2})
	}
	slices.SortFunc(e.Tokens, func(a, b Logprob) int { return a.ID - b.ID })
	return e
}

// TestEstimateHand checks the three estimators on dicts small enough to
// work out by hand.
func TestEstimateHand(t *testing.T) {
	cases := []struct {
		name                string
		p, q                *Entry
		actual              int
		union, lower, delta float64
	}{
		{"identical full", entry(0, 0.5, 1, 0.5), entry(0, 0.5, 1, 0.5), 0, 0, 0, 0},
		{"full vocabulary", entry(0, 0.5, 1, 0.5), entry(0, 0.25, 1, 0.75), 1,
			0.5*math.Log(2) + 0.5*math.Log(0.5/0.75), 0.5*math.Log(2) + 0.5*math.Log(0.5/0.75), math.Log(0.5 / 0.75)},
		// P lists {0: .6, 1: .3} (tail .1); Q lists {0: .6, 2: .3} (tail .1).
		// Union: 0 → 0; 1 → .3 log(.3/eps); 2 → 0 (p = 0); tails equal → 0.
		// Lower: Q can give token 1 at most its tail .1, P token 2 at most
		// .1, so the closest pair is (.6, .3, .1) against (.6, .1, .3).
		{"disjoint borders", entry(0, 0.6, 1, 0.3), entry(0, 0.6, 2, 0.3), 0, 0.3 * math.Log(0.3/Eps),
			0.3*math.Log(0.3/0.1) + 0.1*math.Log(0.1/0.3), 0},
		// Token 1 (P .2) can have at most Q's unlisted mass .1, token 2
		// (Q .4) at most P's .1: the closest pair the dicts allow is
		// P = (.7, .2, .1), Q = (.5, .1, .4) on tokens 0, 1, 2 (the merged
		// bucket alone would give .7 log(.7/.5) + .3 log(.3/.5) = .082).
		{"lower bound", entry(0, 0.7, 1, 0.2), entry(0, 0.5, 2, 0.4), 0,
			0.7*math.Log(0.7/0.5) + 0.2*math.Log(0.2/Eps) + 0.1*math.Log(0.1/0.1),
			0.7*math.Log(0.7/0.5) + 0.2*math.Log(0.2/0.1) + 0.1*math.Log(0.1/0.4), math.Log(0.7 / 0.5)},
		// Token 1 needs only Q-mass .0625 of the .25 Q leaves unlisted to
		// match the ratio of everything outside {0, 3}: the bound is the KL
		// of {0, 3, rest}.
		{"merged", entry(0, 0.5, 3, 0.3, 1, 0.05), entry(0, 0.4, 3, 0.35), 0,
			0.5*math.Log(0.5/0.4) + 0.3*math.Log(0.3/0.35) + 0.05*math.Log(0.05/Eps) + 0.15*math.Log(0.15/0.25),
			0.5*math.Log(0.5/0.4) + 0.3*math.Log(0.3/0.35) + 0.2*math.Log(0.2/0.25), math.Log(0.5 / 0.4)},
	}
	for _, c := range cases {
		e, err := Estimate(c.p, c.q, c.actual)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		for _, x := range []struct {
			what      string
			got, want float64
		}{{"union", e.Union, c.union}, {"lower", e.Lower, c.lower}, {"delta", e.Delta, c.delta}} {
			if math.Abs(x.got-x.want) > 1e-9 {
				t.Errorf("%s: %s = %.12g, want %.12g", c.name, x.what, x.got, x.want)
			}
		}
	}
	if _, err := Estimate(entry(0, 1), entry(1, 1), 1); err == nil {
		t.Error("a reference dict without the actual token was accepted")
	}
	if _, err := Estimate(entry(0, 1), entry(1, 1), 0); err == nil {
		t.Error("a candidate dict without the actual token was accepted")
	}
}

// TestEstimatorsAgainstTruth draws pairs of large-vocabulary rows and
// checks the estimators' promises at every k: the lower bound never
// exceeds the exact KL and grows with k; at k = V the union and the lower
// bound are the exact KL; identical rows give 0 everywhere.
func TestEstimatorsAgainstTruth(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const V = 5000
	for trial := range 20 {
		scale := []float64{0.5, 2, 6}[trial%3]
		pl := randLogits(rng, V, scale)
		ql := make([]float32, V)
		for i := range ql {
			ql[i] = pl[i] + float32(rng.NormFloat64()*0.3)
		}
		p, q := logSoftmax(t, pl), logSoftmax(t, ql)
		exact := FullKL(p, q)
		actual := rng.IntN(V)
		tp, tq := TopK(p, -1), TopK(q, -1)
		prevLower := -1.0
		for _, k := range []int{1, 5, 20, 100, 1000, V} {
			ep, eq := EntryFromRow(p, actual, tp[:k]), EntryFromRow(q, actual, tq[:k])
			e, err := Estimate(&ep, &eq, actual)
			if err != nil {
				t.Fatal(err)
			}
			if e.Lower > exact+1e-6 {
				t.Errorf("trial %d k %d: lower bound %g > exact KL %g", trial, k, e.Lower, exact)
			}
			if ib := intersectionBound(&ep, &eq); e.Lower < ib-1e-9 {
				t.Errorf("trial %d k %d: lower bound %g below the one-bucket bound %g", trial, k, e.Lower, ib)
			}
			if e.Lower < prevLower-1e-9 {
				t.Errorf("trial %d k %d: lower bound %g fell from %g at a smaller k", trial, k, e.Lower, prevLower)
			}
			prevLower = e.Lower
			if want := float64(p[actual] - q[actual]); e.Delta != want {
				t.Errorf("trial %d: delta %g, want %g", trial, e.Delta, want)
			}
			if k == V {
				for name, v := range map[string]float64{"union": e.Union, "lower": e.Lower} {
					if math.Abs(v-exact) > 1e-5 {
						t.Errorf("trial %d: %s at k = V is %g, exact KL %g", trial, name, v, exact)
					}
				}
			}
			self, _ := Estimate(&ep, &ep, actual)
			if self.Union != 0 || self.Lower != 0 || self.Delta != 0 {
				t.Errorf("trial %d k %d: estimates of P against itself %+v, want 0", trial, k, self)
			}
		}
	}
}

// intersectionBound is the KL of the tokens both dicts list plus one bucket
// for everything else: the coarsest lower bound, which Estimate's must not
// fall below.
func intersectionBound(p, q *Entry) float64 {
	var kl, mp, mq float64
	for _, a := range p.Tokens {
		if b, ok := q.Lookup(a.ID); ok {
			pa, qb := math.Exp(a.Logprob), math.Exp(b.Logprob)
			kl += term(pa, qb)
			mp += pa
			mq += qb
		}
	}
	return kl + term(max(0, 1-mp), max(0, 1-mq))
}
