package engine

import (
	"math"

	"github.com/lowbit-ai/lowbit/runtime"
)

// positionLogprobs returns the log-probabilities at one position from its
// log-softmax row lp: the token's own value and rank (a NaN ranks last),
// and the top k in descending order, ties by ascending id.
func positionLogprobs(lp []float32, token, k int) PositionLogprobs {
	v := lp[token]
	rank := runtime.Rank(lp, token)
	if math.IsNaN(float64(v)) {
		rank = len(lp)
	}
	out := PositionLogprobs{Token: TokenLogprob{ID: token, Logprob: v, Rank: rank}}
	for i, id := range runtime.TopK(lp, k) {
		out.Top = append(out.Top, TokenLogprob{ID: id, Logprob: lp[id], Rank: i + 1})
	}
	return out
}
