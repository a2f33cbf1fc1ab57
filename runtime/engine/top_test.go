package engine

import (
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/lowbit-ai/lowbit/kernels"
	"github.com/lowbit-ai/lowbit/runtime"
)

// hostTop is a runtime.TopExecutor on the CPU: the rows of a KVPool, each
// reduced to its TopLogits on the host with the model's LogSoftmax (what a
// GPU executor computes on the device). tops counts the rows it reduced.
type hostTop struct {
	*runtime.KVPool
	m    *runtime.Model
	tops *atomic.Int64
}

func (h hostTop) TopMax() int { return 64 }

func (h hostTop) ForwardTop(batch []runtime.BatchEntry, k int, full []bool, dst []float32) ([]float32, []runtime.TopLogits, error) {
	logits, err := h.Forward(batch)
	if err != nil {
		return nil, nil, err
	}
	V := h.m.VocabSize()
	rows := dst[:0]
	tops := make([]runtime.TopLogits, len(full))
	lp := make([]float32, V)
	for r, whole := range full {
		row := logits[r*V : (r+1)*V]
		if whole {
			rows = append(rows, row...)
			continue
		}
		h.m.Ops().LogSoftmax(lp, row, 1, V)
		tops[r] = runtime.TopLogitsOf(row, lp, k)
		h.tops.Add(1)
	}
	return rows, tops, nil
}

// TestTopLogits: an engine over a TopExecutor gives every request exactly
// what it gets from whole rows — tokens, log-probabilities with ranks,
// prompt log-probabilities, finish — alone and in a batch where some rows
// come back whole and others as TopLogits: greedy and top-k sampling use
// the best entries; top-p alone, min_tokens with stop tokens, prompt
// log-probabilities and a top-k past 64 use whole rows.
func TestTopLogits(t *testing.T) {
	m := tinyModel(t)
	rng := rand.New(rand.NewPCG(9, 9))
	reqs := []*Request{
		{Prompt: randomPrompt(rng, 20), MaxTokens: 8, Logprobs: 3, PromptLogprobs: -1},
		{Prompt: randomPrompt(rng, 33), MaxTokens: 9, Logprobs: 0, PromptLogprobs: -1,
			Sampling: runtime.SamplingOptions{Temperature: 0.6, TopK: 20, TopP: 0.95, Seed: 1}},
		{Prompt: randomPrompt(rng, 12), MaxTokens: 6, Logprobs: 5, PromptLogprobs: -1,
			Sampling: runtime.SamplingOptions{Temperature: 1.3, TopK: 40, MinP: 0.05, Seed: 2}},
		{Prompt: randomPrompt(rng, 17), MaxTokens: 6, Logprobs: -1, PromptLogprobs: -1,
			Sampling: runtime.SamplingOptions{Temperature: 1, TopP: 0.9, Seed: 3}},
		{Prompt: randomPrompt(rng, 9), MaxTokens: 7, MinTokens: 3, Logprobs: 1, PromptLogprobs: -1,
			Sampling: runtime.SamplingOptions{Temperature: 1, TopK: 5, Seed: 4}},
		{Prompt: randomPrompt(rng, 25), MaxTokens: 5, Logprobs: 2, PromptLogprobs: 2},
		{Prompt: randomPrompt(rng, 8), MaxTokens: 0, Logprobs: -1, PromptLogprobs: 1},
		{Prompt: randomPrompt(rng, 14), MaxTokens: 5, Logprobs: -1, PromptLogprobs: -1,
			Sampling: runtime.SamplingOptions{Temperature: 0.8, TopK: 70, Seed: 5}},
	}
	// Request 4's stop tokens: whatever its first greedy-free draws are, a
	// few ids so that MinTokens has something to hold back.
	reqs[4].StopTokenIDs = []int{0, 1, 2, 3}
	var tops atomic.Int64
	topCfg := Config{MaxNumBatchedTokens: 40, NewExecutor: func(blocks, bs int, dt kernels.KVDType) (runtime.Executor, error) {
		p, err := m.NewKVPool(blocks, bs, dt)
		return hostTop{p, m, &tops}, err
	}}
	want := make([]result, len(reqs))
	for i, r := range reqs {
		want[i] = run(t, newEngine(t, m, Config{}), r)
	}
	alone, together, _ := aloneAndTogether(t, m, topCfg, topCfg, reqs)
	if tops.Load() == 0 {
		t.Fatal("no row came back as TopLogits")
	}
	for i := range reqs {
		for name, got := range map[string]result{"alone": alone[i], "together": together[i]} {
			w := want[i]
			if !slices.Equal(got.tokens, w.tokens) || !equalLP(got.prompt, w.prompt) || !slices.EqualFunc(got.logprobs, w.logprobs, equalPos) ||
				got.finish != w.finish || got.stop != w.stop {
				t.Errorf("request %d %s: tokens %v finish %q, want %v %q from whole rows", i, name, got.tokens, got.finish, w.tokens, w.finish)
			}
		}
	}
	t.Logf("%d rows as TopLogits", tops.Load())
}
