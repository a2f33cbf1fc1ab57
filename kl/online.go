package kl

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/lowbit-ai/lowbit/runtime"
)

// OnlineOptions configure Online.
type OnlineOptions struct {
	// K is the prompt_logprobs k asked of both servers (default 20, vLLM's
	// default --max-logprobs; -1 is the whole vocabulary).
	K int
	// SampleTokens > 0 scores the reference server's own continuations:
	// up to SampleTokens tokens sampled after each prompt with Sampling
	// (prompt i seeded Sampling.Seed+i), then prompt and continuation are
	// sent to both servers and the continuation's positions scored. 0
	// scores the prompts as given.
	SampleTokens int
	Sampling     runtime.SamplingOptions
	// MaxPromptTokens > 0 cuts each prompt to its first MaxPromptTokens
	// tokens, before any sampling.
	MaxPromptTokens int
	// Concurrency is the prompts in flight (default 4).
	Concurrency int
	// Progress, when set, is called after each prompt with the number of
	// prompts done.
	Progress func(done int)
}

// Online scores the prompts against two vLLM-compatible servers from their
// prompt_logprobs: the prompts are tokenized once by the reference server
// (/tokenize; token-id prompts are sent as they are), both servers get the
// same ids, and dict entries are matched by token id. Each position gets
// the three top-k Estimates; the exact KL is unknown (NaN).
func Online(ctx context.Context, ref, cand *Client, prompts []Prompt, opts OnlineOptions) (*Result, error) {
	if opts.K == 0 {
		opts.K = 20
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 4
	}
	switch {
	case opts.K < -1:
		return nil, fmt.Errorf("kl: top-k %d: want >= 1, or -1 for the whole vocabulary", opts.K)
	case opts.SampleTokens < 0:
		return nil, fmt.Errorf("kl: %d sample tokens: want >= 0", opts.SampleTokens)
	}
	if err := opts.Sampling.Validate(); err != nil {
		return nil, err
	}
	// Resolve the model names once, before the workers share the clients.
	if _, err := ref.model(ctx); err != nil {
		return nil, err
	}
	if _, err := cand.model(ctx); err != nil {
		return nil, err
	}
	mode := ModeTeacherForced
	if opts.SampleTokens > 0 {
		mode = ModeSampled
	}
	seqs := make([]Sequence, len(prompts))
	pos := make([][]Position, len(prompts))
	errs := make([]error, len(prompts))
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var done atomic.Int64
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(opts.Concurrency, len(prompts)) {
		wg.Go(func() {
			for i := range next {
				seqs[i], pos[i], errs[i] = scoreOnline(ctx, ref, cand, i, prompts[i], opts)
				if errs[i] != nil {
					cancel()
					continue
				}
				if opts.Progress != nil {
					opts.Progress(int(done.Add(1)))
				}
			}
		})
	}
feed:
	for i := range prompts {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err := parent.Err(); err != nil {
		return nil, err
	}
	// The first failure cancels the others; report it, not their
	// cancellations.
	for i, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return nil, fmt.Errorf("kl: prompt %d (%s): %w", i, prompts[i].Name, err)
		}
	}
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("kl: prompt %d (%s): %w", i, prompts[i].Name, err)
		}
	}
	res := &Result{Mode: mode, Online: true, K: opts.K, Sequences: seqs}
	for _, p := range pos {
		res.Positions = append(res.Positions, p...)
	}
	return res, nil
}

// scoreOnline scores prompt i.
func scoreOnline(ctx context.Context, ref, cand *Client, i int, p Prompt, opts OnlineOptions) (Sequence, []Position, error) {
	ids := p.IDs
	if ids == nil {
		var err error
		if ids, err = ref.Tokenize(ctx, p.Text); err != nil {
			return Sequence{}, nil, err
		}
	}
	if n := opts.MaxPromptTokens; n > 0 && len(ids) > n {
		ids = ids[:n]
	}
	seq := Sequence{IDs: ids, From: 1}
	if opts.SampleTokens > 0 {
		s := opts.Sampling
		s.Seed += uint64(i)
		gen, err := ref.Sample(ctx, ids, opts.SampleTokens, s)
		if err != nil {
			return Sequence{}, nil, err
		}
		seq = Sequence{IDs: append(append([]int(nil), ids...), gen...), From: len(ids)}
	}
	var ep, eq []*Entry
	var errP, errQ error
	var wg sync.WaitGroup
	wg.Go(func() { ep, errP = ref.PromptLogprobs(ctx, seq.IDs, opts.K) })
	wg.Go(func() { eq, errQ = cand.PromptLogprobs(ctx, seq.IDs, opts.K) })
	wg.Wait()
	if errP != nil {
		return Sequence{}, nil, errP
	}
	if errQ != nil {
		return Sequence{}, nil, errQ
	}
	seq.Pieces = make([]string, len(seq.IDs))
	var out []Position
	for t := 1; t < len(seq.IDs); t++ {
		tok := seq.IDs[t]
		if lp, ok := ep[t].Lookup(tok); ok {
			seq.Pieces[t] = lp.Decoded
		}
		if t < seq.From {
			continue
		}
		e, err := Estimate(ep[t], eq[t], tok)
		if err != nil {
			return Sequence{}, nil, fmt.Errorf("position %d: %w", t, err)
		}
		out = append(out, Position{Prompt: i, Pos: t, Token: tok, KL: math.NaN(), Estimates: e,
			RefTopText: top1Text(ep[t]), CandTopText: top1Text(eq[t])})
	}
	return seq, out, nil
}
