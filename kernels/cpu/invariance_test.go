//go:build cgo

package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/lowbit-ai/lowbit/kernels"
)

// runAll runs every op on fixed inputs with ops and returns the outputs
// concatenated. The sizes are large enough that the pool splits each op.
// Splits over tokens are given by cuts: each op is run on the pieces
// [cuts[i], cuts[i+1]) of its T rows, one call per piece.
func runAll(ops *Ops, cuts []int) []float32 {
	rng := rand.New(rand.NewPCG(19, 20))
	T := cuts[len(cuts)-1]
	var all []float32
	pieces := func(f func(t0, t1 int)) {
		for i := 0; i+1 < len(cuts); i++ {
			f(cuts[i], cuts[i+1])
		}
	}
	matmul := func(w *kernels.Weight) {
		x := randn(rng, T*w.In, 1)
		y := make([]float32, T*w.Out)
		pieces(func(t0, t1 int) { ops.MatMul(y[t0*w.Out:t1*w.Out], x[t0*w.In:t1*w.In], t1-t0, w) })
		all = append(all, y...)
	}
	for _, f := range allFormats {
		for _, act := range allActs {
			matmul(randWeight(rng, f, act, 203, 512))
		}
	}
	// BF16 rows with a masked tail (1,000 = 62·16 + 8): one token streams
	// them a row at a time (matmul_bf16.c), more tokens take them in tiles.
	matmul(randWeight(rng, kernels.WeightBF16, kernels.ActNone, 203, 1000))
	const D = 1024
	x, g := randn(rng, T*D, 1), randn(rng, D, 1)
	y := make([]float32, T*D)
	pieces(func(t0, t1 int) { ops.RMSNorm(y[t0*D:t1*D], x[t0*D:t1*D], g, t1-t0, D, 1e-6, false) })
	all = append(all, y...)

	const heads, hd = 8, 128
	r := randn(rng, T*heads*hd, 1)
	pos := make([]int32, T)
	for i := range pos {
		pos[i] = int32(3 * i)
	}
	pieces(func(t0, t1 int) { ops.RoPE(r[t0*heads*hd:t1*heads*hd], t1-t0, heads, hd, hd, pos[t0:t1], 1e6) })
	all = append(all, r...)

	const H, KVH, Dh, start = 8, 2, 64, 40
	q := randn(rng, T*H*Dh, 1)
	k, v := randn(rng, (start+T)*KVH*Dh, 1), randn(rng, (start+T)*KVH*Dh, 1)
	out := make([]float32, T*H*Dh)
	pieces(func(t0, t1 int) {
		ops.Attention(out[t0*H*Dh:t1*H*Dh], q[t0*H*Dh:t1*H*Dh], k, v, t1-t0, start+t0, H, KVH, Dh, 0.125)
	})
	all = append(all, out...)

	const V = 5000
	l := randn(rng, T*V, 3)
	pieces(func(t0, t1 int) { ops.LogSoftmax(l[t0*V:t1*V], l[t0*V:t1*V], t1-t0, V) })
	all = append(all, l...)

	const I = 3072
	gate, up := randn(rng, T*I, 2), randn(rng, T*I, 1)
	s := make([]float32, T*I)
	pieces(func(t0, t1 int) { ops.SiLUMul(s[t0*I:t1*I], gate[t0*I:t1*I], up[t0*I:t1*I], (t1-t0)*I) })
	a := make([]float32, T*I)
	pieces(func(t0, t1 int) { ops.Add(a[t0*I:t1*I], gate[t0*I:t1*I], up[t0*I:t1*I], (t1-t0)*I) })
	return append(append(all, s...), a...)
}

// diffBits returns the index of the first element where a and b differ in
// bits, or -1.
func diffBits(a, b []float32) int {
	for i := range a {
		if !sameBits(a[i], b[i]) {
			return i
		}
	}
	return -1
}

// TestBatchInvariance checks that rows computed together are bit-identical
// to rows computed alone or in other groups, on every code path: T = 70
// crosses the matmul's token block (64) and tile (4) boundaries.
func TestBatchInvariance(t *testing.T) {
	splits := [][]int{
		{0, 70},
		{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70},
		{0, 3, 5, 64, 66, 70},
	}
	forEachISA(t, func(t *testing.T, ops *Ops) {
		want := runAll(ops, splits[0])
		for _, cuts := range splits[1:] {
			if i := diffBits(runAll(ops, cuts), want); i >= 0 {
				t.Errorf("rows split at %v differ from rows computed together at output %d", cuts, i)
			}
		}
	})
}

