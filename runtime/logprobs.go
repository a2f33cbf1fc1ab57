package runtime

import (
	"cmp"
	"container/heap"
	"slices"
)

// TopK returns the ids of the k largest values of row, largest first, ties
// by ascending id (the order of vLLM's top-k logprobs). k < 0 or k >
// len(row) means all of them.
func TopK(row []float32, k int) []int {
	if k < 0 || k > len(row) {
		k = len(row)
	}
	if k == 0 {
		return nil
	}
	h := &worstFirst{row: row, ids: make([]int, 0, k)}
	for i := range row {
		if len(h.ids) < k {
			heap.Push(h, i)
		} else if h.better(i, h.ids[0]) {
			h.ids[0] = i
			heap.Fix(h, 0)
		}
	}
	ids := h.ids
	slices.SortFunc(ids, func(a, b int) int {
		return cmp.Or(cmp.Compare(row[b], row[a]), cmp.Compare(a, b))
	})
	return ids
}

// Rank returns the number of entries of row that are >= row[id]: 1 for the
// largest, as vLLM ranks logprobs (ties push ranks up).
func Rank(row []float32, id int) int {
	n := 0
	for _, v := range row {
		if v >= row[id] {
			n++
		}
	}
	return n
}

// worstFirst is a heap of the best ids seen so far, the worst on top.
type worstFirst struct {
	row []float32
	ids []int
}

// better reports whether id a ranks above id b.
func (h *worstFirst) better(a, b int) bool {
	return h.row[a] > h.row[b] || (h.row[a] == h.row[b] && a < b)
}

func (h *worstFirst) Len() int           { return len(h.ids) }
func (h *worstFirst) Less(i, j int) bool { return h.better(h.ids[j], h.ids[i]) }
func (h *worstFirst) Swap(i, j int)      { h.ids[i], h.ids[j] = h.ids[j], h.ids[i] }
func (h *worstFirst) Push(x any)         { h.ids = append(h.ids, x.(int)) }
func (h *worstFirst) Pop() any {
	x := h.ids[len(h.ids)-1]
	h.ids = h.ids[:len(h.ids)-1]
	return x
}
