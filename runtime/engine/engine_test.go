package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lowbit-ai/lowbit/checkpoint"
	"github.com/lowbit-ai/lowbit/kernels"
	"github.com/lowbit-ai/lowbit/kernels/cpu"
	"github.com/lowbit-ai/lowbit/kernels/ref"
	"github.com/lowbit-ai/lowbit/runtime"
	"github.com/lowbit-ai/lowbit/synth"
)

// The tests run synth's tiny Qwen3 (hidden 64, 2 layers, Qwen3's vocabulary
// of 151936) on kernels/cpu, or on kernels/ref in a cgo-free build.

var tiny struct {
	once sync.Once
	dir  string
	err  error
}

func tinyModel(t testing.TB) *runtime.Model {
	t.Helper()
	return tinyModelWith(t, nil)
}

// tinyModelWith is tinyModel on the kernels wrap makes of the CPU's (nil:
// those themselves).
func tinyModelWith(t testing.TB, wrap func(kernels.Ops) kernels.Ops) *runtime.Model {
	t.Helper()
	tiny.once.Do(func() {
		tiny.dir, tiny.err = func() (string, error) {
			d, err := osMkdirTemp()
			if err != nil {
				return "", err
			}
			_, err = synth.Write(d, synth.Options{Arch: checkpoint.Qwen3, Size: synth.Tiny, Seed: 7})
			return d, err
		}()
	})
	if tiny.err != nil {
		t.Fatal(tiny.err)
	}
	var ops kernels.Ops = ref.Ops{}
	if c, err := cpu.New(); err == nil {
		ops = c
		t.Cleanup(c.Close)
	}
	if wrap != nil {
		ops = wrap(ops)
	}
	m, err := runtime.Load(tiny.dir, ops)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func newEngine(t testing.TB, m *runtime.Model, cfg Config) *Engine {
	t.Helper()
	if cfg.MaxModelLen == 0 {
		cfg.MaxModelLen = 256
	}
	if cfg.KVCacheBytes == 0 {
		cfg.KVCacheBytes = 8 << 20
	}
	e, err := New(m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

// result is everything a request produced.
type result struct {
	tokens   []int
	logprobs []PositionLogprobs
	prompt   []*PositionLogprobs
	finish   string
	stop     int
	cached   int
	outputs  int
	err      error
}

func collect(t testing.TB, ch <-chan Output) result {
	t.Helper()
	var r result
	timeout := time.After(60 * time.Second)
	for {
		select {
		case o, ok := <-ch:
			if !ok {
				return r
			}
			r.outputs++
			r.tokens = append(r.tokens, o.Tokens...)
			r.logprobs = append(r.logprobs, o.Logprobs...)
			if o.PromptLogprobs != nil {
				r.prompt = o.PromptLogprobs
			}
			if o.PromptTokens > 0 {
				r.cached = o.CachedTokens
			}
			if o.Finish != "" {
				r.finish, r.stop = o.Finish, o.StopToken
			}
			if o.Err != nil {
				r.err = o.Err
			}
		case <-timeout:
			t.Fatal("no output for 60 s")
		}
	}
}

func run(t testing.TB, e *Engine, r *Request) result {
	t.Helper()
	ch, err := e.Submit(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	res := collect(t, ch)
	if res.err != nil {
		t.Fatal(res.err)
	}
	return res
}

func randomPrompt(rng *rand.Rand, n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = rng.IntN(151000)
	}
	return p
}

// TestGreedyMatchesGenerate: over a KV cache of each type (float32, auto
// = BF16, fp8) the engine's greedy tokens are runtime.Generate's on a
// sequence with the same cache (what lowbit serve and lowbit generate
// run), and its prompt log-probabilities are the log-softmax of Forward's
// logits, bit for bit.
func TestGreedyMatchesGenerate(t *testing.T) {
	m := tinyModel(t)
	prompt := randomPrompt(rand.New(rand.NewPCG(1, 1)), 21)
	for _, kv := range []string{"float32", "auto", "fp8"} {
		t.Run(kv, func(t *testing.T) {
			dt, err := ParseKVCacheDType(kv)
			if err != nil {
				t.Fatal(err)
			}
			e := newEngine(t, m, Config{KVCacheDType: kv, MaxNumBatchedTokens: 8})
			got := run(t, e, &Request{Prompt: prompt, MaxTokens: 12, PromptLogprobs: 3, Logprobs: 2})
			sequence := func() *runtime.Sequence {
				s, err := m.NewSequenceKV(0, dt)
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
			var want []int
			_, err = m.Generate(context.Background(), sequence(), prompt, runtime.GenerateOptions{MaxTokens: 12}, func(id int) error {
				want = append(want, id)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.tokens, want) {
				t.Errorf("engine tokens %v, Generate %v", got.tokens, want)
			}
			if got.finish != FinishLength {
				t.Errorf("finish %q, want length", got.finish)
			}
			logits, err := m.Forward(sequence(), append(slices.Clone(prompt), want...))
			if err != nil {
				t.Fatal(err)
			}
			V := m.VocabSize()
			lp := make([]float32, V)
			if got.prompt[0] != nil || len(got.prompt) != len(prompt) {
				t.Fatalf("prompt logprobs: %d entries, first %v; want %d, first nil", len(got.prompt), got.prompt[0], len(prompt))
			}
			for p := 1; p < len(prompt); p++ {
				m.Ops().LogSoftmax(lp, logits[(p-1)*V:p*V], 1, V)
				checkPosition(t, fmt.Sprintf("prompt position %d", p), *got.prompt[p], lp, prompt[p], 3)
			}
			for i, tok := range want {
				p := len(prompt) + i - 1
				m.Ops().LogSoftmax(lp, logits[p*V:(p+1)*V], 1, V)
				checkPosition(t, fmt.Sprintf("generated token %d", i), got.logprobs[i], lp, tok, 2)
			}
		})
	}
}

// checkPosition compares a PositionLogprobs with a brute-force reading of
// the log-softmax row lp.
func checkPosition(t *testing.T, what string, got PositionLogprobs, lp []float32, token, k int) {
	t.Helper()
	rank := 0
	for _, x := range lp {
		if x >= lp[token] {
			rank++
		}
	}
	if got.Token != (TokenLogprob{ID: token, Logprob: lp[token], Rank: rank}) {
		t.Errorf("%s: token %+v, want {%d %v %d}", what, got.Token, token, lp[token], rank)
	}
	ids := make([]int, len(lp))
	for i := range ids {
		ids[i] = i
	}
	slices.SortStableFunc(ids, func(a, b int) int { return -cmpFloat(lp[a], lp[b]) })
	if len(got.Top) != k {
		t.Fatalf("%s: %d top entries, want %d", what, len(got.Top), k)
	}
	for i := range k {
		if w := (TokenLogprob{ID: ids[i], Logprob: lp[ids[i]], Rank: i + 1}); got.Top[i] != w {
			t.Errorf("%s: top[%d] = %+v, want %+v", what, i, got.Top[i], w)
		}
	}
}

func cmpFloat(a, b float32) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// TestBatchInvariance: requests run together (with chunked prefill,
// sampling at temperature 1 with seeds, a BF16 and an FP8 cache) give
// bit-identical prompt log-probabilities, tokens and logprobs to each run
// alone.
func TestBatchInvariance(t *testing.T) {
	m := tinyModel(t)
	rng := rand.New(rand.NewPCG(2, 2))
	var reqs []*Request
	for i := range 8 {
		r := &Request{Prompt: randomPrompt(rng, 5+rng.IntN(60)), MaxTokens: 4 + rng.IntN(12), PromptLogprobs: 2, Logprobs: 1}
		if i%2 == 1 {
			r.Sampling = runtime.SamplingOptions{Temperature: 1, TopP: 0.9, TopK: 50, Seed: uint64(i)}
		}
		reqs = append(reqs, r)
	}
	for _, dt := range []string{"auto", "fp8"} {
		t.Run(dt, func(t *testing.T) {
			alone, together, e := aloneAndTogether(t, m, Config{KVCacheDType: dt}, Config{KVCacheDType: dt, MaxNumBatchedTokens: 40}, reqs)
			if e.Stats().Steps <= int64(len(reqs)) {
				t.Errorf("%d steps for %d requests: they did not share steps as expected", e.Stats().Steps, len(reqs))
			}
			for i := range reqs {
				a, b := alone[i], together[i]
				if !slices.Equal(a.tokens, b.tokens) || !equalLP(a.prompt, b.prompt) || !slices.EqualFunc(a.logprobs, b.logprobs, equalPos) {
					t.Errorf("request %d: results in a batch differ from alone: tokens %v vs %v", i, b.tokens, a.tokens)
				}
			}
		})
	}
}

// aloneAndTogether runs each request alone on a fresh engine of config
// aloneCfg, then all of them at once on one engine of config togetherCfg,
// which it returns with both sets of results.
func aloneAndTogether(t *testing.T, m *runtime.Model, aloneCfg, togetherCfg Config, reqs []*Request) (alone, together []result, e *Engine) {
	t.Helper()
	alone = make([]result, len(reqs))
	for i, r := range reqs {
		alone[i] = run(t, newEngine(t, m, aloneCfg), r)
	}
	e = newEngine(t, m, togetherCfg)
	together = make([]result, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Go(func() { together[i] = run(t, e, r) })
	}
	wg.Wait()
	return alone, together, e
}

func equalPos(a, b PositionLogprobs) bool {
	return a.Token == b.Token && slices.Equal(a.Top, b.Top) &&
		math.Float32bits(a.Token.Logprob) == math.Float32bits(b.Token.Logprob)
}

func equalLP(a, b []*PositionLogprobs) bool {
	return slices.EqualFunc(a, b, func(x, y *PositionLogprobs) bool {
		return (x == nil) == (y == nil) && (x == nil || equalPos(*x, *y))
	})
}

// TestPrefixCache: a second request sharing a prompt prefix reuses the
// first one's full blocks, and gets the same tokens as without the cache.
func TestPrefixCache(t *testing.T) {
	m := tinyModel(t)
	rng := rand.New(rand.NewPCG(3, 3))
	system := randomPrompt(rng, 50)
	a := &Request{Prompt: append(slices.Clone(system), randomPrompt(rng, 7)...), MaxTokens: 5, Logprobs: 0, PromptLogprobs: -1}
	b := &Request{Prompt: append(slices.Clone(system), randomPrompt(rng, 9)...), MaxTokens: 5, Logprobs: 0, PromptLogprobs: -1}
	e := newEngine(t, m, Config{})
	run(t, e, a)
	got := run(t, e, b)
	if got.cached != 48 { // 3 full blocks of 16 of the shared 50 tokens
		t.Errorf("cached tokens %d, want 48", got.cached)
	}
	want := run(t, newEngine(t, m, Config{DisablePrefixCaching: true}), b)
	if !slices.Equal(got.tokens, want.tokens) || !slices.EqualFunc(got.logprobs, want.logprobs, equalPos) {
		t.Errorf("with the prefix cache: %v, without: %v", got.tokens, want.tokens)
	}
	// Multi-turn: the conversation so far (prompt and answer) is cached.
	turn2 := append(append(slices.Clone(b.Prompt), got.tokens...), randomPrompt(rng, 4)...)
	got2 := run(t, e, &Request{Prompt: turn2, MaxTokens: 2, PromptLogprobs: -1, Logprobs: -1})
	if want := (len(b.Prompt) + len(got.tokens) - 1) / 16 * 16; got2.cached != want {
		t.Errorf("second turn: cached %d, want %d", got2.cached, want)
	}
	st := e.Stats()
	if st.PrefixHits == 0 || st.PrefixQueries < st.PrefixHits || st.KVBlocksUsed != 0 {
		t.Errorf("stats %+v: want hits, and no block held after the requests ended", st)
	}
}

// TestPreemption: a KV cache of exactly one max_model_len sequence, with
// many requests growing at once, forces preemption by recompute; results
// match the requests run alone.
func TestPreemption(t *testing.T) {
	m := tinyModel(t)
	const maxLen = 96
	cfg := Config{MaxModelLen: maxLen, BlockSize: 16, KVCacheDType: "auto", KVCacheBytes: m.KVBlockBytes(16, kernels.KVBF16) * maxLen / 16}
	rng := rand.New(rand.NewPCG(4, 4))
	var reqs []*Request
	for range 6 {
		reqs = append(reqs, &Request{Prompt: randomPrompt(rng, 20+rng.IntN(20)), MaxTokens: 40, Logprobs: 1, PromptLogprobs: -1})
	}
	alone, together, e := aloneAndTogether(t, m, cfg, cfg, reqs)
	if e.Stats().Preemptions == 0 {
		t.Error("no preemption happened; the test does not test it")
	}
	for i := range reqs {
		if !slices.Equal(alone[i].tokens, together[i].tokens) || !slices.EqualFunc(alone[i].logprobs, together[i].logprobs, equalPos) {
			t.Errorf("request %d: %v under preemption, %v alone", i, together[i].tokens, alone[i].tokens)
		}
	}
}

// TestStopAndMinTokens: a stop token ends the request (included, with
// FinishStop) but not before MinTokens.
func TestStopAndMinTokens(t *testing.T) {
	m := tinyModel(t)
	e := newEngine(t, m, Config{})
	prompt := randomPrompt(rand.New(rand.NewPCG(5, 5)), 10)
	free := run(t, e, &Request{Prompt: prompt, MaxTokens: 8, PromptLogprobs: -1, Logprobs: -1})
	stopAt := free.tokens[2]
	got := run(t, e, &Request{Prompt: prompt, MaxTokens: 8, StopTokenIDs: []int{stopAt}, PromptLogprobs: -1, Logprobs: -1})
	first := slices.Index(free.tokens, stopAt)
	if got.finish != FinishStop || got.stop != stopAt || !slices.Equal(got.tokens, free.tokens[:first+1]) {
		t.Errorf("stop token %d: %v finish %q stop %d; unconstrained %v", stopAt, got.tokens, got.finish, got.stop, free.tokens)
	}
	got = run(t, e, &Request{Prompt: prompt, MaxTokens: 8, MinTokens: 8, StopTokenIDs: []int{stopAt}, PromptLogprobs: -1, Logprobs: -1})
	if len(got.tokens) != 8 || slices.Contains(got.tokens, stopAt) || got.finish != FinishLength {
		t.Errorf("min_tokens 8: %v finish %q; want 8 tokens without %d", got.tokens, got.finish, stopAt)
	}
	score := run(t, e, &Request{Prompt: prompt, MaxTokens: 0, PromptLogprobs: 0, Logprobs: -1})
	if len(score.tokens) != 0 || score.finish != FinishLength || len(score.prompt) != len(prompt) || score.prompt[1] == nil {
		t.Errorf("max_tokens 0: %d tokens, finish %q, %d prompt entries", len(score.tokens), score.finish, len(score.prompt))
	}
}

// TestCancel: cancelling a request mid-generation frees its blocks, and the
// engine goes on serving.
func TestCancel(t *testing.T) {
	m := tinyModel(t)
	e := newEngine(t, m, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := e.Submit(ctx, &Request{Prompt: randomPrompt(rand.New(rand.NewPCG(6, 6)), 30), MaxTokens: 200, PromptLogprobs: -1, Logprobs: -1})
	if err != nil {
		t.Fatal(err)
	}
	<-ch // the first token
	cancel()
	for range ch {
	}
	deadline := time.Now().Add(10 * time.Second)
	for e.Stats().KVBlocksUsed != 0 || e.Stats().Running != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after cancel: %+v", e.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	run(t, e, &Request{Prompt: []int{1, 2, 3}, MaxTokens: 2, PromptLogprobs: -1, Logprobs: -1})
}

// TestSubmitErrors: bad requests are refused with the documented errors,
// and a full queue with ErrOverloaded.
func TestSubmitErrors(t *testing.T) {
	m := tinyModel(t)
	e := newEngine(t, m, Config{MaxModelLen: 64})
	for _, tt := range []struct {
		r    *Request
		want error
	}{
		{&Request{MaxTokens: 1, PromptLogprobs: -1, Logprobs: -1}, ErrInvalid},
		{&Request{Prompt: []int{1}, MaxTokens: -1, PromptLogprobs: -1, Logprobs: -1}, ErrInvalid},
		{&Request{Prompt: []int{1 << 30}, MaxTokens: 1, PromptLogprobs: -1, Logprobs: -1}, ErrInvalid},
		{&Request{Prompt: []int{1}, MaxTokens: 1, Sampling: runtime.SamplingOptions{Temperature: -1}, PromptLogprobs: -1, Logprobs: -1}, ErrInvalid},
		{&Request{Prompt: []int{1}, MaxTokens: 1, PromptLogprobs: -2, Logprobs: -1}, ErrInvalid},
		{&Request{Prompt: make([]int, 60), MaxTokens: 5, PromptLogprobs: -1, Logprobs: -1}, ErrPromptTooLong},
	} {
		if _, err := e.Submit(context.Background(), tt.r); !errors.Is(err, tt.want) {
			t.Errorf("Submit(%+v) = %v, want %v", tt.r, err, tt.want)
		}
	}
	small := newEngine(t, m, Config{MaxWaiting: 2})
	var chans []<-chan Output
	var overloaded bool
	for range 20 {
		ch, err := small.Submit(context.Background(), &Request{Prompt: make([]int, 100), MaxTokens: 50, PromptLogprobs: -1, Logprobs: -1})
		if errors.Is(err, ErrOverloaded) {
			overloaded = true
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		chans = append(chans, ch)
	}
	if !overloaded {
		t.Error("20 requests in a queue of 2: never ErrOverloaded")
	}
	for _, ch := range chans {
		if r := collect(t, ch); r.err != nil || len(r.tokens) != 50 {
			t.Errorf("an accepted request: %d tokens, err %v", len(r.tokens), r.err)
		}
	}
	if _, err := New(m, Config{MaxModelLen: 256, KVCacheBytes: 1024}); err == nil {
		t.Error("New with a KV cache smaller than max_model_len: no error")
	}
}

func osMkdirTemp() (string, error) { return os.MkdirTemp("", "lowbit-engine-test-") }
