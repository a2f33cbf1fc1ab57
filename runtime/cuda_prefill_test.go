//go:build cgo

package runtime

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/lowbit-ai/lowbit/checkpoint"
	"github.com/lowbit-ai/lowbit/kernels"
	"github.com/lowbit-ai/lowbit/kernels/cpu"
	"github.com/lowbit-ai/lowbit/kernels/cuda"
	"github.com/lowbit-ai/lowbit/kernels/kerneltest"
)

// TestCUDAPrefillBF16: prompt rows on BF16 activations through cuBLASLt.
// A sequence's logits have the same bits alone and batched with others in
// other chunks (prompt and generated rows mixed in one step); with no
// prompt rows the executor gives the float32 executor's bits; and with
// every row a prompt row the logits match the CPU's forward with the same
// numerics (kerneltest.BF16Activations: x rounded to BF16 before each
// layer matmul) within 1e-3 of the largest logit. Float32 summation order
// alone gives about 1e-6 of it (the float32 executor against the CPU);
// the rest is an activation whose float32 values differ in the last bit
// across a BF16 rounding boundary, which moves it by one BF16 step (2⁻⁸).
// The gap to the CPU's float32 forward is logged: what BF16 activations
// cost on this random tiny model.
func TestCUDAPrefillBF16(t *testing.T) {
	d := cudaDevice(t)
	m, refModel := bf16Models(t, false)
	V := m.VocabSize()
	seqs := bf16Sequences(3)
	prompts := []int{9, 7, 14} // the rest are "generated" rows
	fast, err := NewCUDAExecutor(m, d, 32, 4, kernels.KVBF16, WithPrefillBF16())
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close()
	together := stepsCase(t, fast, seqs, prompts, [][]int{{5, 7, 3}, {6, 7, 4}, {12, 7, 19}, {12, 7, 20}}, V)
	for i, s := range seqs {
		alone := stepsCase(t, fast, seqs[i:i+1], prompts[i:i+1], [][]int{{len(s)}}, V)[0]
		if !sameBits(alone, together[i]) {
			t.Errorf("sequence %d: BF16-prefill logits alone differ from batched (max |Δ| %.3g)", i, maxDiff(alone, together[i]))
		}
	}
	exact, err := NewCUDAExecutor(m, d, 32, 4, kernels.KVBF16)
	if err != nil {
		t.Fatal(err)
	}
	defer exact.Close()
	none, all := []int{0, 0, 0}, []int{12, 7, 20}
	steps := [][]int{{3, 2, 8}, {12, 7, 20}}
	a, b := stepsCase(t, fast, seqs, none, steps, V), stepsCase(t, exact, seqs, none, steps, V)
	for i := range seqs {
		if !sameBits(a[i], b[i]) {
			t.Errorf("sequence %d without prompt rows: the BF16-prefill executor differs from the float32 one (max |Δ| %.3g)", i, maxDiff(a[i], b[i]))
		}
	}
	matchBF16Reference(t, "BF16 prefill", stepsCase(t, fast, seqs, all, steps, V), m, refModel, seqs, all, steps)
}

// matchBF16Reference requires a GPU executor's logits (gpu, of stepsCase on
// seqs, prompts and steps) to be within 1e-3 of the largest logit of the
// CPU forward of refModel (m with kerneltest.BF16Activations: the same
// numerics), and logs their distance to m's float32 forward. what names
// the executor's mode.
func matchBF16Reference(t *testing.T, what string, gpu [][]float32, m, refModel *Model, seqs [][]int, prompts []int, steps [][]int) {
	t.Helper()
	V := m.VocabSize()
	refPool, err := refModel.NewKVPool(32, 4, kernels.KVBF16)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := m.NewKVPool(32, 4, kernels.KVBF16)
	if err != nil {
		t.Fatal(err)
	}
	ref, f32 := stepsCase(t, refPool, seqs, prompts, steps, V), stepsCase(t, pool, seqs, prompts, steps, V)
	for i := range seqs {
		var scale float64
		for _, x := range ref[i] {
			scale = max(scale, math.Abs(float64(x)))
		}
		diff := maxDiff(ref[i], gpu[i])
		t.Logf("sequence %d: max |Δ logit| GPU %s vs the CPU with BF16 activations %.3g, vs the CPU's float32 forward %.3g (logits up to %.3g)",
			i, what, diff, maxDiff(f32[i], gpu[i]), scale)
		if diff > 1e-3*max(scale, 1) {
			t.Errorf("sequence %d: %s logits differ from the same numerics on the CPU by %.3g, want <= %.3g", i, what, diff, 1e-3*max(scale, 1))
		}
	}
}

// bf16Models loads the tiny Qwen3 model on the CPU's kernels, and beside it
// the reference with BF16 activations (kerneltest.BF16Activations) before
// every layer matmul, and before the lm_head too when head.
func bf16Models(t *testing.T, head bool) (m, ref *Model) {
	t.Helper()
	ops, err := cpu.New()
	if err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() { ops.Close() })
	dir := tinyModel(t, checkpoint.Qwen3)
	m = loadModel(t, dir, ops)
	V := m.VocabSize()
	return m, loadModel(t, dir, kerneltest.BF16Activations(ops, func(w *kernels.Weight) bool { return head || w.Out != V }))
}

