package ref

import (
	"fmt"
	"math"

	"github.com/lowbit-ai/lowbit/format"
	"github.com/lowbit-ai/lowbit/kernels"
)

// Ops is the reference implementation of kernels.Ops. It is stateless, so
// its zero value is ready to use and safe for concurrent calls. Unlike the
// fast kernels it allocates on every call.
type Ops struct{}

// New returns the reference implementation.
func New() Ops { return Ops{} }

var _ kernels.Ops = Ops{}

// Name returns "ref".
func (Ops) Name() string { return "ref" }

// Dequantize returns w as float32, [w.Out, w.In] row-major, computed element
// by element as the Weight doc states: a BF16 value widened, e4m3(code) *
// scale for the FP8 formats, and e2m1(code) * Scales[b] * GlobalScale, left
// to right in float32, for NVFP4. It panics if w fails w.Check.
func Dequantize(w *kernels.Weight) []float32 {
	mustCheck(w)
	dst := make([]float32, w.Out*w.In)
	for o := range w.Out {
		DequantizeRow(dst[o*w.In:(o+1)*w.In], w, o)
	}
	return dst
}

// DequantizeRow writes row o of w, w.In values, into dst. It does not check
// w; it panics unless len(dst) == w.In.
func DequantizeRow(dst []float32, w *kernels.Weight, o int) {
	if len(dst) != w.In {
		panic("ref: DequantizeRow: len(dst) != w.In")
	}
	in := w.In
	for i := range in {
		n := o*in + i // flat element index
		var v float32
		switch w.Format {
		case kernels.WeightBF16:
			v = format.BF16ToFloat32(uint16(w.Data[2*n]) | uint16(w.Data[2*n+1])<<8)
		case kernels.WeightFP8Channel:
			v = format.E4M3ToFloat32(w.Data[n]) * w.Scales[o]
		case kernels.WeightFP8Tensor:
			v = format.E4M3ToFloat32(w.Data[n]) * w.Scales[0]
		case kernels.WeightFP8Block:
			blocksPerRow := (in + format.FP8BlockSize - 1) / format.FP8BlockSize
			v = format.E4M3ToFloat32(w.Data[n]) * w.Scales[(o/format.FP8BlockSize)*blocksPerRow+i/format.FP8BlockSize]
		case kernels.WeightNVFP4:
			code := w.Data[n/2] & 0xF // element 2i in the low nibble
			if n%2 == 1 {
				code = w.Data[n/2] >> 4
			}
			v = format.E2M1ToFloat32(code) * w.Scales[n/format.NVFP4BlockSize] * w.GlobalScale
		default:
			panic(fmt.Sprintf("ref: unknown weight format %v", w.Format))
		}
		dst[i] = v
	}
}

// ActGroupSize returns the number of consecutive inputs that share one
// activation scale under act for a layer with in inputs: in for ActNone,
// ActFP8Token and ActFP8Tensor, 128 for ActFP8Group128 and 16 for ActNVFP4.
func ActGroupSize(act kernels.ActQuant, in int) int {
	switch act {
	case kernels.ActNone, kernels.ActFP8Token, kernels.ActFP8Tensor:
		return in
	case kernels.ActFP8Group128:
		return format.FP8BlockSize
	case kernels.ActNVFP4:
		return format.NVFP4BlockSize
	}
	panic(fmt.Sprintf("ref: unknown activation quantization %v", act))
}

