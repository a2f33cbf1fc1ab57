package kerneltest

import (
	"math"

	"github.com/lowbit-ai/lowbit/format"
	"github.com/lowbit-ai/lowbit/kernels"
)

// BF16Activations wraps ops into the reference for an executor that runs
// a model on BF16 activations (the CUDA executor's BF16 prefill): MatMul
// rounds x to BF16 (to nearest even) before multiplying the weights round
// selects, and attention takes q and the softmax weights P as BF16 the way
// kernels/cuda's _q1 attention does (see attentionBF16). Everything else
// is ops' own float32 kernels.
func BF16Activations(ops kernels.Ops, round func(w *kernels.Weight) bool) kernels.Ops {
	return bf16Act{ops, round}
}

type bf16Act struct {
	kernels.Ops
	round func(w *kernels.Weight) bool
}

func bf16(v float64) float64 {
	return float64(format.BF16ToFloat32(format.BF16FromFloat32(float32(v))))
}

func (o bf16Act) MatMul(y, x []float32, T int, w *kernels.Weight) {
	if !o.round(w) {
		o.Ops.MatMul(y, x, T, w)
		return
	}
	xb := make([]float32, T*w.In)
	for i, v := range x[:T*w.In] {
		xb[i] = float32(bf16(float64(v)))
	}
	o.Ops.MatMul(y, xb, T, w)
}

func (o bf16Act) Attention(out, q, k, v []float32, T, start, H, KVH, Dh int, scale float32) {
	attentionBF16(out, q, k, v, T, start, H, KVH, Dh, scale)
}

func (o bf16Act) PagedAttention(out, q []float32, kv *kernels.KVCache, T, start, H int, scale float32) {
	k, v := kernels.Gather(kv, start+T)
	attentionBF16(out, q, k, v, T, start, H, kv.KVHeads, kv.HeadDim, scale)
}

// attentionBF16 is causal grouped-query attention in float64 with the
// chunked fold of kernels/cuda's attention_mma.cu: the context in chunks
// of 64 positions at multiples of 64; per chunk s_j = (BF16(q)·k_j)·scale,
// m = max s_j, P_j = exp(s_j − m), l = Σ P_j, o = Σ BF16(P_j)·v_j; the
// chunks folded in order (M, L, O rescaled to the running max); out = O/L.
func attentionBF16(out, q, k, v []float32, T, start, H, KVH, Dh int, scale float32) {
	const chunk = 64
	group := H / KVH
	qb := make([]float64, Dh)
	O, o := make([]float64, Dh), make([]float64, Dh)
	s := make([]float64, chunk)
	for t := range T {
		p := start + t
		for h := range H {
			kh := h / group
			for d := range Dh {
				qb[d] = bf16(float64(q[(t*H+h)*Dh+d]))
			}
			M, L := math.Inf(-1), 0.0
			clear(O)
			for c0 := 0; c0 <= p; c0 += chunk {
				n := min(chunk, p+1-c0)
				m := math.Inf(-1)
				for j := range n {
					kv := k[((c0+j)*KVH+kh)*Dh:]
					var dot float64
					for d := range Dh {
						dot += qb[d] * float64(kv[d])
					}
					s[j] = dot * float64(scale)
					m = max(m, s[j])
				}
				var l float64
				clear(o)
				for j := range n {
					e := math.Exp(s[j] - m)
					l += e
					eb := bf16(e)
					vv := v[((c0+j)*KVH+kh)*Dh:]
					for d := range Dh {
						o[d] += eb * float64(vv[d])
					}
				}
				mn := max(M, m)
				a, b := math.Exp(M-mn), math.Exp(m-mn) // a = 0 for the first chunk
				M, L = mn, L*a+l*b
				for d := range Dh {
					O[d] = O[d]*a + o[d]*b
				}
			}
			for d := range Dh {
				out[(t*H+h)*Dh+d] = float32(O[d] / L)
			}
		}
	}
}