// bf16Sequences returns three random sequences of 12, 7 and 20 tokens.
func bf16Sequences(seed uint64) [][]int {
	rng := rand.New(rand.NewPCG(seed, seed+1))
	seqs := make([][]int, 3)
	for i, n := range []int{12, 7, 20} {
		for range n {
			seqs[i] = append(seqs[i], rng.IntN(151000))
		}
	}
	return seqs
}

// TestCUDABF16Activations: WithBF16Activations, every row on BF16
// activations. A sequence's logits have the same bits alone (its prompt
// and generated rows in one step: the generated rows split to one term
// beside cuBLASLt's prompt rows) and batched with others in steps of one
// or a few generated tokens (the decode steps' producers writing one term,
// lb_mma_gemv_bulk1); and with every row a generated one the logits match
// the CPU's forward with BF16 activations before every matmul, the lm_head
// included, within TestCUDAPrefillBF16's 1e-3 of the largest logit, for the
// same reason. GEMVNormsInput gives the bits of GEMVNormsNone, and its
// steps of one or two generated tokens run the q/k/v GEMV with the input
// norm inside (lb_mma_gemv_bulk1_rms).
func TestCUDABF16Activations(t *testing.T) {
	d := cudaDevice(t)
	m, refModel := bf16Models(t, true)
	V := m.VocabSize()
	seqs := bf16Sequences(5)
	prompts := []int{9, 7, 14}
	var base [][]float32
	for _, c := range []struct {
		name  string
		norms GEMVNorms
		fused bool // whether lb_mma_gemv_bulk1_rms must run
	}{
		{"none", GEMVNormsNone, false},
		{"input", GEMVNormsInput, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			fast, err := NewCUDAExecutor(m, d, 32, 4, kernels.KVBF16, WithBF16Activations(), WithGEMVNorms(c.norms))
			if err != nil {
				t.Fatal(err)
			}
			defer fast.Close()
			if err := d.StartProfile(); err != nil {
				t.Fatal(err)
			}
			together := stepsCase(t, fast, seqs, prompts, [][]int{{5, 7, 3}, {9, 7, 14}, {10, 7, 15}, {11, 7, 16}, {12, 7, 20}}, V)
			ran := slices.ContainsFunc(d.StopProfile(), func(kt cuda.KernelTime) bool { return kt.Name == "lb_mma_gemv_bulk1_rms" })
			if ran != c.fused {
				t.Errorf("lb_mma_gemv_bulk1_rms ran: %v, want %v", ran, c.fused)
			}
			if base == nil {
				base = together
			}
			for i, s := range seqs {
				if !sameBits(together[i], base[i]) {
					t.Errorf("sequence %d: logits differ from those of every norm launched (max |Δ| %.3g)", i, maxDiff(together[i], base[i]))
				}
				alone := stepsCase(t, fast, seqs[i:i+1], prompts[i:i+1], [][]int{{len(s)}}, V)[0]
				if !sameBits(alone, together[i]) {
					t.Errorf("sequence %d: BF16-activation logits alone differ from batched (max |Δ| %.3g)", i, maxDiff(alone, together[i]))
				}
			}
			none := []int{0, 0, 0}
			steps := [][]int{{3, 2, 8}, {4, 3, 9}, {12, 7, 20}}
			matchBF16Reference(t, "BF16 activations", stepsCase(t, fast, seqs, none, steps, V), m, refModel, seqs, none, steps)
		})
	}
}

// TestGEMVNorms: LOWBIT_RMS_GEMV's values and the widths each fuses; an
// unknown value is an error. Runs without a GPU.
func TestGEMVNorms(t *testing.T) {
	for _, c := range []struct {
		env       string
		want      GEMVNorms
		fuses1024 bool
		fuses4096 bool
		wantErr   bool
	}{
		{"", GEMVNormsAuto, true, false, false},
		{"auto", GEMVNormsAuto, true, false, false},
		{"qkv", GEMVNormsInput, true, true, false},
		{"0", GEMVNormsNone, false, false, false},
		{"all", 0, false, false, true},
	} {
		t.Setenv("LOWBIT_RMS_GEMV", c.env)
		n, err := gemvNormsFromEnv()
		if (err != nil) != c.wantErr {
			t.Errorf("LOWBIT_RMS_GEMV=%q: error %v, want one: %v", c.env, err, c.wantErr)
			continue
		}
		if err != nil {
			continue
		}
		if n != c.want || n.fuses(1024) != c.fuses1024 || n.fuses(4096) != c.fuses4096 {
			t.Errorf("LOWBIT_RMS_GEMV=%q: %v fusing at 1024 %v, at 4096 %v; want %v, %v, %v", c.env, n, n.fuses(1024), n.fuses(4096),
				c.want, c.fuses1024, c.fuses4096)
		}
	}
}
