package runtime

import (
	"errors"
	"fmt"
	"math"

	"github.com/lowbit-ai/lowbit/format"
)

// ErrSequenceFull is wrapped by the error of a Forward that would take a
// Sequence past its limit.
var ErrSequenceFull = errors.New("sequence limit reached")

// Sequence is the state of one sequence: its KV cache, one contiguous
// float32 buffer per layer for keys and one for values, each [positions,
// kv_heads, head_dim], grown (by doubling, with a copy) as tokens arrive up
// to the sequence's limit; and the scratch buffers of its forward passes.
// A Sequence is not safe for concurrent use; distinct Sequences of one
// Model are independent.
type Sequence struct {
	m     *Model
	limit int
	n     int         // positions held
	cap   int         // positions allocated
	k, v  [][]float32 // per layer, [cap, kv_heads, head_dim]
	buf   scratch
}

// scratch holds the activations of a forward of up to t tokens.
type scratch struct {
	t                      int
	x, h, q, att, gate, up []float32
	pos                    []int32
}

// NewSequence returns an empty sequence that may grow to limit positions
// (prompt and generated tokens together); limit <= 0 or above
// max_position_embeddings means max_position_embeddings. Memory is taken as
// the sequence grows: KVBytesPerToken per position.
func (m *Model) NewSequence(limit int) *Sequence {
	if limit <= 0 || limit > m.d.maxPos {
		limit = m.d.maxPos
	}
	return &Sequence{m: m, limit: limit, k: make([][]float32, m.d.layers), v: make([][]float32, m.d.layers)}
}

// Len returns the number of positions the sequence holds.
func (s *Sequence) Len() int { return s.n }

// Limit returns the most positions the sequence may hold.
func (s *Sequence) Limit() int { return s.limit }

// Truncate drops every position from n on (0 empties the sequence), keeping
// the memory; the next Forward continues at position n.
func (s *Sequence) Truncate(n int) {
	s.n = min(max(n, 0), s.n)
}

// grow makes room for need positions.
func (s *Sequence) grow(need int) {
	if need <= s.cap {
		return
	}
	c := min(max(need, 2*s.cap, 16), s.limit)
	kvd := s.m.d.kvHeads * s.m.d.headDim
	for i := range s.k {
		k, v := make([]float32, c*kvd), make([]float32, c*kvd)
		copy(k, s.k[i][:s.n*kvd])
		copy(v, s.v[i][:s.n*kvd])
		s.k[i], s.v[i] = k, v
	}
	s.cap = c
}

// scratch returns buffers for a forward of t tokens.
func (s *Sequence) scratch(t int) *scratch {
	b := &s.buf
	if t > b.t {
		d := s.m.d
		qd := d.heads * d.headDim
		*b = scratch{
			t: t, x: make([]float32, t*d.hidden), h: make([]float32, t*d.hidden),
			q: make([]float32, t*qd), att: make([]float32, t*qd),
			gate: make([]float32, t*d.inter), up: make([]float32, t*d.inter),
			pos: make([]int32, t),
		}
	}
	return b
}

// ForwardOptions adjusts a forward pass.
type ForwardOptions struct {
	// LastOnly returns the logits of the last token only ([1, vocab]), which
	// is all that generation needs after a prefill; prompt log-probabilities
	// need every row.
	LastOnly bool
	// Hook, when set, is called after each decoder layer with the layer's
	// index and the residual stream hidden [T, hidden] (T new tokens), which
	// is valid only during the call and must not be modified.
	Hook func(layer int, hidden []float32)
}

// Forward runs T = len(tokens) new tokens of seq (a prefill when T > 1, a
// decode step when T = 1) and returns their logits, [T, vocab] row-major,
// in a new slice. The tokens take positions seq.Len() .. seq.Len()+T-1 and
// their keys and values are appended to seq's cache.
func (m *Model) Forward(seq *Sequence, tokens []int) ([]float32, error) {
	return m.ForwardWith(seq, tokens, ForwardOptions{})
}