// QuantizeActivations quantizes one row x of activations as MatMul does
// under act, with inputScale the Weight's InputScale. q[i] gets the value of
// x[i]'s code (E4M3 or E2M1; x[i] itself for ActNone) and scales[g] the
// dequantization scale of group g (1 for ActNone), so that the product is
// Σ_g scales[g] · Σ_{i∈g} q[i]·w[i] with groups of ActGroupSize(act,
// len(x)) inputs. Every step is the float32 operation the ActQuant doc
// writes, in the order it writes them:
//
//	fp8-token, fp8-group128: s = amax / 448 (1 if amax == 0), q = e4m3(E4M3(x / s))
//	fp8-tensor:              s = inputScale, q = e4m3(E4M3(x / s))
//	nvfp4:                   b = E4M3(amax / 6 * inputScale) (code of 0.125 if 0),
//	                         s = e4m3(b) / inputScale, q = e2m1(E2M1(x / s))
//
// with E4M3 format.E4M3FromFloat32 (saturating, round to nearest even) and
// E2M1 format.E2M1FromFloat32 (clamping to ±6, round to nearest even). It
// panics unless len(q) == len(x) and len(scales) == len(x)/group.
func QuantizeActivations(q, scales, x []float32, act kernels.ActQuant, inputScale float32) {
	in := len(x)
	group := ActGroupSize(act, in)
	if len(q) != in || in%group != 0 || len(scales) != in/group {
		panic("ref: QuantizeActivations: need len(q) == len(x) and len(scales) == len(x)/group")
	}
	for g := range scales {
		xs := x[g*group : (g+1)*group]
		qs := q[g*group : (g+1)*group]
		switch act {
		case kernels.ActNone:
			copy(qs, xs)
			scales[g] = 1
		case kernels.ActFP8Token, kernels.ActFP8Tensor, kernels.ActFP8Group128:
			var s float32
			if act == kernels.ActFP8Tensor {
				s = inputScale
			} else {
				amax := absMax(xs)
				s = amax / format.E4M3Max
				if amax == 0 {
					s = 1
				}
			}
			for i, v := range xs {
				qs[i] = format.E4M3ToFloat32(format.E4M3FromFloat32(v / s))
			}
			scales[g] = s
		case kernels.ActNVFP4:
			amax := absMax(xs)
			// (amax / 6) * G: two float32 operations, as written.
			b := format.E4M3ToFloat32(format.E4M3FromFloat32(amax / format.E2M1Max * inputScale))
			if b == 0 {
				b = format.E4M3ScaleEps
			}
			s := b / inputScale
			for i, v := range xs {
				qs[i] = format.E2M1ToFloat32(format.E2M1FromFloat32(v / s))
			}
			scales[g] = s
		default:
			panic(fmt.Sprintf("ref: unknown activation quantization %v", act))
		}
	}
}

// absMax returns max |x| over xs (0 for an empty slice).
func absMax(xs []float32) float32 {
	var m float32
	for _, v := range xs {
		m = max(m, float32(math.Abs(float64(v))))
	}
	return m
}

// MatMul computes y[t,o] = Σ_i x[t,i]·w[o,i] with w dequantized by
// Dequantize and x quantized by QuantizeActivations: per row t and output
// o, each group's sum Σ_{i∈g} q[i]·w[o,i] and the total Σ_g scales[g]·sum_g
// accumulate in float64 (products of two float32 values are exact in
// float64), rounded to float32 once at the end. This is more accurate than
// the float32 accumulation the contract asks of the fast kernels; the
// conformance suite compares those within a tolerance.
func (Ops) MatMul(y, x []float32, T int, w *kernels.Weight) {
	mustCheck(w)
	if T < 0 || len(x) != T*w.In || len(y) != T*w.Out {
		panic(fmt.Sprintf("ref: MatMul: len(x) = %d, len(y) = %d, want %d and %d for T = %d and [%d, %d]",
			len(x), len(y), T*w.In, T*w.Out, T, w.Out, w.In))
	}
	in, out := w.In, w.Out
	wf := Dequantize(w)
	group := ActGroupSize(w.Act, in)
	q := make([]float32, in)
	scales := make([]float32, in/group)
	for t := range T {
		QuantizeActivations(q, scales, x[t*in:(t+1)*in], w.Act, w.InputScale)
		for o := range out {
			wr := wf[o*in : (o+1)*in]
			var acc float64
			for g, s := range scales {
				var sum float64
				for i := g * group; i < (g+1)*group; i++ {
					sum += float64(q[i]) * float64(wr[i])
				}
				acc += float64(s) * sum
			}
			y[t*out+o] = float32(acc)
		}
	}
}

