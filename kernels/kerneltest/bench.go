package kerneltest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lowbit-ai/lowbit/kernels"
)

// Bench benchmarks ops on the shapes of an 8B-class model (hidden size
// 4096, 32 query and 8 KV heads of 128 dims, intermediate size 12288, a
// 151936-token vocabulary), one sub-benchmark per op and shape:
//
//	MatMul/<format>/<act>/T=1/4096x4096   GEMV (decode): bytes = the weight's
//	MatMul/<format>/<act>/T=64/4096x4096  GEMM (prefill): bytes = the weight's
//	RMSNorm/T=<T>/D=4096                  bytes = x, y and weight
//	RoPE/T=<T>/heads=32/headDim=128       bytes = x, read and written
//	Attention/T=1/L=4096/...              decode: bytes = the K and V cache read
//	Attention/T=64/L=4096/...             prefill chunk: bytes = the cache
//	SiLUMul, Add, LogSoftmax              bytes = inputs and output
//
// MB/s comes from b.SetBytes; MatMul and Attention also report GFLOP/s
// (2 flops per multiply-add). Inputs are random, drawn once per
// sub-benchmark before the timer starts.
func Bench(b *testing.B, ops kernels.Ops) {
	c := &checker{rng: rand.New(rand.NewPCG(1, 2))}
	const hidden, inter, vocab = 4096, 12288, 151936
	const H, KVH, Dh = 32, 8, 128

	for _, fa := range []struct {
		f kernels.WeightFormat
		a kernels.ActQuant
	}{
		{kernels.WeightBF16, kernels.ActNone},
		{kernels.WeightFP8Channel, kernels.ActFP8Token},
		{kernels.WeightFP8Tensor, kernels.ActFP8Tensor},
		{kernels.WeightFP8Block, kernels.ActFP8Group128},
		{kernels.WeightNVFP4, kernels.ActNVFP4},
		{kernels.WeightNVFP4, kernels.ActNone},
	} {
		for _, T := range []int{1, 64} {
			b.Run(fmt.Sprintf("MatMul/%v/%v/T=%d/%dx%d", fa.f, fa.a, T, hidden, hidden), func(b *testing.B) {
				w := c.weight(fa.f, hidden, hidden)
				w.Act = fa.a
				x := c.activations(T, hidden, w, false)
				y := make([]float32, T*hidden)
				b.SetBytes(int64(len(w.Data) + 4*len(w.Scales)))
				for b.Loop() {
					ops.MatMul(y, x, T, w)
				}
				reportFlops(b, 2*float64(T)*hidden*hidden)
			})
		}
	}
	for _, T := range []int{1, 64} {
		b.Run(fmt.Sprintf("RMSNorm/T=%d/D=%d", T, hidden), func(b *testing.B) {
			x, w, y := c.fill(T*hidden, 1), c.fill(hidden, 1), make([]float32, T*hidden)
			b.SetBytes(int64(4 * (2*T*hidden + hidden)))
			for b.Loop() {
				ops.RMSNorm(y, x, w, T, hidden, 1e-6, false)
			}
		})
		b.Run(fmt.Sprintf("RoPE/T=%d/heads=%d/headDim=%d", T, H, Dh), func(b *testing.B) {
			x := c.fill(T*H*Dh, 1)
			pos := make([]int32, T)
			for t := range pos {
				pos[t] = int32(1000 + t)
			}
			b.SetBytes(int64(4 * 2 * T * H * Dh))
			for b.Loop() {
				ops.RoPE(x, T, H, Dh, Dh, pos, 1e6)
			}
		})
		L := 4096
		b.Run(fmt.Sprintf("Attention/T=%d/L=%d/H=%d/KVH=%d/Dh=%d", T, L, H, KVH, Dh), func(b *testing.B) {
			q, k, v := c.fill(T*H*Dh, 1), c.fill(L*KVH*Dh, 1), c.fill(L*KVH*Dh, 1)
			out := make([]float32, T*H*Dh)
			b.SetBytes(int64(4 * 2 * L * KVH * Dh))
			for b.Loop() {
				ops.Attention(out, q, k, v, T, L-T, H, KVH, Dh, float32(1/math.Sqrt(Dh)))
			}
			// q·k and P·v over the L-T+t+1 visible positions of each token.
			var pairs float64
			for t := range T {
				pairs += float64(L - T + t + 1)
			}
			reportFlops(b, 4*pairs*H*Dh)
		})
		b.Run(fmt.Sprintf("SiLUMul/T=%d/n=%d", T, inter), func(b *testing.B) {
			n := T * inter
			g, u, o := c.fill(n, 3), c.fill(n, 1), make([]float32, n)
			b.SetBytes(int64(4 * 3 * n))
			for b.Loop() {
				ops.SiLUMul(o, g, u, n)
			}
		})
		b.Run(fmt.Sprintf("Add/T=%d/n=%d", T, hidden), func(b *testing.B) {
			n := T * hidden
			x, y, o := c.fill(n, 1), c.fill(n, 1), make([]float32, n)
			b.SetBytes(int64(4 * 3 * n))
			for b.Loop() {
				ops.Add(o, x, y, n)
			}
		})
	}
	for _, T := range []int{1, 8} {
		b.Run(fmt.Sprintf("LogSoftmax/T=%d/V=%d", T, vocab), func(b *testing.B) {
			x, o := c.fill(T*vocab, 5), make([]float32, T*vocab)
			b.SetBytes(int64(4 * 2 * T * vocab))
			for b.Loop() {
				ops.LogSoftmax(o, x, T, vocab)
			}
		})
	}
}

// reportFlops reports flops per op as GFLOP/s.
func reportFlops(b *testing.B, flops float64) {
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(flops*float64(b.N)/s/1e9, "GFLOP/s")
	}
}