// ForwardWith is Forward with options. The numerics are those of the
// package documentation: float32 activations throughout, every op of the
// Model's kernels.Ops, and results for row t that do not depend on T.
func (m *Model) ForwardWith(seq *Sequence, tokens []int, opts ForwardOptions) ([]float32, error) {
	d := m.d
	T, start := len(tokens), seq.n
	switch {
	case seq.m != m:
		return nil, errors.New("runtime: Forward: the sequence belongs to another model")
	case T == 0:
		return nil, errors.New("runtime: Forward: no tokens")
	case start+T > seq.limit:
		return nil, fmt.Errorf("runtime: Forward: %d positions held plus %d new tokens exceed the sequence limit of %d: %w",
			start, T, seq.limit, ErrSequenceFull)
	}
	for i, id := range tokens {
		if id < 0 || id >= d.vocab {
			return nil, fmt.Errorf("runtime: Forward: token %d is id %d, outside the vocabulary [0, %d)", i, id, d.vocab)
		}
	}
	seq.grow(start + T)
	b := seq.scratch(T)
	x := b.x[:T*d.hidden]
	for t, id := range tokens {
		format.DecodeBF16(x[t*d.hidden:(t+1)*d.hidden], m.embed[2*id*d.hidden:2*(id+1)*d.hidden])
		b.pos[t] = int32(start + t)
	}
	for i := range m.layers {
		m.layer(seq, i, b, T, start)
		if opts.Hook != nil {
			opts.Hook(i, x)
		}
	}
	seq.n = start + T
	rows, first := T, 0
	if opts.LastOnly {
		rows, first = 1, T-1
	}
	h := b.h[first*d.hidden : T*d.hidden]
	m.ops.RMSNorm(h, x[first*d.hidden:], m.norm, rows, d.hidden, d.eps, false)
	logits := make([]float32, rows*d.vocab)
	m.ops.MatMul(logits, h, rows, &m.lmHead)
	return logits, nil
}

// layer runs decoder layer i on the residual stream b.x [T, hidden]:
//
//	h = RMSNorm(x)·input_layernorm
//	q, k, v = h·Wqᵀ [T, H·Dh], h·Wkᵀ, h·Wvᵀ [T, KVH·Dh]   (k, v written into the cache)
//	q, k = RMSNorm per head·q_norm, k_norm               (Qwen3)
//	q, k = RoPE(q, k) at positions start..start+T-1
//	x += Attention(q, K[:start+T], V[:start+T])·Woᵀ
//	h = RMSNorm(x)·post_attention_layernorm
//	x += (silu(h·Wgateᵀ) ⊙ h·Wupᵀ)·Wdownᵀ
func (m *Model) layer(seq *Sequence, i int, b *scratch, T, start int) {
	d, ops, ly := m.d, m.ops, &m.layers[i]
	D, qd, kvd := d.hidden, d.heads*d.headDim, d.kvHeads*d.headDim
	x, h := b.x[:T*D], b.h[:T*D]
	q, att := b.q[:T*qd], b.att[:T*qd]
	kc, vc := seq.k[i][:(start+T)*kvd], seq.v[i][:(start+T)*kvd]
	k, v := kc[start*kvd:], vc[start*kvd:]
	pos := b.pos[:T]

	ops.RMSNorm(h, x, ly.inputNorm, T, D, d.eps, false)
	ops.MatMul(q, h, T, &ly.q)
	ops.MatMul(k, h, T, &ly.k)
	ops.MatMul(v, h, T, &ly.v)
	if d.qkNorm {
		ops.RMSNorm(q, q, ly.qNorm, T*d.heads, d.headDim, d.eps, false)
		ops.RMSNorm(k, k, ly.kNorm, T*d.kvHeads, d.headDim, d.eps, false)
	}
	ops.RoPE(q, T, d.heads, d.headDim, d.rotaryDim, pos, d.theta)
	ops.RoPE(k, T, d.kvHeads, d.headDim, d.rotaryDim, pos, d.theta)
	scale := float32(1 / math.Sqrt(float64(d.headDim)))
	ops.Attention(att, q, kc, vc, T, start, d.heads, d.kvHeads, d.headDim, scale)
	ops.MatMul(h, att, T, &ly.o)
	ops.Add(x, x, h, T*D)

	ops.RMSNorm(h, x, ly.postNorm, T, D, d.eps, false)
	g, u := b.gate[:T*d.inter], b.up[:T*d.inter]
	ops.MatMul(g, h, T, &ly.gate)
	ops.MatMul(u, h, T, &ly.up)
	ops.SiLUMul(g, g, u, T*d.inter)
	ops.MatMul(h, g, T, &ly.down)
	ops.Add(x, x, h, T*D)
}
