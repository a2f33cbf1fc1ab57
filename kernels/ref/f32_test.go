package ref_test

import (
	"math"

	"github.com/lowbit-ai/lowbit/format"
	"github.com/lowbit-ai/lowbit/kernels"
)

// f32Ops is a second, independent implementation of the contract the way a
// fast kernel computes it: everything in float32, sums in `lanes` partial
// accumulators combined at the end (lanes = 1 is a plain sequential sum,
// the worst case for rounding error; 16 is what an AVX-512 kernel does),
// NVFP4 weights dequantized as e2m1·(scale·global) rather than left to
// right, RMSNorm with a reciprocal, attention with an online softmax, and
// an exp that is off by up to 2 ulp, as vectorized polynomial exps are. It
// exists to show that the suite's tolerances accept such an
// implementation; it is not a reference.
type f32Ops struct{ lanes int }

func (f32Ops) Name() string { return "f32-test" }

// expf is exp in float32 with a deterministic error of -2..2 ulp.
func expf(x float32) float32 {
	e := float32(math.Exp(float64(x)))
	if e == 0 || math.IsInf(float64(e), 0) {
		return e
	}
	switch math.Float32bits(x) % 5 {
	case 0:
		return math.Nextafter32(math.Nextafter32(e, 0), 0)
	case 1:
		return math.Nextafter32(e, 0)
	case 3:
		return math.Nextafter32(e, float32(math.Inf(1)))
	case 4:
		return math.Nextafter32(math.Nextafter32(e, float32(math.Inf(1))), float32(math.Inf(1)))
	}
	return e
}

// dot returns Σ a[i]·b[i] in float32 with l lanes: lane j sums the
// products i ≡ j mod l, and the lanes are added in order at the end.
func dot(a, b []float32, l int) float32 {
	var acc [64]float32
	i := 0
	for ; i+l <= len(a); i += l {
		for j := range l {
			acc[j] += a[i+j] * b[i+j]
		}
	}
	for j := 0; i < len(a); i, j = i+1, j+1 {
		acc[j] += a[i] * b[i]
	}
	var s float32
	for _, v := range acc[:l] {
		s += v
	}
	return s
}

func (o f32Ops) weightRow(dst []float32, w *kernels.Weight, r int) {
	codes := make([]uint8, w.In)
	switch w.Format {
	case kernels.WeightNVFP4:
		format.UnpackE2M1(codes, w.Data[r*w.In/2:(r+1)*w.In/2])
		for i := range w.In {
			s := w.Scales[(r*w.In+i)/16] * w.GlobalScale
			dst[i] = format.E2M1ToFloat32(codes[i]) * s
		}
	case kernels.WeightBF16:
		format.DecodeBF16(dst, w.Data[2*r*w.In:2*(r+1)*w.In])
	default:
		for i := range w.In {
			var s float32
			switch w.Format {
			case kernels.WeightFP8Channel:
				s = w.Scales[r]
			case kernels.WeightFP8Tensor:
				s = w.Scales[0]
			case kernels.WeightFP8Block:
				s = w.Scales[(r/128)*((w.In+127)/128)+i/128]
			}
			dst[i] = format.E4M3ToFloat32(w.Data[r*w.In+i]) * s
		}
	}
}

func (o f32Ops) MatMul(y, x []float32, T int, w *kernels.Weight) {
	in := w.In
	group := in
	switch w.Act {
	case kernels.ActFP8Group128:
		group = 128
	case kernels.ActNVFP4:
		group = 16
	}
	q := make([]float32, in)
	scales := make([]float32, in/group)
	wf := make([]float32, w.Out*in)
	for r := range w.Out {
		o.weightRow(wf[r*in:(r+1)*in], w, r)
	}
	for t := range T {
		xs := x[t*in : (t+1)*in]
		for g := range scales {
			xg, qg := xs[g*group:(g+1)*group], q[g*group:(g+1)*group]
			var amax float32
			for _, v := range xg {
				amax = max(amax, float32(math.Abs(float64(v))))
			}
			switch w.Act {
			case kernels.ActNone:
				copy(qg, xg)
				scales[g] = 1
			case kernels.ActFP8Token, kernels.ActFP8Group128, kernels.ActFP8Tensor:
				s := amax / 448
				if amax == 0 {
					s = 1
				}
				if w.Act == kernels.ActFP8Tensor {
					s = w.InputScale
				}
				for i, v := range xg {
					qg[i] = format.E4M3ToFloat32(format.E4M3FromFloat32(v / s))
				}
				scales[g] = s
			case kernels.ActNVFP4:
				b := format.E4M3ToFloat32(format.E4M3FromFloat32(amax / 6 * w.InputScale))
				if b == 0 {
					b = 0.125
				}
				s := b / w.InputScale
				for i, v := range xg {
					qg[i] = format.E2M1ToFloat32(format.E2M1FromFloat32(v / s))
				}
				scales[g] = s
			}
		}
		for r := range w.Out {
			wr := wf[r*in : (r+1)*in]
			var acc float32
			for g, s := range scales {
				acc += s * dot(q[g*group:(g+1)*group], wr[g*group:(g+1)*group], o.lanes)
			}
			y[t*w.Out+r] = acc
		}
	}
}

