package kl

import (
	"context"
	"fmt"
	"math"
	goruntime "runtime"
	"sync"

	"github.com/lowbit-ai/lowbit/runtime"
)

// OfflineOptions configure Offline.
type OfflineOptions struct {
	// SampleTokens > 0 scores the reference's own continuations, as
	// LowBArena's KL probe does: up to SampleTokens tokens are sampled from
	// the reference after each prompt (with Sampling, prompt i seeded
	// Sampling.Seed+i, ending at StopIDs), and the positions of the
	// continuation are scored. 0 scores the prompts as given (teacher
	// forcing): every position after the first.
	SampleTokens int
	Sampling     runtime.SamplingOptions
	StopIDs      []int
	// K is the top-k of the estimators computed beside the exact KL, as a
	// server answering prompt_logprobs=K would allow them (default 20).
	K int
	// StudyK lists more k at which to compare the estimators with the
	// exact KL (Result.Study); empty skips the study.
	StudyK []int
	// LogitScale, when not 0 or 1, multiplies both models' logits before
	// the log-softmax (the KL of both distributions at temperature
	// 1/LogitScale). It exists for estimator studies: synthetic models are
	// far flatter than trained ones, and a scale of a few makes their
	// distributions as peaked as a trained model's.
	LogitScale float64
	// Chunk is the tokens per forward (default 64): memory holds Chunk rows
	// of logits per model, and the runtime's rows do not depend on it.
	Chunk int
	// Progress, when set, is called after each prompt with the number of
	// prompts done.
	Progress func(done int)
}

// Offline runs every prompt (token ids) through the reference and the
// candidate with lowbit's runtime and measures, at each scored position,
// the exact full-vocabulary KL(ref‖cand) from the models' own log-softmax
// (Ops().LogSoftmax, float32 as a server computes it) summed in float64,
// the top-k estimates at opts.K, and each layer's hidden-state NMSE.
//
// The two models must share the vocabulary, the hidden size and the number
// of layers: the candidate is a quantization of the reference.
func Offline(ctx context.Context, ref, cand *runtime.Model, prompts [][]int, opts OfflineOptions) (*Result, error) {
	if opts.K == 0 {
		opts.K = 20
	}
	if opts.Chunk <= 0 {
		opts.Chunk = 64
	}
	switch {
	case opts.K < 1:
		return nil, fmt.Errorf("kl: top-k %d: want >= 1 (offline the exact KL covers the whole vocabulary)", opts.K)
	case opts.SampleTokens < 0:
		return nil, fmt.Errorf("kl: %d sample tokens: want >= 0", opts.SampleTokens)
	}
	for _, k := range opts.StudyK {
		if k < 1 {
			return nil, fmt.Errorf("kl: study k %d: want >= 1", k)
		}
	}
	if err := opts.Sampling.Validate(); err != nil {
		return nil, err
	}
	rc, cc := ref.Config().Text, cand.Config().Text
	switch {
	case ref.VocabSize() != cand.VocabSize():
		return nil, fmt.Errorf("kl: the reference's vocabulary has %d tokens and the candidate's %d: compare a model with its own quantization", ref.VocabSize(), cand.VocabSize())
	case rc.HiddenSize != cc.HiddenSize || rc.NumHiddenLayers != cc.NumHiddenLayers:
		return nil, fmt.Errorf("kl: the reference has %d layers of width %d and the candidate %d of width %d: compare a model with its own quantization",
			rc.NumHiddenLayers, rc.HiddenSize, cc.NumHiddenLayers, cc.HiddenSize)
	}
	o := &offline{ref: ref, cand: cand, opts: opts, ks: studyKs(opts.K, opts.StudyK),
		layers: rc.NumHiddenLayers, hidden: rc.HiddenSize, V: ref.VocabSize()}
	o.st = newStudy(o.ks)
	o.errSq = make([]float64, o.layers)
	o.refSq = make([]float64, o.layers)
	o.refHidden = make([][]float32, o.layers)
	mode := ModeTeacherForced
	if opts.SampleTokens > 0 {
		mode = ModeSampled
	}
	res := &Result{Mode: mode, K: opts.K}
	for i, p := range prompts {
		for j, id := range p {
			if id < 0 || id >= o.V {
				return nil, fmt.Errorf("kl: prompt %d: token %d is id %d, outside the vocabulary [0, %d)", i, j, id, o.V)
			}
		}
	}
	for i, p := range prompts {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		seq, err := o.sequence(ctx, i, p)
		if err != nil {
			return nil, fmt.Errorf("kl: prompt %d: %w", i, err)
		}
		res.Sequences = append(res.Sequences, seq)
		pos, err := o.score(i, seq)
		if err != nil {
			return nil, fmt.Errorf("kl: prompt %d: %w", i, err)
		}
		res.Positions = append(res.Positions, pos...)
		if opts.Progress != nil {
			opts.Progress(i + 1)
		}
	}
	prev := 0.0
	for l := range o.layers {
		nmse := o.errSq[l] / o.refSq[l]
		if o.refSq[l] == 0 {
			nmse = 0
		}
		res.Layers = append(res.Layers, LayerError{Layer: l, NMSE: nmse, Added: nmse - prev})
		prev = nmse
	}
	if len(opts.StudyK) > 0 {
		res.Study = o.st.rows()
	}
	return res, nil
}

