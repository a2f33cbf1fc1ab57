package kl

import (
	"context"
	"math"
	"testing"

	"github.com/lowbit-ai/lowbit/runtime"
)

// TestOfflineSelfIsZero: a model against itself gives exactly 0 KL, top-k
// estimates, Δ and hidden-state error at every position, and full top-1
// agreement.
func TestOfflineSelfIsZero(t *testing.T) {
	m := load(t, "bf16")
	for _, sample := range []int{0, 8} {
		res, err := Offline(context.Background(), m, m, testPrompts(t, 3, 20), OfflineOptions{SampleTokens: sample,
			Sampling: runtime.SamplingOptions{Temperature: 1, Seed: 3}, Chunk: 7, StudyK: []int{1, 100}})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Positions) == 0 {
			t.Fatal("no positions")
		}
		for _, p := range res.Positions {
			if p.KL != 0 || p.Union != 0 || p.Lower != 0 || p.Delta != 0 || p.RefTop1 != p.CandTop1 {
				t.Fatalf("sample %d: position %+v of a model against itself is not 0", sample, p)
			}
		}
		for _, l := range res.Layers {
			if l.NMSE != 0 {
				t.Errorf("layer %d NMSE %g against itself", l.Layer, l.NMSE)
			}
		}
	}
}

// fullRows runs ids through m in one forward and returns the log-softmax
// rows [len(ids), V].
func fullRows(t *testing.T, m *runtime.Model, ids []int) []float32 {
	t.Helper()
	lg, err := m.Forward(m.NewSequence(len(ids)), ids)
	if err != nil {
		t.Fatal(err)
	}
	m.Ops().LogSoftmax(lg, lg, len(ids), m.VocabSize())
	return lg
}

// TestOfflineTeacherForced checks each position's numbers against an
// independent recomputation from one whole-sequence forward per model, for
// two quantized candidates, whatever the chunking, and that the hidden-state
// error is positive and the candidates' KL differs from 0.
func TestOfflineTeacherForced(t *testing.T) {
	ref := load(t, "bf16")
	prompts := testPrompts(t, 3, 24)
	V := ref.VocabSize()
	for _, name := range []string{"nvfp4a16", "fp8-dynamic"} {
		cand := load(t, name)
		for _, chunk := range []int{5, 64} {
			res, err := Offline(context.Background(), ref, cand, prompts, OfflineOptions{K: 20, Chunk: chunk})
			if err != nil {
				t.Fatal(err)
			}
			want := 0
			for _, p := range prompts {
				want += len(p) - 1
			}
			if len(res.Positions) != want || res.Mode != ModeTeacherForced {
				t.Fatalf("%s: %d positions (%s), want %d teacher-forced", name, len(res.Positions), res.Mode, want)
			}
			rows := map[int][2][]float32{}
			var sum float64
			for _, p := range res.Positions {
				r, ok := rows[p.Prompt]
				if !ok {
					r = [2][]float32{fullRows(t, ref, prompts[p.Prompt]), fullRows(t, cand, prompts[p.Prompt])}
					rows[p.Prompt] = r
				}
				lp, lq := r[0][(p.Pos-1)*V:p.Pos*V], r[1][(p.Pos-1)*V:p.Pos*V]
				if p.Token != prompts[p.Prompt][p.Pos] {
					t.Fatalf("position %d of prompt %d: token %d, want %d", p.Pos, p.Prompt, p.Token, prompts[p.Prompt][p.Pos])
				}
				if kl := FullKL(lp, lq); p.KL != kl {
					t.Fatalf("%s chunk %d: prompt %d pos %d: KL %g, whole-sequence recomputation %g", name, chunk, p.Prompt, p.Pos, p.KL, kl)
				}
				ep, eq := EntryFromRow(lp, p.Token, TopK(lp, 20)), EntryFromRow(lq, p.Token, TopK(lq, 20))
				e, _ := Estimate(&ep, &eq, p.Token)
				if e.Union != p.Union || e.Lower != p.Lower || e.Delta != p.Delta {
					t.Fatalf("%s: estimates %+v, recomputed %+v", name, p.Estimates, e)
				}
				if p.Lower > p.KL+1e-6 {
					t.Errorf("%s: lower bound %g above the exact KL %g", name, p.Lower, p.KL)
				}
				sum += p.KL
			}
			if !(sum > 0) {
				t.Errorf("%s: total KL %g, want > 0 for a quantized model", name, sum)
			}
			if len(res.Layers) != 2 {
				t.Fatalf("%d layers, want 2", len(res.Layers))
			}
			for _, l := range res.Layers {
				if !(l.NMSE > 0 && l.NMSE < 1) {
					t.Errorf("%s: layer %d NMSE %g, want in (0, 1)", name, l.Layer, l.NMSE)
				}
			}
		}
	}
}