// RMSNorm computes y[t,i] = x[t,i] / sqrt(mean(x[t,:]²) + eps) · g[i] in
// float64, rounded once to float32; g[i] = weight[i], or 1 + weight[i] when
// zeroCentered. y may alias x.
func (Ops) RMSNorm(y, x, weight []float32, T, D int, eps float32, zeroCentered bool) {
	if T < 0 || D <= 0 || len(x) != T*D || len(y) != T*D || len(weight) != D {
		panic(fmt.Sprintf("ref: RMSNorm: len(x) = %d, len(y) = %d, len(weight) = %d for T = %d, D = %d",
			len(x), len(y), len(weight), T, D))
	}
	for t := range T {
		xs, ys := x[t*D:(t+1)*D], y[t*D:(t+1)*D]
		var ss float64
		for _, v := range xs {
			ss += float64(v) * float64(v)
		}
		r := 1 / math.Sqrt(ss/float64(D)+float64(eps))
		for i := range D {
			g := float64(weight[i])
			if zeroCentered {
				g = 1 + g
			}
			ys[i] = float32(float64(xs[i]) * r * g) // reads xs[i] before writing it
		}
	}
}

// RoPE rotates, in place, the first rotaryDim dims of every head NeoX
// style: for j < rotaryDim/2, inv_freq = theta^(-2j/rotaryDim) and angle =
// pos·inv_freq in float64, c and s its cosine and sine rounded to float32,
// and (x1, x2) = (x[j], x[j+rotaryDim/2]) becomes (x1·c - x2·s, x2·c +
// x1·s), evaluated in float64 and rounded once. Dims from rotaryDim on are
// left unchanged.
func (Ops) RoPE(x []float32, T, heads, headDim, rotaryDim int, pos []int32, theta float64) {
	if T < 0 || heads <= 0 || headDim <= 0 || rotaryDim < 0 || rotaryDim > headDim || rotaryDim%2 != 0 ||
		len(x) != T*heads*headDim || len(pos) != T {
		panic(fmt.Sprintf("ref: RoPE: len(x) = %d, len(pos) = %d for T = %d, heads = %d, headDim = %d, rotaryDim = %d",
			len(x), len(pos), T, heads, headDim, rotaryDim))
	}
	half := rotaryDim / 2
	for t := range T {
		for j := range half {
			invFreq := math.Pow(theta, -2*float64(j)/float64(rotaryDim))
			angle := float64(pos[t]) * invFreq
			c := float64(float32(math.Cos(angle)))
			s := float64(float32(math.Sin(angle)))
			for h := range heads {
				base := (t*heads + h) * headDim
				x1, x2 := float64(x[base+j]), float64(x[base+j+half])
				x[base+j] = float32(x1*c - x2*s)
				x[base+j+half] = float32(x2*c + x1*s)
			}
		}
	}
}

// Attention computes causal grouped-query attention in float64: for query
// token t (position start+t) and head h, with KV head kh = h/(H/KVH),
// scores s_p = (Σ_d q[t,h,d]·k[p,kh,d])·scale for p ≤ start+t, weights
// exp(s_p - max s) / Σ exp(s - max s), and out[t,h,:] = Σ_p weight_p ·
// v[p,kh,:], rounded once to float32.
func (Ops) Attention(out, q, k, v []float32, T, start, H, KVH, Dh int, scale float32) {
	if T < 0 || start < 0 || H <= 0 || KVH <= 0 || H%KVH != 0 || Dh <= 0 ||
		len(q) != T*H*Dh || len(out) != T*H*Dh || len(k) != (start+T)*KVH*Dh || len(v) != (start+T)*KVH*Dh {
		panic(fmt.Sprintf("ref: Attention: len(out) = %d, len(q) = %d, len(k) = %d, len(v) = %d for T = %d, start = %d, H = %d, KVH = %d, Dh = %d",
			len(out), len(q), len(k), len(v), T, start, H, KVH, Dh))
	}
	group := H / KVH
	scores := make([]float64, start+T)
	acc := make([]float64, Dh)
	for t := range T {
		n := start + t + 1 // positions 0..start+t are visible
		for h := range H {
			kh := h / group
			qv := q[(t*H+h)*Dh : (t*H+h+1)*Dh]
			m := math.Inf(-1)
			for p := range n {
				kv := k[(p*KVH+kh)*Dh : (p*KVH+kh+1)*Dh]
				var dot float64
				for d := range Dh {
					dot += float64(qv[d]) * float64(kv[d])
				}
				scores[p] = dot * float64(scale)
				m = max(m, scores[p])
			}
			var sum float64
			for p := range n {
				scores[p] = math.Exp(scores[p] - m)
				sum += scores[p]
			}
			clear(acc)
			for p := range n {
				vv := v[(p*KVH+kh)*Dh : (p*KVH+kh+1)*Dh]
				for d := range Dh {
					acc[d] += scores[p] * float64(vv[d])
				}
			}
			o := out[(t*H+h)*Dh : (t*H+h+1)*Dh]
			for d := range Dh {
				o[d] = float32(acc[d] / sum)
			}
		}
	}
}

