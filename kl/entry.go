package kl

import (
	"cmp"
	"slices"
	"sort"

	"github.com/lowbit-ai/lowbit/runtime"
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
// by ascending id (the order of vLLM's top-k and of the engine's
// logprobs); see runtime.TopK.
func TopK(row []float32, k int) []int { return runtime.TopK(row, k) }

// EntryFromRow builds the dict a vLLM-compatible server returns for a
// position whose full log-probability row is row and whose actual token is
// actual, given the row's top ids (TopK): the actual token with its true
// rank, then the top ids with ranks 1..len(top), a top id overwriting the
// actual token's rank when they coincide, as vLLM's dict insertion does.
func EntryFromRow(row []float32, actual int, top []int) Entry {
	return entryFromRow(row, actual, runtime.Rank(row, actual), top)
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
