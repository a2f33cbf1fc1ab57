package kl

import (
	"cmp"
	"container/heap"
	"slices"
	"sort"
)

// Logprob is one token of a position's prompt_logprobs dict: its
// log-probability over the full vocabulary, its rank (1 = argmax) and its
// text decoded alone.
type Logprob struct {
	ID      int
	Logprob float64
	Rank    int
	Decoded string
}

// Entry is what a server returns for one prompt position: the actual token
// (always present) and the top k, as vLLM builds the dict. Tokens are
// sorted by id, each once.
type Entry struct {
	Tokens []Logprob
}

// Lookup returns the token's entry, if the dict holds it.
func (e *Entry) Lookup(id int) (Logprob, bool) {
	i := sort.Search(len(e.Tokens), func(i int) bool { return e.Tokens[i].ID >= id })
	if i < len(e.Tokens) && e.Tokens[i].ID == id {
		return e.Tokens[i], true
	}
	return Logprob{}, false
}

// Top1 returns the id of rank 1, or -1 when the dict has none (k = 0 and
// the actual token is not the argmax).
func (e *Entry) Top1() int {
	for _, t := range e.Tokens {
		if t.Rank == 1 {
			return t.ID
		}
	}
	return -1
}

// TopK returns the ids of the k largest values of row, largest first, ties
// by ascending id (the order of vLLM's top-k and of engine.PositionLogprobs).
// k < 0 or k > len(row) means all of them.
func TopK(row []float32, k int) []int {
	if k < 0 || k > len(row) {
		k = len(row)
	}
	if k == 0 {
		return nil
	}
	h := &minHeap{row: row, ids: make([]int, 0, k)}
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

// minHeap keeps the k best ids seen, the worst on top.
type minHeap struct {
	row []float32
	ids []int
}

// better reports whether id a ranks above id b.
func (h *minHeap) better(a, b int) bool {
	return h.row[a] > h.row[b] || (h.row[a] == h.row[b] && a < b)
}

func (h *minHeap) Len() int           { return len(h.ids) }
func (h *minHeap) Less(i, j int) bool { return h.better(h.ids[j], h.ids[i]) }
func (h *minHeap) Swap(i, j int)      { h.ids[i], h.ids[j] = h.ids[j], h.ids[i] }
func (h *minHeap) Push(x any)         { h.ids = append(h.ids, x.(int)) }
func (h *minHeap) Pop() any {
	x := h.ids[len(h.ids)-1]
	h.ids = h.ids[:len(h.ids)-1]
	return x
}

// rank returns the number of entries of row that are >= row[id].
func rank(row []float32, id int) int {
	n := 0
	for _, v := range row {
		if v >= row[id] {
			n++
		}
	}
	return n
}

// EntryFromRow builds the dict a vLLM-compatible server returns for a
// position whose full log-probability row is row and whose actual token is
// actual, given the row's top ids (TopK): the actual token with its true
// rank, then the top ids with ranks 1..len(top), a top id overwriting the
// actual token's rank when they coincide, as vLLM's dict insertion does.
func EntryFromRow(row []float32, actual int, top []int) Entry {
	return entryFromRow(row, actual, rank(row, actual), top)
}

// entryFromRow is EntryFromRow with the actual token's rank known.
func entryFromRow(row []float32, actual, actualRank int, top []int) Entry {
	toks := make([]Logprob, 0, len(top)+1)
	toks = append(toks, Logprob{ID: actual, Logprob: float64(row[actual]), Rank: actualRank})
	for i, id := range top {
		if id == actual {
			toks[0].Rank = i + 1
			continue
		}
		toks = append(toks, Logprob{ID: id, Logprob: float64(row[id]), Rank: i + 1})
	}
	slices.SortFunc(toks, func(a, b Logprob) int { return cmp.Compare(a.ID, b.ID) })
	return Entry{Tokens: toks}
}
