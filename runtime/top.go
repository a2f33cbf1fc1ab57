package runtime

import "math"

// TopLogits is one logits row reduced to what sampling and log-probabilities
// need when only the row's best entries matter (greedy or top-k sampling,
// top-n log-probabilities): its k largest logits (IDs and Logits, largest
// first, ties by ascending id), their log-probabilities (Logprobs), and
// Ties, the number of the row's entries whose log-probability is at least
// that of the last listed one (k or more), which ranks every listed id
// exactly. An executor on a GPU returns these instead of whole rows, so
// that a decode step copies k entries a row back, not the vocabulary.
type TopLogits struct {
	IDs      []int32
	Logits   []float32
	Logprobs []float32
	Ties     int
}

// Rank returns listed entry i's rank as Rank does on the log-probability
// row: the number of entries whose log-probability is at least its own
// (a NaN ranks last, at vocab).
func (t *TopLogits) Rank(i, vocab int) int {
	v := t.Logprobs[i]
	switch {
	case math.IsNaN(float64(v)):
		return vocab
	case v == t.Logprobs[len(t.Logprobs)-1]:
		return t.Ties
	}
	n := 0
	for _, x := range t.Logprobs {
		if x >= v {
			n++
		}
	}
	return n
}

// TopLogitsOf reduces a row to its TopLogits given its log-softmax lp: the
// reference that executors computing them on a device are checked against.
func TopLogitsOf(row, lp []float32, k int) TopLogits {
	ids := TopK(row, k)
	t := TopLogits{IDs: make([]int32, len(ids)), Logits: make([]float32, len(ids)), Logprobs: make([]float32, len(ids))}
	for i, id := range ids {
		t.IDs[i], t.Logits[i], t.Logprobs[i] = int32(id), row[id], lp[id]
	}
	if len(ids) > 0 {
		t.Ties = Rank(lp, ids[len(ids)-1])
	}
	return t
}

// TopExecutor is an Executor that can return, for the logits rows a caller
// marks, only their TopLogits. ForwardTop runs the batch as Forward does;
// logits row r (in Forward's order) comes back whole when full[r], in rows
// (the whole rows one after the other, written into dst when it can hold
// them), and otherwise as tops[r] with k ≤ TopMax() entries. TopMax 0
// means the executor returns whole rows only.
type TopExecutor interface {
	Executor
	TopMax() int
	ForwardTop(batch []BatchEntry, k int, full []bool, dst []float32) (rows []float32, tops []TopLogits, err error)
}