type offline struct {
	ref, cand         *runtime.Model
	opts              OfflineOptions
	ks                []int
	layers, hidden, V int
	st                *study
	errSq, refSq      []float64   // per layer, over every token fed
	refHidden         [][]float32 // per layer, the reference's chunk
}

// sequence returns prompt i's scored sequence: the prompt itself, or the
// prompt and the reference's sampled continuation.
func (o *offline) sequence(ctx context.Context, i int, prompt []int) (Sequence, error) {
	if len(prompt) == 0 {
		return Sequence{}, fmt.Errorf("empty prompt")
	}
	if o.opts.SampleTokens == 0 {
		return Sequence{IDs: prompt, From: 1}, nil
	}
	s := o.opts.Sampling
	s.Seed += uint64(i)
	ids := append([]int(nil), prompt...)
	_, err := o.ref.Generate(ctx, o.ref.NewSequence(len(prompt)+o.opts.SampleTokens), prompt,
		runtime.GenerateOptions{MaxTokens: o.opts.SampleTokens, Sampling: s, StopIDs: o.opts.StopIDs},
		func(id int) error { ids = append(ids, id); return nil })
	if err != nil {
		return Sequence{}, fmt.Errorf("sampling the reference: %w", err)
	}
	return Sequence{IDs: ids, From: len(prompt)}, nil
}

// score runs seq through both models chunk by chunk and returns its
// positions from seq.From on.
func (o *offline) score(pi int, seq Sequence) ([]Position, error) {
	ids, n := seq.IDs, len(seq.IDs)
	rs, cs := o.ref.NewSequence(n), o.cand.NewSequence(n)
	var out []Position
	// Row j of a forward predicts token j+1; the last token predicts past
	// the sequence and is not fed.
	for a := 0; a < n-1; a += o.opts.Chunk {
		b := min(a+o.opts.Chunk, n-1)
		T := b - a
		first := max(a, seq.From-1) // first row scored
		lastOnly := first >= b
		refHook := func(l int, h []float32) {
			o.refHidden[l] = append(o.refHidden[l][:0], h...)
		}
		candHook := func(l int, h []float32) {
			var e, r float64
			for i, v := range o.refHidden[l][:len(h)] {
				d := float64(h[i]) - float64(v)
				e += d * d
				r += float64(v) * float64(v)
			}
			o.errSq[l] += e
			o.refSq[l] += r
		}
		lr, err := o.ref.ForwardWith(rs, ids[a:b], runtime.ForwardOptions{Hook: refHook, LastOnly: lastOnly})
		if err != nil {
			return nil, fmt.Errorf("reference forward: %w", err)
		}
		lc, err := o.cand.ForwardWith(cs, ids[a:b], runtime.ForwardOptions{Hook: candHook, LastOnly: lastOnly})
		if err != nil {
			return nil, fmt.Errorf("candidate forward: %w", err)
		}
		if lastOnly {
			continue
		}
		// Only rows first..b-1 are scored; log-softmax them in place.
		skip := first - a
		lr, lc = lr[skip*o.V:T*o.V], lc[skip*o.V:T*o.V]
		rows := b - first
		if sc := float32(o.opts.LogitScale); sc != 0 && sc != 1 {
			for i := range lr {
				lr[i] *= sc
				lc[i] *= sc
			}
		}
		o.ref.Ops().LogSoftmax(lr, lr, rows, o.V)
		o.cand.Ops().LogSoftmax(lc, lc, rows, o.V)
		out = append(out, o.rows(pi, ids, first, lr, lc)...)
	}
	return out, nil
}

// rows computes the positions of log-probability rows lr, lc, whose first
// row is at position first (predicting ids[first+1]), in parallel.
func (o *offline) rows(pi int, ids []int, first int, lr, lc []float32) []Position {
	rows := len(lr) / o.V
	out := make([]Position, rows)
	ests := make([][]Estimates, rows)
	kmax := o.ks[len(o.ks)-1]
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(goruntime.GOMAXPROCS(0), rows) {
		wg.Go(func() {
			for r := range next {
				p, q := lr[r*o.V:(r+1)*o.V], lc[r*o.V:(r+1)*o.V]
				tok := ids[first+r+1]
				rs := Row(p, q)
				tp, tq := TopK(p, kmax), TopK(q, kmax)
				rp, rq := runtime.Rank(p, tok), runtime.Rank(q, tok)
				es := make([]Estimates, len(o.ks))
				for i, k := range o.ks {
					k = min(k, len(tp))
					ep, eq := entryFromRow(p, tok, rp, tp[:k]), entryFromRow(q, tok, rq, tq[:k])
					es[i], _ = Estimate(&ep, &eq, tok) // both list tok by construction
				}
				ests[r] = es
				pos := Position{Prompt: pi, Pos: first + r + 1, Token: tok, KL: rs.KL}
				for i, k := range o.ks {
					if k == o.opts.K {
						pos.Estimates = es[i]
					}
				}
				// The exact argmax rather than the top-k's (equal but for ties).
				pos.RefTop1, pos.CandTop1 = rs.RefTop1, rs.CandTop1
				out[r] = pos
			}
		})
	}
	for r := range rows {
		next <- r
	}
	close(next)
	wg.Wait()
	for r := range rows {
		if !math.IsNaN(out[r].KL) {
			o.st.add(out[r].KL, ests[r])
		}
	}
	return out
}
