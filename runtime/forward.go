package runtime

import (
	"errors"
	"fmt"
	"math"

	"github.com/lowbit-ai/lowbit/format"
	"github.com/lowbit-ai/lowbit/kernels"
)

// ErrSequenceFull is wrapped by the error of a Forward that would take a
// Sequence past its limit.
var ErrSequenceFull = errors.New("sequence limit reached")

// Sequence is one sequence with a private KV cache (float32 unless
// NewSequenceKV says otherwise): a KVPool of one block as long as the
// sequence's capacity, grown (by doubling, with a
// copy) as tokens arrive up to the sequence's limit. It is the simplest way
// to run a model (generate, tests against transformers); the engine runs
// many sequences over one shared paged pool with ForwardBatch instead, and
// a Sequence's forward is ForwardBatch with a batch of one. A Sequence is
// not safe for concurrent use; distinct Sequences of one Model are
// independent.
type Sequence struct {
	m     *Model
	limit int
	n     int // positions held
	dtype kernels.KVDType
	pool  *KVPool
}

// NewSequence returns an empty sequence that may grow to limit positions
// (prompt and generated tokens together); limit <= 0 or above
// max_position_embeddings means max_position_embeddings. Memory is taken as
// the sequence grows: KVBytesPerToken per position.
func (m *Model) NewSequence(limit int) *Sequence {
	s, _ := m.NewSequenceKV(limit, kernels.KVFloat32)
	return s
}

// NewSequenceKV is NewSequence with a KV cache of the given type (the
// engine's choices: BF16, what lowbit serve holds by default; FP8 with the
// checkpoint's scales; float32).
func (m *Model) NewSequenceKV(limit int, dtype kernels.KVDType) (*Sequence, error) {
	if dtype.Size() == 0 {
		return nil, fmt.Errorf("runtime: sequence KV cache: unknown dtype %v", dtype)
	}
	if limit <= 0 || limit > m.d.maxPos {
		limit = m.d.maxPos
	}
	return &Sequence{m: m, limit: limit, dtype: dtype}, nil
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
	old := s.pool
	if old != nil && need <= old.blockSize {
		return
	}
	c := min(max(need, 16), s.limit)
	if old != nil {
		c = min(max(need, 2*old.blockSize), s.limit)
	}
	p, err := s.m.NewKVPool(1, c, s.dtype)
	if err != nil {
		panic(err) // c > 0 and a dtype NewSequenceKV accepted are always valid
	}
	if old != nil {
		n := s.n * s.m.d.kvHeads * s.m.d.headDim * s.dtype.Size()
		for i := range p.k {
			copy(p.k[i], old.k[i][:n])
			copy(p.v[i], old.v[i][:n])
		}
		p.buf = old.buf
	}
	s.pool = p
}

// scratch holds the activations of a forward of up to t tokens.
type scratch struct {
	t             int
	x, h, q, k, v []float32
	att, gate, up []float32
	pos           []int32
	// ys and ws are the arguments of a matMuls call, kept here so that
	// the call does not allocate them.
	ys [3][]float32
	ws [3]*kernels.Weight
}

// matMuls is implemented by kernels that run several products of one input
// in one dispatch, with the bits of separate MatMuls (kernels/cpu: one
// wake-up of its thread pool instead of three).
type matMuls interface {
	MatMuls(x []float32, T int, ys [][]float32, ws []*kernels.Weight)
}

// matMulShared computes b.ys[i] = x·b.ws[i]ᵀ for i < n, the products of
// one input, as one matMuls call when the kernels offer it.
func (b *scratch) matMulShared(ops kernels.Ops, x []float32, T, n int) {
	if mm, ok := ops.(matMuls); ok {
		mm.MatMuls(x, T, b.ys[:n], b.ws[:n])
		return
	}
	for i := range n {
		ops.MatMul(b.ys[i], x, T, b.ws[i])
	}
}

