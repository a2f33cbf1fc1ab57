package engine

import (
	"cmp"
	"slices"

	"github.com/lowbit-ai/lowbit/runtime"
)

// keepLogits bounds the logits buffer the engine keeps between steps (a
// step with many prompt-logprob rows gets a buffer of its own).
const keepLogits = 64 << 20

// maxTop bounds the best entries a step asks a TopExecutor for a row; a
// row that needs more comes back whole.
const maxTop = 64

// forward runs the step's batch and returns, for entry k, its logits rows
// (rows[k]) or, where a TopExecutor serves it, its single row's TopLogits
// (tops[k]). Whether a row comes back whole depends only on its own
// request (topNeed), never on the rest of the batch, so a request's
// Outputs do not either.
func (e *Engine) forward(batch []runtime.BatchEntry, sched []*seqState) (rows [][]float32, tops []*runtime.TopLogits, err error) {
	V := e.m.VocabSize()
	rows = make([][]float32, len(batch))
	tops = make([]*runtime.TopLogits, len(batch))
	if tx, ok := e.exec.(runtime.TopExecutor); ok && tx.TopMax() > 0 {
		var full []bool
		k, anyTop := 1, false
		for i, b := range batch {
			need := 0
			if b.Logits == 1 {
				if need = e.topNeed(sched[i], b); need > tx.TopMax() {
					need = 0
				}
			}
			for range b.Logits {
				full = append(full, need == 0)
			}
			k, anyTop = max(k, need), anyTop || need > 0
		}
		if anyTop {
			flat, t, err := tx.ForwardTop(batch, k, full, e.logits)
			if err != nil {
				return nil, nil, err
			}
			e.keep(flat)
			r, f := 0, 0
			for i, b := range batch {
				if b.Logits == 1 && !full[r] {
					tops[i] = &t[r]
				} else {
					rows[i] = flat[f*V : (f+b.Logits)*V]
					f += b.Logits
				}
				r += b.Logits
			}
			return rows, tops, nil
		}
	}
	var logits []float32
	if bx, ok := e.exec.(runtime.BufferedExecutor); ok {
		// No Output keeps a reference into the rows: they are the buffer's
		// until the next step.
		logits, err = bx.ForwardInto(batch, e.logits)
		e.keep(logits)
	} else {
		logits, err = e.exec.Forward(batch)
	}
	if err != nil {
		return nil, nil, err
	}
	r := 0
	for i, b := range batch {
		rows[i] = logits[r*V : (r+b.Logits)*V]
		r += b.Logits
	}
	return rows, tops, nil
}

// keep makes buf the next step's logits buffer unless it is too large to
// hold on to.
func (e *Engine) keep(buf []float32) {
	if cap(buf) > 0 && cap(buf)*4 <= keepLogits {
		e.logits = buf[:cap(buf)]
	}
}

// topNeed returns how many of its row's best entries s's single logits
// row b needs for s's Output to be exactly what the whole row gives, or 0
// when only the whole row will do: a prompt log-probability to record, stop
// tokens still excluded (MinTokens), or sampling options that normalize
// over the whole vocabulary. One more entry than the top log-probabilities
// asked for keeps their order exact unless more tie at the boundary.
func (e *Engine) topNeed(s *seqState, b runtime.BatchEntry) int {
	p := b.Start + len(b.Tokens) - 1
	switch {
	case p != len(s.tokens)-1:
		return 0
	case s.req.MaxTokens == 0:
		return 1
	case s.generated < s.req.MinTokens && len(s.stop) > 0:
		return 0
	}
	k := s.sampler.TopSampleable()
	if k == 0 {
		return 0
	}
	if s.req.Logprobs >= 0 {
		k = max(k, s.req.Logprobs+1)
	}
	if k > maxTop || k >= e.m.VocabSize() {
		return 0
	}
	return k
}

// resultsTop is results for a request whose last position's row came
// back as its TopLogits t.
func (e *Engine) resultsTop(s *seqState, t *runtime.TopLogits) Output {
	var out Output
	e.generate(s, &out, func() int { return s.sampler.SampleTop(t.IDs, t.Logits) }, func(tok int) PositionLogprobs {
		return topPositionLogprobs(t, tok, s.req.Logprobs, e.m.VocabSize())
	})
	return out
}

// topPositionLogprobs is positionLogprobs from a row's TopLogits: the
// token's log-probability and rank, and the top n by log-probability
// (descending, ties by ascending id). token must be listed.
func topPositionLogprobs(t *runtime.TopLogits, token, n, vocab int) PositionLogprobs {
	var out PositionLogprobs
	order := make([]int, len(t.IDs))
	for i := range order {
		order[i] = i
		if int(t.IDs[i]) == token {
			out.Token = TokenLogprob{ID: token, Logprob: t.Logprobs[i], Rank: t.Rank(i, vocab)}
		}
	}
	// Listed by logit; log-probabilities keep that order but may tie where
	// logits did not, and ties go by id.
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(t.Logprobs[b], t.Logprobs[a]), cmp.Compare(t.IDs[a], t.IDs[b]))
	})
	for i := range min(n, len(order)) {
		j := order[i]
		out.Top = append(out.Top, TokenLogprob{ID: int(t.IDs[j]), Logprob: t.Logprobs[j], Rank: i + 1})
	}
	return out
}