// WriteKV stores k and v with kernels.WriteKV, the definition of the
// conversion.
func (Ops) WriteKV(kv *kernels.KVCache, k, v []float32, T, start int) {
	kernels.WriteKV(kv, k, v, T, start)
}

// PagedAttention gathers the cache's positions 0..start+T-1 into
// contiguous float32 with kernels.Gather and runs Attention on them.
func (o Ops) PagedAttention(out, q []float32, kv *kernels.KVCache, T, start, H int, scale float32) {
	k, v := kernels.Gather(kv, start+T)
	o.Attention(out, q, k, v, T, start, H, kv.KVHeads, kv.HeadDim, scale)
}

// SiLUMul computes out[i] = gate[i]/(1+exp(-gate[i]))·up[i] in float64,
// rounded once. out may alias gate or up.
func (Ops) SiLUMul(out, gate, up []float32, n int) {
	if n < 0 || len(out) < n || len(gate) < n || len(up) < n {
		panic(fmt.Sprintf("ref: SiLUMul: n = %d with len(out) = %d, len(gate) = %d, len(up) = %d", n, len(out), len(gate), len(up)))
	}
	for i := range n {
		g := float64(gate[i])
		out[i] = float32(g / (1 + math.Exp(-g)) * float64(up[i]))
	}
}

// Add computes out[i] = a[i] + b[i], one float32 addition, which every
// implementation must match bit for bit. out may alias a or b.
func (Ops) Add(out, a, b []float32, n int) {
	if n < 0 || len(out) < n || len(a) < n || len(b) < n {
		panic(fmt.Sprintf("ref: Add: n = %d with len(out) = %d, len(a) = %d, len(b) = %d", n, len(out), len(a), len(b)))
	}
	for i := range n {
		out[i] = a[i] + b[i]
	}
}

// LogSoftmax computes out[t,i] = logits[t,i] - (m + log Σ_j exp(logits[t,j]
// - m)) with m the row's max, in float64, rounded once. out may alias
// logits.
func (Ops) LogSoftmax(out, logits []float32, T, V int) {
	if T < 0 || V <= 0 || len(logits) != T*V || len(out) != T*V {
		panic(fmt.Sprintf("ref: LogSoftmax: len(out) = %d, len(logits) = %d for T = %d, V = %d", len(out), len(logits), T, V))
	}
	for t := range T {
		xs, ys := logits[t*V:(t+1)*V], out[t*V:(t+1)*V]
		m := math.Inf(-1)
		for _, v := range xs {
			m = max(m, float64(v))
		}
		var sum float64
		for _, v := range xs {
			sum += math.Exp(float64(v) - m)
		}
		lse := m + math.Log(sum)
		for i := range V {
			ys[i] = float32(float64(xs[i]) - lse)
		}
	}
}

func mustCheck(w *kernels.Weight) {
	if err := w.Check(); err != nil {
		panic("ref: " + err.Error())
	}
}
