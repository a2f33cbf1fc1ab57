//go:build cgo

package engine

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/lowbit-ai/lowbit/kernels"
	"github.com/lowbit-ai/lowbit/kernels/cuda"
	"github.com/lowbit-ai/lowbit/runtime"
)

// TestCUDAEngine serves requests on the GPU executor: together they give
// the same results as alone, bit for bit, and the CPU engine's prompt
// log-probabilities within float32 summation-order differences. Skips
// without a GPU.
func TestCUDAEngine(t *testing.T) {
	d, err := cuda.Open(cuda.Options{})
	if errors.Is(err, cuda.ErrNoDevice) {
		t.Skipf("no GPU: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	// Cleanups run last-in first-out: the device closes after the engines
	// (newEngine's cleanups) that use it.
	t.Cleanup(func() { d.Close() })
	m := tinyModel(t)
	onGPU := func(blocks, bs int, dt kernels.KVDType) (runtime.Executor, error) {
		return runtime.NewCUDAExecutor(m, d, blocks, bs, dt)
	}
	rng := rand.New(rand.NewPCG(9, 9))
	var reqs []*Request
	for i := range 6 {
		r := &Request{Prompt: randomPrompt(rng, 5+rng.IntN(60)), MaxTokens: 8, PromptLogprobs: 2, Logprobs: 1}
		if i%2 == 1 {
			r.Sampling = runtime.SamplingOptions{Temperature: 1, TopK: 50, Seed: uint64(i)}
		}
		reqs = append(reqs, r)
	}
	cfg := Config{KVCacheDType: "auto", NewExecutor: onGPU, MaxNumBatchedTokens: 40}
	alone, together, _ := aloneAndTogether(t, m, cfg, cfg, reqs)
	cpuCfg := cfg
	cpuCfg.NewExecutor = nil
	for i, r := range reqs {
		a, b := alone[i], together[i]
		if !slices.Equal(a.tokens, b.tokens) || !equalLP(a.prompt, b.prompt) {
			t.Errorf("request %d on the GPU: batched %v, alone %v", i, b.tokens, a.tokens)
		}
		c := run(t, newEngine(t, m, cpuCfg), r)
		var worst float64
		for p := 1; p < len(c.prompt); p++ {
			worst = max(worst, math.Abs(float64(c.prompt[p].Token.Logprob-a.prompt[p].Token.Logprob)))
		}
		t.Logf("request %d: max |Δ prompt logprob| GPU vs CPU %.3g", i, worst)
		if worst > 1e-3 {
			t.Errorf("request %d: prompt logprobs differ from the CPU's by %.3g, want <= 1e-3", i, worst)
		}
	}
}