// TestOfflineSampledDeltaIsUnbiased: on the reference's own samples at
// temperature 1, the mean Δ log-likelihood estimates the KL without bias,
// so it must agree with the exact mean within its sampling error; and the
// continuation, not the prompt, is what is scored.
func TestOfflineSampledDeltaIsUnbiased(t *testing.T) {
	ref, cand := load(t, "bf16"), load(t, "nvfp4a16")
	prompts := testPrompts(t, 8, 6)
	// Unfiltered sampling sorts the whole vocabulary per token in the
	// runtime's sampler (about 30 ms here), which bounds the sample size.
	res, err := Offline(context.Background(), ref, cand, prompts, OfflineOptions{SampleTokens: 20,
		Sampling: runtime.SamplingOptions{Temperature: 1, Seed: 11}, StudyK: []int{1, 5, 100, 1000}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Mode != ModeSampled {
		t.Fatalf("mode %s", res.Mode)
	}
	for i, s := range res.Sequences {
		if s.From != len(prompts[i]) || len(s.IDs) <= s.From {
			t.Fatalf("sequence %d: from %d of %d tokens, prompt %d", i, s.From, len(s.IDs), len(prompts[i]))
		}
	}
	// Per position, d = Δ − KL has mean 0 given the prefix; the mean of d
	// over n positions is within 4 standard errors of 0.
	var n, sd, sd2, kl float64
	for _, p := range res.Positions {
		if p.Pos < res.Sequences[p.Prompt].From {
			t.Fatalf("position %d of prompt %d is in the prompt", p.Pos, p.Prompt)
		}
		d := p.Delta - p.KL
		n++
		sd += d
		sd2 += d * d
		kl += p.KL
	}
	mean := sd / n
	se := math.Sqrt((sd2/n - mean*mean) / (n - 1))
	t.Logf("%v positions: mean KL %.4f, mean Δ − KL %.4f ± %.4f", n, kl/n, mean, se)
	if math.Abs(mean) > 4*se {
		t.Errorf("mean Δ − KL = %.4f, more than 4 standard errors (%.4f) from 0: the samples are not the reference's", mean, se)
	}
	// The study: the lower bound grows with k and stays below the KL.
	prev := 0.0
	for _, r := range res.Study {
		if r.Lower.Mean < prev-1e-12 || r.Lower.Mean > r.KL+1e-6 {
			t.Errorf("k %d: mean lower bound %g (previous %g, KL %g)", r.K, r.Lower.Mean, prev, r.KL)
		}
		prev = r.Lower.Mean
	}
}

func TestOfflineErrors(t *testing.T) {
	ref := load(t, "bf16")
	for name, o := range map[string]OfflineOptions{
		"k":      {K: -1},
		"sample": {SampleTokens: -1},
		"study":  {StudyK: []int{0}},
		"temp":   {Sampling: runtime.SamplingOptions{Temperature: -1}},
	} {
		if _, err := Offline(context.Background(), ref, ref, [][]int{{1, 2}}, o); err == nil {
			t.Errorf("%s: bad options accepted", name)
		}
	}
	if _, err := Offline(context.Background(), ref, ref, [][]int{{}}, OfflineOptions{}); err == nil {
		t.Error("an empty prompt was accepted")
	}
	if _, err := Offline(context.Background(), ref, ref, [][]int{{1, 1 << 30}}, OfflineOptions{}); err == nil {
		t.Error("a token outside the vocabulary was accepted")
	}
}
