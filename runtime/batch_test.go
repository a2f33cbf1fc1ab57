package runtime

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lowbit-ai/lowbit/kernels"
)

// TestForwardBatchInvariance runs three sequences alone (one forward each,
// blocks 0, 1, 2, ...) and together (chunked differently, interleaved in
// batches, with shuffled block tables in one shared pool) and requires the
// same logits bit for bit, for every KV dtype and backend: what the
// engine's batch invariance rests on.
func TestForwardBatchInvariance(t *testing.T) {
	dir := small128.write(t)
	rng := rand.New(rand.NewPCG(5, 6))
	lens := []int{12, 7, 20}
	seqs := make([][]int, len(lens))
	for i, n := range lens {
		for range n {
			seqs[i] = append(seqs[i], rng.IntN(small128.vocab))
		}
	}
	const bs = 4
	for _, b := range backends {
		for _, dt := range []kernels.KVDType{kernels.KVFloat32, kernels.KVBF16, kernels.KVFP8} {
			t.Run(b.name+"/"+dt.String(), func(t *testing.T) {
				m := loadModel(t, dir, b.ops(t))
				V := m.VocabSize()
				alone := make([][]float32, len(seqs))
				for i, toks := range seqs {
					pool, err := m.NewKVPool(8, bs, dt)
					if err != nil {
						t.Fatal(err)
					}
					alone[i], err = m.ForwardBatch(pool, []BatchEntry{{Blocks: []int32{0, 1, 2, 3, 4, 5, 6, 7}, Tokens: toks, Logits: len(toks)}}, nil)
					if err != nil {
						t.Fatal(err)
					}
				}
				if dt == kernels.KVFloat32 {
					seq := m.NewSequence(0)
					got := forward(t, m, seq, seqs[0])
					if !sameBits(got, alone[0]) {
						t.Errorf("ForwardBatch with a float32 pool differs from Forward on a Sequence")
					}
				}
				pool, err := m.NewKVPool(32, bs, dt)
				if err != nil {
					t.Fatal(err)
				}
				together := executorCase(t, pool, seqs, V)
				for i := range seqs {
					if !sameBits(together[i], alone[i]) {
						t.Errorf("sequence %d: logits in a batch differ from alone (max |Δ| %.3g)", i, maxDiff(together[i], alone[i]))
					}
				}
			})
		}
	}
}

func sameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// executorCase runs three sequences chunked and interleaved over an
// executor and returns each one's logits rows for all its tokens.
func executorCase(t *testing.T, exec Executor, seqs [][]int, V int) [][]float32 {
	t.Helper()
	return stepsCase(t, exec, seqs, nil, [][]int{{5, 7, 3}, {6, 7, 4}, {12, 7, 19}, {12, 7, 20}}, V)
}

// stepsCase runs seqs over exec in the chunks of steps (each entry's end
// position a step), every row returning logits, the first prompts[i] of
// sequence i's tokens marked as prompt rows (nil: none), on block tables
// drawn from a fixed permutation of the pool; it returns each sequence's
// logits.
func stepsCase(t *testing.T, exec Executor, seqs [][]int, prompts []int, steps [][]int, V int) [][]float32 {
	t.Helper()
	bs := exec.BlockSize()
	perm := rand.New(rand.NewPCG(8, 8)).Perm(exec.Blocks())
	var tables [][]int32
	for i, s := range seqs {
		var tb []int32
		for j := range (len(s) + bs - 1) / bs {
			tb = append(tb, int32(perm[8*i+j]))
		}
		tables = append(tables, tb)
	}
	out := make([][]float32, len(seqs))
	done := make([]int, len(seqs))
	for _, ends := range steps {
		var batch []BatchEntry
		var who []int
		for i, end := range ends {
			end = min(end, len(seqs[i]))
			if end <= done[i] {
				continue
			}
			e := BatchEntry{Blocks: tables[i], Start: done[i], Tokens: seqs[i][done[i]:end], Logits: end - done[i]}
			if prompts != nil {
				e.Prompt = max(prompts[i]-done[i], 0)
			}
			batch = append(batch, e)
			who = append(who, i)
		}
		logits, err := exec.Forward(batch)
		if err != nil {
			t.Fatal(err)
		}
		r := 0
		for k, i := range who {
			n := batch[k].Logits
			out[i] = append(out[i], logits[r*V:(r+n)*V]...)
			r += n
			done[i] += n
		}
	}
	return out
}
