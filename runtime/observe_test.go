package runtime

import (
	"math"
	"slices"
	"testing"

	"github.com/lowbit-ai/lowbit/format"
	"github.com/lowbit-ai/lowbit/kernels/ref"
)

// TestObserve checks that Observe sees every point of every layer in order,
// with the widths the documentation gives, that observing changes no logit,
// and that each observed activation is the one the layer computes with:
// the points are recomputed from their neighbours and the residual stream
// with the same reference ops, and must agree bit for bit.
func TestObserve(t *testing.T) {
	m := loadModel(t, small128.write(t), ref.Ops{})
	d := m.d
	T := len(testTokens)
	plain := forward(t, m, m.NewSequence(0), testTokens)

	type seen struct {
		layer int
		p     ObservePoint
		x     []float32
	}
	var obs []seen
	hidden := [][]float32{make([]float32, T*d.hidden)} // residual before each layer
	for t0, id := range testTokens {
		format.DecodeBF16(hidden[0][t0*d.hidden:(t0+1)*d.hidden], m.embed[2*id*d.hidden:2*(id+1)*d.hidden])
	}
	seq := m.NewSequence(0)
	got, err := m.ForwardWith(seq, testTokens, ForwardOptions{
		Hook: func(layer int, h []float32) { hidden = append(hidden, slices.Clone(h)) },
		Observe: func(layer int, p ObservePoint, x []float32, n int) {
			if n != T {
				t.Errorf("layer %d %s: T = %d, want %d", layer, p, n, T)
			}
			obs = append(obs, seen{layer, p, slices.Clone(x)})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, plain) {
		t.Fatal("logits with Observe differ from a plain forward")
	}
	width := map[ObservePoint]int{
		ObserveAttnInput: d.hidden, ObserveKey: d.kvHeads * d.headDim, ObserveValue: d.kvHeads * d.headDim,
		ObserveOProjInput: d.heads * d.headDim, ObserveMLPInput: d.hidden, ObserveDownInput: d.inter,
	}
	points := ObservePoints()
	if len(obs) != d.layers*len(points) {
		t.Fatalf("%d observations, want %d layers × %d points", len(obs), d.layers, len(points))
	}
	ops := ref.Ops{}
	for i := range d.layers {
		at := map[ObservePoint][]float32{}
		for j, p := range points {
			o := obs[i*len(points)+j]
			if o.layer != i || o.p != p {
				t.Fatalf("observation %d is layer %d %s, want layer %d %s", i*len(points)+j, o.layer, o.p, i, p)
			}
			if len(o.x) != T*width[p] {
				t.Errorf("layer %d %s: %d values, want %d", i, p, len(o.x), T*width[p])
			}
			at[p] = o.x
		}
		ly := &m.layers[i]
		// attn_input = RMSNorm(x)·input_layernorm.
		want := make([]float32, T*d.hidden)
		ops.RMSNorm(want, hidden[i], ly.inputNorm, T, d.hidden, d.eps, false)
		check(t, i, ObserveAttnInput, at[ObserveAttnInput], want)
		// value = attn_input·Wvᵀ.
		v := make([]float32, T*width[ObserveValue])
		ops.MatMul(v, at[ObserveAttnInput], T, &ly.v)
		check(t, i, ObserveValue, at[ObserveValue], v)
		// key: what the cache holds.
		k := make([]float32, T*width[ObserveKey])
		for j := range k {
			k[j] = math.Float32frombits(uint32(seq.pool.k[i][4*j]) | uint32(seq.pool.k[i][4*j+1])<<8 | uint32(seq.pool.k[i][4*j+2])<<16 | uint32(seq.pool.k[i][4*j+3])<<24)
		}
		check(t, i, ObserveKey, at[ObserveKey], k)
		// mlp_input = RMSNorm(x + o_proj_input·Woᵀ)·post_attention_layernorm.
		mid := make([]float32, T*d.hidden)
		ops.MatMul(mid, at[ObserveOProjInput], T, &ly.o)
		ops.Add(mid, hidden[i], mid, T*d.hidden)
		ops.RMSNorm(want, mid, ly.postNorm, T, d.hidden, d.eps, false)
		check(t, i, ObserveMLPInput, at[ObserveMLPInput], want)
		// down_proj_input = silu(mlp_input·Wgᵀ) ⊙ mlp_input·Wuᵀ.
		g, u := make([]float32, T*d.inter), make([]float32, T*d.inter)
		ops.MatMul(g, at[ObserveMLPInput], T, &ly.gate)
		ops.MatMul(u, at[ObserveMLPInput], T, &ly.up)
		ops.SiLUMul(g, g, u, T*d.inter)
		check(t, i, ObserveDownInput, at[ObserveDownInput], g)
		// The next residual = mid + down_proj_input·Wdᵀ.
		ops.MatMul(want, at[ObserveDownInput], T, &ly.down)
		ops.Add(want, mid, want, T*d.hidden)
		if !slices.Equal(want, hidden[i+1]) {
			t.Errorf("layer %d: the residual rebuilt from the observed o_proj and down_proj inputs differs from the hook's", i)
		}
	}
	for _, p := range points {
		if p.String() == "unknown" {
			t.Errorf("point %d has no name", p)
		}
	}
}

func check(t *testing.T, layer int, p ObservePoint, got, want []float32) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("layer %d %s: observed values differ from the recomputed ones (max |Δ| %.3g)", layer, p, maxDiff(got, want))
	}
}
