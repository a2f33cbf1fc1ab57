package runtime

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestTopLogitsOf: the listed entries are TopK's, with their logits and
// log-probabilities, and every listed id ranks as Rank ranks it on the
// whole row — also where entries tie at the end of the list.
func TestTopLogitsOf(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	for trial := range 40 {
		V, k := 50+rng.IntN(300), 1+rng.IntN(12)
		row := make([]float32, V)
		for i := range row {
			row[i] = float32(rng.IntN(8)) // many ties
		}
		if trial%2 == 1 {
			for i := range row {
				row[i] = float32(rng.NormFloat64() * 3)
			}
		}
		lp := make([]float32, V)
		var sum float64
		for _, v := range row {
			sum += math.Exp(float64(v))
		}
		for i, v := range row {
			lp[i] = float32(float64(v) - math.Log(sum))
		}
		top := TopLogitsOf(row, lp, k)
		ids := TopK(row, k)
		if len(top.IDs) != len(ids) {
			t.Fatalf("trial %d: %d entries, want %d", trial, len(top.IDs), len(ids))
		}
		for i, id := range ids {
			if int(top.IDs[i]) != id || top.Logits[i] != row[id] || top.Logprobs[i] != lp[id] {
				t.Fatalf("trial %d: entry %d = (%d, %v, %v), want (%d, %v, %v)", trial, i, top.IDs[i], top.Logits[i], top.Logprobs[i], id, row[id], lp[id])
			}
			if got, want := top.Rank(i, V), Rank(lp, id); got != want {
				t.Fatalf("trial %d: rank of entry %d (id %d) = %d, want %d", trial, i, id, got, want)
			}
		}
	}
}

// TestSampleTop: from a row's TopLogits, SampleTop draws the tokens Sample
// draws from the whole row, draw after draw (the generator in step), for
// greedy and top-k options with and without top-p, min-p and ties.
func TestSampleTop(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 6))
	opts := []SamplingOptions{
		{},
		{Temperature: 0.6, TopK: 20, TopP: 0.95, Seed: 1},
		{Temperature: 1, TopK: 5, Seed: 2},
		{Temperature: 1.5, TopK: 40, MinP: 0.1, Seed: 3},
		{Temperature: 0.3, TopK: 1, Seed: 4},
	}
	for _, o := range opts {
		a, b := NewSampler(o), NewSampler(o)
		k := b.TopSampleable()
		if k == 0 {
			t.Fatalf("%+v: TopSampleable 0, want the top-k", o)
		}
		for draw := range 200 {
			V := 100 + rng.IntN(2000)
			row := make([]float32, V)
			for i := range row {
				row[i] = float32(rng.NormFloat64() * 2)
				if draw%3 == 0 {
					row[i] = float32(rng.IntN(6)) // ties
				}
			}
			top := TopLogitsOf(row, row, k)
			if got, want := b.SampleTop(top.IDs, top.Logits), a.Sample(row); got != want {
				t.Fatalf("%+v, draw %d: SampleTop %d, Sample %d", o, draw, got, want)
			}
		}
	}
	for _, o := range []SamplingOptions{{Temperature: 1}, {Temperature: 1, TopP: 0.9}, {Temperature: 1, MinP: 0.2}} {
		if k := NewSampler(o).TopSampleable(); k != 0 {
			t.Errorf("%+v: TopSampleable %d, want 0 (the whole row is needed)", o, k)
		}
	}
}
