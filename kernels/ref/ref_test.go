package ref_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/lowbit-ai/lowbit/format"
	"github.com/lowbit-ai/lowbit/kernels"
	"github.com/lowbit-ai/lowbit/kernels/kerneltest"
	"github.com/lowbit-ai/lowbit/kernels/ref"
)

// TestConformance runs the conformance suite on the reference itself: it
// must pass trivially, and proves that the suite runs.
func TestConformance(t *testing.T) { kerneltest.Run(t, ref.Ops{}) }

// TestConformanceFloat32 shows that the tolerances are not too tight: an
// independent float32 implementation of the contract, with a sequential or
// a 16-lane sum, an online softmax and a 2-ulp exp, passes the suite.
func TestConformanceFloat32(t *testing.T) {
	for _, lanes := range []int{1, 16} {
		t.Run(fmt.Sprintf("lanes=%d", lanes), func(t *testing.T) {
			t.Parallel()
			for _, e := range kerneltest.Check(f32Ops{lanes: lanes}) {
				t.Error(e)
			}
		})
	}
}

// The broken implementations below each get one thing wrong; the suite must
// report each.

// dropLastColumn's MatMul ignores the last input.
type dropLastColumn struct{ ref.Ops }

func (dropLastColumn) MatMul(y, x []float32, T int, w *kernels.Weight) {
	in := w.In
	x2 := make([]float32, len(x))
	copy(x2, x)
	for t := range T {
		x2[t*in+in-1] = 0
	}
	ref.Ops{}.MatMul(y, x2, T, w)
}

// reciprocalScale quantizes fp8-token activations as x·(1/s) instead of
// x/s; it differs from the contract only where x/s is a rounding midpoint.
type reciprocalScale struct{ ref.Ops }