// TestThreadsInvariance checks that results do not depend on the number of
// threads.
func TestThreadsInvariance(t *testing.T) {
	for _, isa := range ISAs() {
		want := runAll(newOps(t, isa, 1), []int{0, 70})
		for _, threads := range []int{2, 3, 5} {
			if i := diffBits(runAll(newOps(t, isa, threads), []int{0, 70}), want); i >= 0 {
				t.Errorf("%s: %d threads differ from 1 thread at output %d", isa, threads, i)
			}
		}
	}
}

// TestPathsAgree checks the code paths against each other on a larger
// matmul: they round differently, but all within the float32 tolerance.
func TestPathsAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for _, f := range allFormats {
		w := randWeight(rng, f, kernels.ActNone, 64, 1024)
		x := randn(rng, 3*w.In, 1)
		for _, isa := range ISAs() {
			t.Run(fmt.Sprintf("%v/%s", f, isa), func(t *testing.T) {
				y := make([]float32, 3*w.Out)
				newOps(t, isa, 0).MatMul(y, x, 3, w)
				checkMatMul(t, y, x, 3, w)
				if slices.ContainsFunc(y, func(v float32) bool { return v != v }) {
					t.Error("NaN in output")
				}
			})
		}
	}
}

// TestMatMuls checks that MatMuls gives every weight the bits of its own
// MatMul: every format and activation quantization, 1 to 3 weights of
// different output sizes (and NVFP4 global scales), decode and T = 70, on
// every code path with 1 and 3 threads; and the same for groups that cannot
// share a dispatch (mixed formats, four weights).
func TestMatMuls(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	const in = 256
	check := func(t *testing.T, ops *Ops, T int, ws []*kernels.Weight) {
		t.Helper()
		x := randn(rng, T*in, 1)
		ys := make([][]float32, len(ws))
		for i, w := range ws {
			ys[i] = make([]float32, T*w.Out)
			for j := range ys[i] {
				ys[i][j] = float32(math.NaN())
			}
		}
		ops.MatMuls(x, T, ys, ws)
		for i, w := range ws {
			want := make([]float32, T*w.Out)
			ops.MatMul(want, x, T, w)
			if j := diffBits(ys[i], want); j >= 0 {
				t.Errorf("T=%d, weight %d of %d (%v, %v): output %d is %g, MatMul gives %g", T, i, len(ws), w.Format, w.Act, j, ys[i][j], want[j])
			}
		}
	}
	for _, isa := range ISAs() {
		for _, threads := range []int{1, 3} {
			t.Run(fmt.Sprintf("%s/%d", isa, threads), func(t *testing.T) {
				ops := newOps(t, isa, threads)
				for _, f := range allFormats {
					for _, act := range allActs {
						ws := []*kernels.Weight{randWeight(rng, f, act, 203, in), randWeight(rng, f, act, 64, in), randWeight(rng, f, act, 517, in)}
						if ws[0] == nil {
							continue
						}
						ws[1].GlobalScale *= 1.5
						for n := 1; n <= 3; n++ {
							for _, T := range []int{1, 70} {
								check(t, ops, T, ws[:n])
							}
						}
					}
				}
				bf, fp8 := randWeight(rng, kernels.WeightBF16, kernels.ActNone, 96, in), randWeight(rng, kernels.WeightFP8Channel, kernels.ActFP8Token, 96, in)
				check(t, ops, 3, []*kernels.Weight{bf, fp8, bf})
				check(t, ops, 3, []*kernels.Weight{bf, bf, bf, bf})
			})
		}
	}
}

// TestMatMulsAllocs: the runtime calls MatMuls twice a layer per step.
func TestMatMulsAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 26))
	ops := newOps(t, "", 0)
	ws := []*kernels.Weight{randWeight(rng, kernels.WeightFP8Channel, kernels.ActFP8Token, 512, 512),
		randWeight(rng, kernels.WeightFP8Channel, kernels.ActFP8Token, 128, 512)}
	x := randn(rng, 512, 1)
	ys := [][]float32{make([]float32, 512), make([]float32, 128)}
	if n := testing.AllocsPerRun(20, func() { ops.MatMuls(x, 1, ys, ws) }); n != 0 {
		t.Errorf("MatMuls allocates %v times a call, want 0", n)
	}
}