func (o f32Ops) RMSNorm(y, x, weight []float32, T, D int, eps float32, zeroCentered bool) {
	for t := range T {
		xs, ys := x[t*D:(t+1)*D], y[t*D:(t+1)*D]
		ss := dot(xs, xs, o.lanes)
		r := 1 / float32(math.Sqrt(float64(ss/float32(D)+eps)))
		for i := range D {
			g := weight[i]
			if zeroCentered {
				g = 1 + g
			}
			ys[i] = xs[i] * r * g
		}
	}
}

func (o f32Ops) RoPE(x []float32, T, heads, headDim, rotaryDim int, pos []int32, theta float64) {
	half := rotaryDim / 2
	for t := range T {
		for j := range half {
			angle := float64(pos[t]) / math.Pow(theta, float64(2*j)/float64(rotaryDim))
			c, s := float32(math.Cos(angle)), float32(math.Sin(angle))
			for h := range heads {
				b := (t*heads + h) * headDim
				x1, x2 := x[b+j], x[b+j+half]
				x[b+j] = x1*c - x2*s
				x[b+j+half] = x2*c + x1*s
			}
		}
	}
}

func (o f32Ops) Attention(out, q, k, v []float32, T, start, H, KVH, Dh int, scale float32) {
	acc := make([]float32, Dh)
	for t := range T {
		for h := range H {
			kh := h / (H / KVH)
			qv := q[(t*H+h)*Dh : (t*H+h+1)*Dh]
			m, l := float32(math.Inf(-1)), float32(0)
			clear(acc)
			for p := range start + t + 1 {
				s := dot(qv, k[(p*KVH+kh)*Dh:(p*KVH+kh+1)*Dh], o.lanes) * scale
				if s > m {
					corr := expf(m - s)
					for d := range acc {
						acc[d] *= corr
					}
					l *= corr
					m = s
				}
				e := expf(s - m)
				l += e
				vv := v[(p*KVH+kh)*Dh : (p*KVH+kh+1)*Dh]
				for d := range acc {
					acc[d] += e * vv[d]
				}
			}
			for d := range acc {
				out[(t*H+h)*Dh+d] = acc[d] / l
			}
		}
	}
}

func (o f32Ops) SiLUMul(out, gate, up []float32, n int) {
	for i := range n {
		g := gate[i]
		out[i] = g / (1 + expf(-g)) * up[i]
	}
}

func (o f32Ops) Add(out, a, b []float32, n int) {
	for i := range n {
		out[i] = a[i] + b[i]
	}
}

func (o f32Ops) LogSoftmax(out, logits []float32, T, V int) {
	var acc [64]float32
	for t := range T {
		xs, ys := logits[t*V:(t+1)*V], out[t*V:(t+1)*V]
		m := float32(math.Inf(-1))
		for _, v := range xs {
			m = max(m, v)
		}
		clear(acc[:])
		for i, v := range xs {
			acc[i%o.lanes] += expf(v - m)
		}
		var sum float32
		for _, v := range acc[:o.lanes] {
			sum += v
		}
		lse := m + float32(math.Log(float64(sum)))
		for i := range V {
			ys[i] = xs[i] - lse
		}
	}
}

func (f32Ops) WriteKV(kv *kernels.KVCache, k, v []float32, T, start int) {
	kernels.WriteKV(kv, k, v, T, start)
}

func (o f32Ops) PagedAttention(out, q []float32, kv *kernels.KVCache, T, start, H int, scale float32) {
	k, v := kernels.Gather(kv, start+T)
	o.Attention(out, q, k, v, T, start, H, kv.KVHeads, kv.HeadDim, scale)
}