func (reciprocalScale) MatMul(y, x []float32, T int, w *kernels.Weight) {
	in := w.In
	for t := range T {
		xs := x[t*in : (t+1)*in]
		var amax float32
		for _, v := range xs {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		s := amax / 448
		inv := 1 / s
		for o := range w.Out {
			wr := make([]float32, in)
			ref.DequantizeRow(wr, w, o)
			var sum float64
			for i, v := range xs {
				sum += float64(format.E4M3ToFloat32(format.E4M3FromFloat32(v*inv))) * float64(wr[i])
			}
			y[t*w.Out+o] = float32(float64(s) * sum)
		}
	}
}

// nvfp4ScaleOrder computes the NVFP4 block scale as amax·(G/6) instead of
// (amax/6)·G.
type nvfp4ScaleOrder struct{ ref.Ops }

func (nvfp4ScaleOrder) MatMul(y, x []float32, T int, w *kernels.Weight) {
	in, G := w.In, w.InputScale
	xq := make([]float32, len(x))
	sc := make([]float32, len(x)/16)
	for g := range sc {
		xs := x[g*16 : (g+1)*16]
		var amax float32
		for _, v := range xs {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		b := format.E4M3ToFloat32(format.E4M3FromFloat32(amax * (G / 6)))
		if b == 0 {
			b = 0.125
		}
		sc[g] = b / G
		for i, v := range xs {
			xq[g*16+i] = format.E2M1ToFloat32(format.E2M1FromFloat32(v / sc[g]))
		}
	}
	wr := make([]float32, in)
	for t := range T {
		for o := range w.Out {
			ref.DequantizeRow(wr, w, o)
			var sum float64
			for i := range in {
				sum += float64(sc[(t*in+i)/16]) * float64(xq[t*in+i]) * float64(wr[i])
			}
			y[t*w.Out+o] = float32(sum)
		}
	}
}

// batchVariant's MatMul is off by one ulp (towards zero) on every other
// nonzero output when T > 1:
// within tolerance of ref, but not batch invariant.
type batchVariant struct{ ref.Ops }

func (batchVariant) MatMul(y, x []float32, T int, w *kernels.Weight) {
	ref.Ops{}.MatMul(y, x, T, w)
	if T > 1 {
		for i := 0; i < len(y); i += 2 {
			if y[i] != 0 {
				y[i] = math.Nextafter32(y[i], 0)
			}
		}
	}
}

// inPlace's MatMul quantizes x in place.
type inPlace struct{ ref.Ops }

func (inPlace) MatMul(y, x []float32, T int, w *kernels.Weight) {
	ref.Ops{}.MatMul(y, x, T, w)
	x[0]++
}

// interleavedRoPE pairs (2j, 2j+1), GPT-J style, instead of (j, j+rotaryDim/2).
type interleavedRoPE struct{ ref.Ops }

func (interleavedRoPE) RoPE(x []float32, T, heads, headDim, rotaryDim int, pos []int32, theta float64) {
	for t := range T {
		for j := range rotaryDim / 2 {
			angle := float64(pos[t]) * math.Pow(theta, -2*float64(j)/float64(rotaryDim))
			c, s := float32(math.Cos(angle)), float32(math.Sin(angle))
			for h := range heads {
				b := (t*heads + h) * headDim
				x1, x2 := x[b+2*j], x[b+2*j+1]
				x[b+2*j], x[b+2*j+1] = x1*c-x2*s, x2*c+x1*s
			}
		}
	}
}

// float32Angle computes RoPE's angle as pos·inv_freq in float32.
type float32Angle struct{ ref.Ops }

func (float32Angle) RoPE(x []float32, T, heads, headDim, rotaryDim int, pos []int32, theta float64) {
	half := rotaryDim / 2
	for t := range T {
		for j := range half {
			invFreq := float32(math.Pow(theta, -2*float64(j)/float64(rotaryDim)))
			angle := float32(pos[t]) * invFreq
			c, s := float32(math.Cos(float64(angle))), float32(math.Sin(float64(angle)))
			for h := range heads {
				b := (t*heads + h) * headDim
				x1, x2 := x[b+j], x[b+j+half]
				x[b+j], x[b+j+half] = x1*c-x2*s, x2*c+x1*s
			}
		}
	}
}

// noCausalMask lets every new token attend to all T new tokens.
type noCausalMask struct{ ref.Ops }

func (noCausalMask) Attention(out, q, k, v []float32, T, start, H, KVH, Dh int, scale float32) {
	n := H * Dh
	for t := range T {
		// The last token's view: the whole cache.
		ref.Ops{}.Attention(out[t*n:(t+1)*n], q[t*n:(t+1)*n], k, v, 1, start+T-1, H, KVH, Dh, scale)
	}
}

// wrongKVHead maps query head h to KV head h%KVH instead of h/(H/KVH).
type wrongKVHead struct{ ref.Ops }

func (wrongKVHead) Attention(out, q, k, v []float32, T, start, H, KVH, Dh int, scale float32) {
	L := start + T
	for h := range H {
		kh := h % KVH
		qh, oh := make([]float32, T*Dh), make([]float32, T*Dh)
		kk, vv := make([]float32, L*Dh), make([]float32, L*Dh)
		for t := range T {
			copy(qh[t*Dh:], q[(t*H+h)*Dh:(t*H+h+1)*Dh])
		}
		for p := range L {
			copy(kk[p*Dh:], k[(p*KVH+kh)*Dh:(p*KVH+kh+1)*Dh])
			copy(vv[p*Dh:], v[(p*KVH+kh)*Dh:(p*KVH+kh+1)*Dh])
		}
		ref.Ops{}.Attention(oh, qh, kk, vv, T, start, 1, 1, Dh, scale)
		for t := range T {
			copy(out[(t*H+h)*Dh:], oh[t*Dh:(t+1)*Dh])
		}
	}
}

// noZeroCentered ignores RMSNorm's zeroCentered.
type noZeroCentered struct{ ref.Ops }

func (noZeroCentered) RMSNorm(y, x, weight []float32, T, D int, eps float32, zeroCentered bool) {
	ref.Ops{}.RMSNorm(y, x, weight, T, D, eps, false)
}

// skipLast's Add leaves the last element unwritten.
type skipLast struct{ ref.Ops }

func (skipLast) Add(out, a, b []float32, n int) { ref.Ops{}.Add(out[:n-1], a, b, n-1) }

// pastEnd's SiLUMul writes one element past the end of out.
type pastEnd struct{ ref.Ops }

func (pastEnd) SiLUMul(out, gate, up []float32, n int) {
	ref.Ops{}.SiLUMul(out, gate, up, n)
	if cap(out) > n {
		out[:n+1][n] = 0
	}
}

// noMaxLogSoftmax does not subtract the max before exp, in float32.
type noMaxLogSoftmax struct{ ref.Ops }

func (noMaxLogSoftmax) LogSoftmax(out, logits []float32, T, V int) {
	for t := range T {
		var sum float32
		for _, v := range logits[t*V : (t+1)*V] {
			sum += float32(math.Exp(float64(v)))
		}
		lse := float32(math.Log(float64(sum)))
		for i := t * V; i < (t+1)*V; i++ {
			out[i] = logits[i] - lse
		}
	}
}

// TestSuiteCanFail runs the suite on each broken implementation, on the
// cases of the op it breaks, and checks that failures are reported.
func TestSuiteCanFail(t *testing.T) {
	tests := []struct {
		name string
		ops  kernels.Ops
		only []string
		want string // in some failure message
	}{
		{"drop last column", dropLastColumn{}, []string{"MatMul/bf16/none", "MatMul/fp8-block"}, "MatMul("},
		{"x·(1/s)", reciprocalScale{}, []string{"MatMul/bf16/fp8-token/T=5/Out=32/In=256/ties"}, "MatMul("},
		{"amax·(G/6)", nvfp4ScaleOrder{}, []string{"MatMul/bf16/nvfp4/T=5/Out=32/In=256/ties", "MatMul/nvfp4/nvfp4/T=3/Out=17/In=384/ties"}, "MatMul("},
		{"batch variant", batchVariant{}, []string{"MatMul/fp8-channel/none"}, "not batch invariant"},
		{"x modified", inPlace{}, []string{"MatMul/bf16/none"}, "input x[0] modified"},
		{"interleaved RoPE", interleavedRoPE{}, []string{"RoPE"}, "RoPE("},
		{"float32 angle", float32Angle{}, []string{"RoPE"}, "RoPE("},
		{"no causal mask", noCausalMask{}, []string{"Attention"}, "Attention("},
		{"wrong KV head", wrongKVHead{}, []string{"Attention"}, "Attention("},
		{"zeroCentered ignored", noZeroCentered{}, []string{"RMSNorm"}, "RMSNorm("},
		{"unwritten element", skipLast{}, []string{"Add"}, "not written"},
		{"write past end", pastEnd{}, []string{"SiLUMul"}, "past its end"},
		{"no max subtracted", noMaxLogSoftmax{}, []string{"LogSoftmax"}, "LogSoftmax("},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			errs := kerneltest.Check(tc.ops, tc.only...)
			if len(errs) == 0 {
				t.Fatalf("Check(%s) found nothing wrong", tc.name)
			}
			found := false
			for _, e := range errs {
				if strings.Contains(e, "kerneltest.Check: no case matches") {
					t.Fatal(e)
				}
				found = found || strings.Contains(e, tc.want)
			}
			if !found {
				t.Errorf("Check(%s): no failure mentions %q; first: %s", tc.name, tc.want, errs[0])
			}
			t.Logf("%d failures, first: %s", len(errs), errs[0])
		})
	}
}

// BenchmarkRef runs the suite's benchmarks on the reference, the baseline
// the fast kernels are measured against (slow: a GEMM of 4096x4096 takes
// seconds).
func BenchmarkRef(b *testing.B) { kerneltest.Bench(b, ref.Ops{}) }
