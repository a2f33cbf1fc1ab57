//go:build cgo

package runtime

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lowbit-ai/lowbit/checkpoint"
	"github.com/lowbit-ai/lowbit/kernels"
	"github.com/lowbit-ai/lowbit/kernels/cpu"
)

// promptCase runs seqs through exec in the chunks of steps (each entry's
// end position a step), their first prompts[i] tokens marked as prompt
// rows, every row returning logits; it returns each sequence's logits.
func promptCase(t *testing.T, exec Executor, seqs [][]int, prompts []int, steps [][]int, V int) [][]float32 {
	t.Helper()
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
			blocks := make([]int32, 8)
			for j := range blocks {
				blocks[j] = int32(8*i + (j*5)%8)
			}
			batch = append(batch, BatchEntry{Blocks: blocks, Start: done[i], Tokens: seqs[i][done[i]:end], Logits: end - done[i],
				Prompt: max(prompts[i]-done[i], 0)})
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

// TestCUDAPrefillBF16: prompt rows on BF16 activations through cuBLASLt.
// A sequence's logits have the same bits alone and batched with others in
// other chunks (prompt and generated rows mixed in one step); with no
// prompt rows the executor gives the float32 executor's bits; and the
// logits stay within BF16 rounding of the CPU's float32 forward: 2e-2 of
// the largest logit (activations rounded to 8 significant bits, relative
// 2⁻⁹ each, through the tiny model's layers; the measured gap is logged).
func TestCUDAPrefillBF16(t *testing.T) {
	d := cudaDevice(t)
	ops, err := cpu.New()
	if err != nil {
		t.Skip(err)
	}
	defer ops.Close()
	m := loadModel(t, tinyModel(t, checkpoint.Qwen3), ops)
	rng := rand.New(rand.NewPCG(3, 4))
	seqs := make([][]int, 3)
	for i, n := range []int{12, 7, 20} {
		for range n {
			seqs[i] = append(seqs[i], rng.IntN(151000))
		}
	}
	prompts := []int{9, 7, 14} // the rest are "generated" rows
	V := m.VocabSize()
	fast, err := NewCUDAExecutor(m, d, 32, 4, kernels.KVBF16, WithPrefillBF16())
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close()
	together := promptCase(t, fast, seqs, prompts, [][]int{{5, 7, 3}, {6, 7, 4}, {12, 7, 19}, {12, 7, 20}}, V)
	for i, s := range seqs {
		alone := promptCase(t, fast, seqs[i:i+1], prompts[i:i+1], [][]int{{len(s)}}, V)[0]
		if !sameBits(alone, together[i]) {
			t.Errorf("sequence %d: BF16-prefill logits alone differ from batched (max |Δ| %.3g)", i, maxDiff(alone, together[i]))
		}
	}
	exact, err := NewCUDAExecutor(m, d, 32, 4, kernels.KVBF16)
	if err != nil {
		t.Fatal(err)
	}
	defer exact.Close()
	none := []int{0, 0, 0}
	steps := [][]int{{3, 2, 8}, {12, 7, 20}}
	a, b := promptCase(t, fast, seqs, none, steps, V), promptCase(t, exact, seqs, none, steps, V)
	for i := range seqs {
		if !sameBits(a[i], b[i]) {
			t.Errorf("sequence %d without prompt rows: the BF16-prefill executor differs from the float32 one (max |Δ| %.3g)", i, maxDiff(a[i], b[i]))
		}
	}
	pool, err := m.NewKVPool(32, 4, kernels.KVBF16)
	if err != nil {
		t.Fatal(err)
	}
	ref := promptCase(t, pool, seqs, prompts, steps, V)
	for i := range seqs {
		var scale float64
		for _, x := range ref[i] {
			scale = max(scale, math.Abs(float64(x)))
		}
		diff := maxDiff(ref[i], together[i])
		t.Logf("sequence %d: max |Δ logit| BF16 prefill vs CPU float32 %.3g (logits up to %.3g)", i, diff, scale)
		if diff > 2e-2*max(scale, 1) {
			t.Errorf("sequence %d: BF16-prefill logits differ from the CPU's by %.3g, want <= %.3g", i, diff, 2e-2*max(scale, 1))
		}
	}
}
