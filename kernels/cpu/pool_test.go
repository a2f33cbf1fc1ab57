//go:build cgo

package cpu

import (
	"math/rand/v2"
	"testing"

	"github.com/lowbit-ai/lowbit/kernels"
)

// TestPoolHandoff runs jobs of few and of more tasks back to back on a pool
// with more threads than CPUs, where workers are often descheduled between
// reading a job's word and taking a task, and checks that every call returns
// only once all its outputs are written. Before lb_pool_run closed the old
// job's word, a late worker could take a task of the next job before it was
// published and count it twice; this test then failed within 1-2 s on the
// 2-CPU development VM (4 runs of 4), and passes in about 3 s since.
func TestPoolHandoff(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 28))
	ops := newOps(t, "", 3*max(kernels.OnlineCPUs(), 2))
	small := randWeight(rng, kernels.WeightBF16, kernels.ActNone, 8, 8192)
	big := randWeight(rng, kernels.WeightBF16, kernels.ActNone, 256, 1024)
	xs, xb := randn(rng, small.In, 1), randn(rng, big.In, 1)
	ys, yb, want := make([]float32, small.Out), make([]float32, big.Out), make([]float32, big.Out)
	ops.MatMul(want, xb, 1, big)
	n := 100000
	if testing.Short() {
		n = 5000
	}
	for it := range n {
		clear(yb)
		ops.MatMul(ys, xs, 1, small)
		ops.MatMul(yb, xb, 1, big)
		if i := diffBits(yb, want); i >= 0 {
			t.Fatalf("call %d returned before output %d was written", it, i)
		}
	}
}
