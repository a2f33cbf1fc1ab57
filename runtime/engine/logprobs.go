package engine

import (
	"container/heap"
	"math"
	"slices"
)

// positionLogprobs returns the log-probabilities at one position from its
// log-softmax row lp: the token's own value and rank, and the top k (k = -1:
// the whole vocabulary) in descending order, ties by ascending id.
func positionLogprobs(lp []float32, token, k int) PositionLogprobs {
	v := lp[token]
	rank := 0
	for _, x := range lp {
		if x >= v {
			rank++
		}
	}
	if math.IsNaN(float64(v)) {
		rank = len(lp)
	}
	out := PositionLogprobs{Token: TokenLogprob{ID: token, Logprob: v, Rank: rank}}
	if k < 0 || k > len(lp) {
		k = len(lp)
	}
	for i, id := range topK(lp, k) {
		out.Top = append(out.Top, TokenLogprob{ID: id, Logprob: lp[id], Rank: i + 1})
	}
	return out
}

// better orders ids by descending value, then ascending id.
func better(lp []float32, a, b int) bool {
	if lp[a] != lp[b] {
		return lp[a] > lp[b]
	}
	return a < b
}

// topK returns the ids of the k best entries of lp, best first.
func topK(lp []float32, k int) []int {
	if k == 0 {
		return nil
	}
	if k*8 >= len(lp) {
		ids := make([]int, len(lp))
		for i := range ids {
			ids[i] = i
		}
		slices.SortFunc(ids, func(a, b int) int {
			if better(lp, a, b) {
				return -1
			}
			if better(lp, b, a) {
				return 1
			}
			return 0
		})
		return ids[:k]
	}
	h := &worstHeap{lp: lp}
	for i := range lp {
		if h.Len() < k {
			heap.Push(h, i)
		} else if better(lp, i, h.ids[0]) {
			h.ids[0] = i
			heap.Fix(h, 0)
		}
	}
	out := make([]int, h.Len())
	for i := len(out) - 1; i >= 0; i-- {
		out[i] = heap.Pop(h).(int)
	}
	return out
}

// worstHeap keeps the worst of the best k at its root.
type worstHeap struct {
	lp  []float32
	ids []int
}

func (h *worstHeap) Len() int           { return len(h.ids) }
func (h *worstHeap) Less(i, j int) bool { return better(h.lp, h.ids[j], h.ids[i]) }
func (h *worstHeap) Swap(i, j int)      { h.ids[i], h.ids[j] = h.ids[j], h.ids[i] }
func (h *worstHeap) Push(x any)         { h.ids = append(h.ids, x.(int)) }
func (h *worstHeap) Pop() any {
	x := h.ids[len(h.ids)-1]
	h.ids = h.ids[:len(h.ids)-1]
	return x
}
