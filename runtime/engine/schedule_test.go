package engine

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/lowbit-ai/lowbit/kernels"
	"github.com/lowbit-ai/lowbit/runtime"
)

// stepRecorder is an Executor that notes, for every step, whether it ran
// prompt rows and whether it ran generated rows.
type stepRecorder struct {
	runtime.Executor
	mu    sync.Mutex
	steps []stepKinds
}

type stepKinds struct{ prompt, generated bool }

func (r *stepRecorder) Forward(batch []runtime.BatchEntry) ([]float32, error) {
	var k stepKinds
	for _, b := range batch {
		k.prompt = k.prompt || b.Prompt > 0
		k.generated = k.generated || len(b.Tokens) > b.Prompt
	}
	r.mu.Lock()
	r.steps = append(r.steps, k)
	r.mu.Unlock()
	return r.Executor.Forward(batch)
}

func (r *stepRecorder) mixedSteps() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, k := range r.steps {
		if k.prompt && k.generated {
			n++
		}
	}
	return n
}

// TestScheduling: under PrefillFirst no step runs generated tokens beside a
// prompt chunk, where Mixed does, and every request gets the tokens and
// log-probabilities it gets alone under either policy.
func TestScheduling(t *testing.T) {
	m := tinyModel(t)
	rng := rand.New(rand.NewPCG(9, 9))
	// The first request decodes while the others' prompts, 3 to 5 steps
	// of 16 tokens each, are computed.
	reqs := []*Request{{Prompt: randomPrompt(rng, 10), MaxTokens: 120, Logprobs: 1, PromptLogprobs: -1}}
	for range 5 {
		reqs = append(reqs, &Request{Prompt: randomPrompt(rng, 40+rng.IntN(40)), MaxTokens: 6, Logprobs: 1, PromptLogprobs: -1})
	}
	alone := make([]result, len(reqs))
	for i, r := range reqs {
		alone[i] = run(t, newEngine(t, m, Config{}), r)
	}
	for _, tc := range []struct {
		policy    Scheduling
		wantMixed bool
	}{{Mixed, true}, {PrefillFirst, false}} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			rec := &stepRecorder{}
			e := newEngine(t, m, Config{MaxNumBatchedTokens: 16, Scheduling: tc.policy,
				NewExecutor: func(blocks, bs int, dt kernels.KVDType) (runtime.Executor, error) {
					pool, err := m.NewKVPool(blocks, bs, dt)
					rec.Executor = pool
					return rec, err
				}})
			first, err := e.Submit(context.Background(), reqs[0])
			if err != nil {
				t.Fatal(err)
			}
			got := make([]result, len(reqs))
			// The others arrive once the first has its first token.
			o := <-first
			var wg sync.WaitGroup
			for i, r := range reqs[1:] {
				wg.Go(func() { got[i+1] = run(t, e, r) })
			}
			got[0] = collect(t, first)
			wg.Wait()
			got[0].tokens = append(slices.Clone(o.Tokens), got[0].tokens...)
			got[0].logprobs = append(slices.Clone(o.Logprobs), got[0].logprobs...)
			for i := range reqs {
				if !slices.Equal(alone[i].tokens, got[i].tokens) || !slices.EqualFunc(alone[i].logprobs, got[i].logprobs, equalPos) {
					t.Errorf("request %d: %v, alone %v", i, got[i].tokens, alone[i].tokens)
				}
			}
			if mixed := rec.mixedSteps(); (mixed > 0) != tc.wantMixed {
				t.Errorf("%d of %d steps ran prompt and generated rows together; want some: %v", mixed, len(rec.steps), tc.wantMixed)
			}
		})
	}
}

func TestParseScheduling(t *testing.T) {
	for _, tc := range []struct {
		in             string
		promptNumerics bool
		want           Scheduling
		ok             bool
	}{
		{"auto", false, Mixed, true},
		{"", true, PrefillFirst, true},
		{"auto", true, PrefillFirst, true},
		{"mixed", true, Mixed, true},
		{"prefill-first", false, PrefillFirst, true},
		{"fcfs", false, 0, false},
	} {
		got, err := ParseScheduling(tc.in, tc.promptNumerics)
		if (err == nil) != tc.ok || (tc.ok && got != tc.want) {
			t.Errorf("ParseScheduling(%q, %v) = %v, %v; want %v, ok %v", tc.in, tc.promptNumerics, got, err, tc.want, tc.ok)
		}
	}
}
