package runtime

import (
	"math"
	"slices"
	"testing"
)

// logitsOf returns log(p) for the given probabilities (-Inf for 0).
func logitsOf(p ...float64) []float32 {
	l := make([]float32, len(p))
	for i, v := range p {
		l[i] = float32(math.Log(v))
	}
	return l
}

// TestSampleDistribution draws many tokens and compares the frequencies
// with the distribution each option should leave.
func TestSampleDistribution(t *testing.T) {
	tests := []struct {
		name   string
		logits []float32
		opts   SamplingOptions
		want   []float64 // probability of each id
	}{
		{"greedy", []float32{1, 3, 2, 3}, SamplingOptions{}, []float64{0, 1, 0, 0}},
		{"greedy ignores the rest", []float32{1, 3, 2}, SamplingOptions{TopK: 3, TopP: 0.5, Seed: 9}, []float64{0, 1, 0}},
		{"temperature 1", logitsOf(0.5, 0.3, 0.2), SamplingOptions{Temperature: 1}, []float64{0.5, 0.3, 0.2}},
		{"temperature 0.5 squares", logitsOf(0.5, 0.3, 0.2), SamplingOptions{Temperature: 0.5},
			[]float64{0.25 / 0.38, 0.09 / 0.38, 0.04 / 0.38}},
		{"top-k 2", logitsOf(0.4, 0.3, 0.2, 0.1), SamplingOptions{Temperature: 1, TopK: 2}, []float64{4.0 / 7, 3.0 / 7, 0, 0}},
		{"top-k 1", logitsOf(0.2, 0.5, 0.3), SamplingOptions{Temperature: 1, TopK: 1}, []float64{0, 1, 0}},
		{"top-k above vocab", logitsOf(0.5, 0.5), SamplingOptions{Temperature: 1, TopK: 9}, []float64{0.5, 0.5}},
		{"top-p 0.7 keeps 2", logitsOf(0.5, 0.3, 0.2), SamplingOptions{Temperature: 1, TopP: 0.7}, []float64{0.625, 0.375, 0}},
		{"top-p 0.8 keeps 2", logitsOf(0.5, 0.3, 0.2), SamplingOptions{Temperature: 1, TopP: 0.8}, []float64{0.625, 0.375, 0}},
		{"top-p 0.1 keeps 1", logitsOf(0.3, 0.5, 0.2), SamplingOptions{Temperature: 1, TopP: 0.1}, []float64{0, 1, 0}},
		{"top-p 1 is off", logitsOf(0.5, 0.3, 0.2), SamplingOptions{Temperature: 1, TopP: 1}, []float64{0.5, 0.3, 0.2}},
		{"min-p 0.5", logitsOf(0.5, 0.3, 0.2), SamplingOptions{Temperature: 1, MinP: 0.5}, []float64{0.625, 0.375, 0}},
		{"min-p 1 keeps the max", logitsOf(0.2, 0.5, 0.3), SamplingOptions{Temperature: 1, MinP: 1}, []float64{0, 1, 0}},
		// top-k renormalizes before top-p: 0.4/0.7 = 0.57 >= 0.5 keeps one
		// token, where top-p first would keep two.
		{"top-k before top-p", logitsOf(0.4, 0.3, 0.2, 0.1), SamplingOptions{Temperature: 1, TopK: 2, TopP: 0.5}, []float64{1, 0, 0, 0}},
		// top-p before min-p: top-p 0.9 keeps 0.4, 0.3, 0.2; min-p 0.6 of
		// 0.4 then drops 0.2.
		{"top-p before min-p", logitsOf(0.4, 0.3, 0.2, 0.1), SamplingOptions{Temperature: 1, TopP: 0.9, MinP: 0.6}, []float64{4.0 / 7, 3.0 / 7, 0, 0}},
		{"-Inf logit never drawn", []float32{0, float32(math.Inf(-1)), 0}, SamplingOptions{Temperature: 1}, []float64{0.5, 0, 0.5}},
	}
	const n = 20000
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.opts.Validate(); err != nil {
				t.Fatal(err)
			}
			s := NewSampler(tt.opts)
			counts := make([]float64, len(tt.logits))
			for range n {
				counts[s.Sample(tt.logits)]++
			}
			for id, p := range tt.want {
				got := counts[id] / n
				// 4.5 standard deviations of a binomial frequency.
				tol := 4.5 * math.Sqrt(p*(1-p)/n)
				if math.Abs(got-p) > tol || (p == 0 && got != 0) {
					t.Errorf("id %d drawn with frequency %.4f, want %.4f ± %.4f", id, got, p, tol)
				}
			}
		})
	}
}

func TestSampleDeterministic(t *testing.T) {
	logits := make([]float32, 5000)
	for i := range logits {
		logits[i] = float32(math.Sin(float64(i)*0.37)) * 2
	}
	draw := func(o SamplingOptions) []int {
		s := NewSampler(o)
		ids := make([]int, 50)
		for i := range ids {
			ids[i] = s.Sample(logits)
		}
		return ids
	}
	for _, o := range []SamplingOptions{
		{Temperature: 0.8, Seed: 1},
		{Temperature: 1, TopK: 20, Seed: 1},
		{Temperature: 1, TopP: 0.95, Seed: 1},
		{Temperature: 0.6, TopK: 20, TopP: 0.95, MinP: 0.05, Seed: 1},
	} {
		a, b := draw(o), draw(o)
		if !slices.Equal(a, b) {
			t.Errorf("%+v: two samplers with one seed drew %v and %v", o, a, b)
		}
		o.Seed = 2
		if c := draw(o); slices.Equal(a, c) {
			t.Errorf("%+v: seeds 1 and 2 drew the same 50 tokens", o)
		}
	}
}

// TestSampleTopPWide checks top-p when the 1024 preselected tokens hold
// too little mass: with 5000 equal logits, top-p 0.8995 keeps 4498 tokens
// (4497.5 tokens' worth of mass, rounded up).
func TestSampleTopPWide(t *testing.T) {
	logits := make([]float32, 5000)
	s := NewSampler(SamplingOptions{Temperature: 1, TopP: 0.8995, Seed: 3})
	seen := 0
	for range 2000 {
		id := s.Sample(logits)
		if id >= 4498 {
			t.Fatalf("drew id %d; top-p 0.8995 of 5000 equal logits keeps ids below 4498", id)
		}
		if id >= preselect {
			seen++
		}
	}
	if seen < 1000 {
		t.Errorf("only %d of 2000 draws beyond the preselected 1024 ids; want about 1550", seen)
	}
}

func TestSamplingValidate(t *testing.T) {
	for _, o := range []SamplingOptions{
		{Temperature: -1}, {Temperature: math.NaN()}, {Temperature: math.Inf(1)},
		{TopP: -0.1}, {TopP: 1.5}, {TopK: -1}, {MinP: -1}, {MinP: 2},
	} {
		if o.Validate() == nil {
			t.Errorf("%+v: Validate accepted it", o)
		}
	}
	if err := (SamplingOptions{Temperature: 0.6, TopP: 0.95, TopK: 20}).Validate(); err != nil {
		t.Errorf("Qwen3 defaults: %v", err)
	}
}