// scratch returns buffers for a forward of t tokens.
func (p *KVPool) scratch(t int) *scratch {
	b := &p.buf
	if t > b.t {
		d := p.m.d
		qd, kvd := d.heads*d.headDim, d.kvHeads*d.headDim
		*b = scratch{
			t: t, x: make([]float32, t*d.hidden), h: make([]float32, t*d.hidden),
			q: make([]float32, t*qd), k: make([]float32, t*kvd), v: make([]float32, t*kvd),
			att: make([]float32, t*qd), gate: make([]float32, t*d.inter), up: make([]float32, t*d.inter),
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
	// Observe, when set, is called inside each decoder layer at every
	// ObservePoint with the layer's index and the activation x, T rows
	// (the forward's T new tokens) of len(x)/T values each. x is valid
	// only during the call and must not be modified. Observing changes no
	// result.
	Observe func(layer int, point ObservePoint, x []float32, T int)
}

// Forward runs T = len(tokens) new tokens of seq (a prefill when T > 1, a
// decode step when T = 1) and returns their logits, [T, vocab] row-major,
// in a new slice. The tokens take positions seq.Len() .. seq.Len()+T-1 and
// their keys and values are appended to seq's cache.
func (m *Model) Forward(seq *Sequence, tokens []int) ([]float32, error) {
	return m.ForwardWith(seq, tokens, ForwardOptions{})
}

// ForwardWith is Forward with options.
func (m *Model) ForwardWith(seq *Sequence, tokens []int, opts ForwardOptions) ([]float32, error) {
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
	if err := m.checkTokens(tokens); err != nil {
		return nil, err
	}
	seq.grow(start + T)
	rows := T
	if opts.LastOnly {
		rows = 1
	}
	logits, err := m.forwardBatch(seq.pool, []BatchEntry{{Blocks: []int32{0}, Start: start, Tokens: tokens, Logits: rows}}, opts.Hook, opts.Observe, nil)
	if err != nil {
		return nil, err
	}
	seq.n = start + T
	return logits, nil
}

func (m *Model) checkTokens(tokens []int) error {
	for i, id := range tokens {
		if id < 0 || id >= m.d.vocab {
			return fmt.Errorf("runtime: Forward: token %d is id %d, outside the vocabulary [0, %d)", i, id, m.d.vocab)
		}
	}
	return nil
}

// BatchEntry is one sequence's part of a ForwardBatch: its new tokens, at
// positions Start..Start+len(Tokens)-1, and its block table in the pool,
// which must cover those positions (positions before Start hold the
// sequence's earlier keys and values).
type BatchEntry struct {
	Blocks []int32
	Start  int
	Tokens []int
	// Logits is how many of the entry's last rows return logits: 0 for a
	// prefill chunk that is not the prompt's last, 1 to sample, len(Tokens)
	// for prompt log-probabilities.
	Logits int
	// Prompt is how many of Tokens' first entries are prompt tokens (at
	// positions below the request's prompt length). Model.ForwardBatch
	// ignores it; a CUDAExecutor with PrefillBF16 runs those rows' linear
	// layers with BF16 activations. A row's kind depends only on its
	// position in its request, so results stay batch invariant.
	Prompt int
}

// ForwardBatch runs the new tokens of every entry in one pass over the
// weights and returns the requested logits, entry after entry, each row
// [vocab], in a new slice. Every op is row-wise or, for attention, reads
// only the entry's own cache, so an entry's logits do not depend on the
// other entries, on how its tokens were split into chunks, or on the block
// numbers it got (batch invariance, tested). hook, when not nil, sees each
// layer's residual stream [ΣT, hidden].
//
// The numerics are those of the package documentation: float32 activations,
// every op of the Model's kernels.Ops, keys and values rounded to the
// pool's dtype as they are written.
func (m *Model) ForwardBatch(pool *KVPool, batch []BatchEntry, hook func(layer int, hidden []float32)) ([]float32, error) {
	return m.forwardBatch(pool, batch, hook, nil, nil)
}

// forwardBatch is ForwardBatch with ForwardOptions.Observe, writing the
// logits into dst when it can hold them.
func (m *Model) forwardBatch(pool *KVPool, batch []BatchEntry, hook func(layer int, hidden []float32),
	obs func(layer int, point ObservePoint, x []float32, T int), dst []float32) ([]float32, error) {
	d := m.d
	if pool.m != m {
		return nil, errors.New("runtime: ForwardBatch: the KV pool belongs to another model")
	}
	T, rows, err := m.checkBatch(batch, pool.blocks, pool.blockSize)
	if err != nil {
		return nil, err
	}
	b := pool.scratch(T)
	x := b.x[:T*d.hidden]
	t := 0
	for _, e := range batch {
		for j, id := range e.Tokens {
			format.DecodeBF16(x[t*d.hidden:(t+1)*d.hidden], m.embed[2*id*d.hidden:2*(id+1)*d.hidden])
			b.pos[t] = int32(e.Start + j)
			t++
		}
	}
	for i := range m.layers {
		m.layer(pool, i, b, batch, T, obs)
		if hook != nil {
			hook(i, x)
		}
	}
	// Gather the rows that return logits into h.
	h := b.h[:rows*d.hidden]
	t, r := 0, 0
	for _, e := range batch {
		n := len(e.Tokens)
		copy(h[r*d.hidden:(r+e.Logits)*d.hidden], x[(t+n-e.Logits)*d.hidden:(t+n)*d.hidden])
		t += n
		r += e.Logits
	}
	if rows == 0 {
		return nil, nil
	}
	m.ops.RMSNorm(h, h, m.norm, rows, d.hidden, d.eps, false)
	logits := logitsBuffer(dst, rows*d.vocab)
	m.ops.MatMul(logits, h, rows, &m.lmHead)
	return logits, nil
}

// checkBatch validates a batch for a pool of blocks blocks of blockSize
// positions and returns its token and logits-row counts.
func (m *Model) checkBatch(batch []BatchEntry, blocks, blockSize int) (T, rows int, err error) {
	d := m.d
	for i, e := range batch {
		n := len(e.Tokens)
		switch {
		case n == 0:
			return 0, 0, fmt.Errorf("runtime: ForwardBatch: entry %d has no tokens", i)
		case e.Start < 0 || e.Start+n > d.maxPos:
			return 0, 0, fmt.Errorf("runtime: ForwardBatch: entry %d: positions %d..%d outside [0, %d)", i, e.Start, e.Start+n-1, d.maxPos)
		case e.Logits < 0 || e.Logits > n:
			return 0, 0, fmt.Errorf("runtime: ForwardBatch: entry %d asks for %d logits rows of %d tokens", i, e.Logits, n)
		case len(e.Blocks)*blockSize < e.Start+n:
			return 0, 0, fmt.Errorf("runtime: ForwardBatch: entry %d: %d blocks of %d cannot hold %d positions", i, len(e.Blocks), blockSize, e.Start+n)
		}
		for j, b := range e.Blocks {
			if b < 0 || int(b) >= blocks {
				return 0, 0, fmt.Errorf("runtime: ForwardBatch: entry %d: block %d is %d, outside the pool of %d", i, j, b, blocks)
			}
		}
		if err := m.checkTokens(e.Tokens); err != nil {
			return 0, 0, err
		}
		T += n
		rows += e.Logits
	}
	if T == 0 {
		return 0, 0, errors.New("runtime: ForwardBatch: no tokens")
	}
	return T, rows, nil
}

// layer runs decoder layer i on the residual stream b.x [T, hidden] of the
// batch's tokens:
//
//	h = RMSNorm(x)·input_layernorm
//	q, k, v = h·Wqᵀ [T, H·Dh], h·Wkᵀ, h·Wvᵀ [T, KVH·Dh]
//	q, k = RMSNorm per head·q_norm, k_norm               (Qwen3)
//	q, k = RoPE(q, k) at each token's position
//	k, v written into each entry's cache (rounded to the pool's dtype)
//	x += Attention(q, the entry's cache up to each position)·Woᵀ
//	h = RMSNorm(x)·post_attention_layernorm
//	x += (silu(h·Wgateᵀ) ⊙ h·Wupᵀ)·Wdownᵀ
//
// obs, when set, sees the ObservePoints as the layer reaches them.
func (m *Model) layer(pool *KVPool, i int, b *scratch, batch []BatchEntry, T int, obs func(int, ObservePoint, []float32, int)) {
	d, ops, ly := m.d, m.ops, &m.layers[i]
	D, qd, kvd := d.hidden, d.heads*d.headDim, d.kvHeads*d.headDim
	x, h := b.x[:T*D], b.h[:T*D]
	q, k, v, att := b.q[:T*qd], b.k[:T*kvd], b.v[:T*kvd], b.att[:T*qd]

	ops.RMSNorm(h, x, ly.inputNorm, T, D, d.eps, false)
	observe(obs, i, ObserveAttnInput, h, T)
	b.ys, b.ws = [3][]float32{q, k, v}, [3]*kernels.Weight{&ly.q, &ly.k, &ly.v}
	b.matMulShared(ops, h, T, 3)
	if d.qkNorm {
		ops.RMSNorm(q, q, ly.qNorm, T*d.heads, d.headDim, d.eps, false)
		ops.RMSNorm(k, k, ly.kNorm, T*d.kvHeads, d.headDim, d.eps, false)
	}
	ops.RoPE(q, T, d.heads, d.headDim, d.rotaryDim, b.pos[:T], d.theta)
	ops.RoPE(k, T, d.kvHeads, d.headDim, d.rotaryDim, b.pos[:T], d.theta)
	observe(obs, i, ObserveKey, k, T)
	observe(obs, i, ObserveValue, v, T)
	scale := float32(1 / math.Sqrt(float64(d.headDim)))
	t := 0
	for _, e := range batch {
		n := len(e.Tokens)
		kv := pool.cache(i, e.Blocks)
		ops.WriteKV(kv, k[t*kvd:(t+n)*kvd], v[t*kvd:(t+n)*kvd], n, e.Start)
		ops.PagedAttention(att[t*qd:(t+n)*qd], q[t*qd:(t+n)*qd], kv, n, e.Start, d.heads, scale)
		t += n
	}
	observe(obs, i, ObserveOProjInput, att, T)
	ops.MatMul(h, att, T, &ly.o)
	ops.Add(x, x, h, T*D)

	ops.RMSNorm(h, x, ly.postNorm, T, D, d.eps, false)
	observe(obs, i, ObserveMLPInput, h, T)
	g, u := b.gate[:T*d.inter], b.up[:T*d.inter]
	b.ys, b.ws = [3][]float32{g, u}, [3]*kernels.Weight{&ly.gate, &ly.up}
	b.matMulShared(ops, h, T, 2)
	ops.SiLUMul(g, g, u, T*d.inter)
	observe(obs, i, ObserveDownInput, g, T)
	ops.MatMul(h, g, T, &ly.down)
	ops.Add(x, x, h, T*D)
}
