//go:build cgo

package runtime

import (
	"math"

	"github.com/lowbit-ai/lowbit/kernels/cuda"
)

// step launches one forward over the batch described by the input buffers
// (act.ids, pos, seq, tables, rows, partOff, work): T tokens, rows logits
// rows, block tables of stride entries, attention as plan says.
func (e *CUDAExecutor) step(k *cuda.K, T, rows, stride int, plan cuda.AttentionPlan) error {
	d, a := e.m.d, &e.act
	scale := float32(1 / math.Sqrt(float64(d.headDim)))
	x, h := a.x.F32(0, T*d.hidden), a.h.F32(0, T*d.hidden)
	bt := &cuda.Batch{Tables: a.tablesBuf, Seq: a.seq, Pos: a.pos, PartOff: a.partOff, Work: a.work, Stride: stride, Plan: plan}
	if err := k.Embed(x, e.embed, a.ids, T, d.hidden); err != nil {
		return err
	}
	layers := e.layersFloat
	if e.tiled && e.prompt == 0 {
		layers = e.layersTerms
	}
	if err := layers(k, T, bt, scale); err != nil {
		return err
	}
	if rows == 0 {
		return nil
	}
	hr, logits := h.F32(0, rows*d.hidden), []cuda.Buf{a.logits.F32(0, rows*d.vocab)}
	if err := k.GatherRows(hr, x, a.rowsIdx, rows, d.hidden); err != nil {
		return err
	}
	if e.lmHead.Tiled && e.lmHead.In == d.hidden {
		// The final norm writes the head's input terms itself (the bits of
		// RMSNorm then the split, one launch fewer a step).
		t, err := e.termsFor(k, rows, d.hidden)
		if err != nil {
			return err
		}
		if err := k.RMSNormTerms(hr, t, e.norm, d.hidden, d.eps, false); err != nil {
			return err
		}
		return k.MatMulTerms(t, logits, []*cuda.Weight{e.lmHead})
	}
	if err := k.RMSNorm(hr, hr, e.norm, rows, d.hidden, d.eps, false); err != nil {
		return err
	}
	return e.matmulShared(k, hr, rows, logits, []*cuda.Weight{e.lmHead})
}

// layersFloat runs the decoder layers with float32 matmul inputs (any
// weight format). n holds each norm's output, the next matmuls' input; the
// residual adds are fused into the norms that follow them.
func (e *CUDAExecutor) layersFloat(k *cuda.K, T int, bt *cuda.Batch, scale float32) error {
	d, a := e.m.d, &e.act
	qd, kvd := d.heads*d.headDim, d.kvHeads*d.headDim
	x, h, n := a.x.F32(0, T*d.hidden), a.h.F32(0, T*d.hidden), a.n.F32(0, T*d.hidden)
	q, kk, v := a.q.F32(0, T*qd), a.k.F32(0, T*kvd), a.v.F32(0, T*kvd)
	g, u := a.gate.F32(0, T*d.inter), a.up.F32(0, T*d.inter)
	if err := k.RMSNorm(n, x, e.layers[0].inputNorm, T, d.hidden, d.eps, false); err != nil {
		return err
	}
	// With BF16 prompt rows, the norms and SiLU-mul write those rows as
	// BF16 for cuBLASLt (xb, the first p rows; n or g the rest).
	var xb, nb, gb cuda.Buf
	var p, np, gp int
	var err error
	for i := range e.layers {
		dl := &e.layers[i]
		if err := e.matmulBF16(k, xb, n, p, T, []cuda.Buf{q, kk, v}, dl.q, dl.k, dl.v); err != nil {
			return err
		}
		if _, err := e.attention(k, dl, T, bt, scale, false); err != nil {
			return err
		}
		if nb, np, err = e.normBF16(k, x, h, n, dl.postNorm, T, dl.gate, dl.up); err != nil {
			return err
		}
		if err := e.matmulBF16(k, nb, n, np, T, []cuda.Buf{g, u}, dl.gate, dl.up); err != nil {
			return err
		}
		if gb, gp, err = e.siluBF16(k, g, u, T, dl.down); err != nil {
			return err
		}
		if err := e.matmulBF16(k, gb, g, gp, T, []cuda.Buf{h}, dl.down); err != nil {
			return err
		}
		if i+1 == len(e.layers) {
			return k.Add(x, x, h, T*d.hidden)
		}
		next := &e.layers[i+1]
		if xb, p, err = e.normBF16(k, x, h, n, next.inputNorm, T, next.q, next.k, next.v); err != nil {
			return err
		}
	}
	return nil
}

// attention takes a layer from its q, k and v (act.q, k, v) to the
// o-projection's output in act.h: q/k-norm, RoPE and the KV-cache write,
// attention, o_proj. With terms (layersTerms), a decode step's attention
// writes the o-projection's input terms itself (AttentionBatchTerms): no
// split launch; and the o-projection adds into the residual stream act.x
// where it can (MatMulTermsAdd), which it reports (act.h then holds
// nothing).
func (e *CUDAExecutor) attention(k *cuda.K, dl *cudaLayer, T int, bt *cuda.Batch, scale float32, terms bool) (bool, error) {
	d, a := e.m.d, &e.act
	qd, kvd := d.heads*d.headDim, d.kvHeads*d.headDim
	q, kk, v, att := a.q.F32(0, T*qd), a.k.F32(0, T*kvd), a.v.F32(0, T*kvd), a.att.F32(0, T*qd)
	h := []cuda.Buf{a.h.F32(0, T*d.hidden)}
	if err := k.QKNormRoPE(q, kk, v, dl.qNorm, dl.kNorm, d.qkNorm, d.eps, &dl.kv, bt, T, d.heads, d.rotaryDim, d.theta); err != nil {
		return false, err
	}
	if terms {
		t, err := e.termsFor(k, T, qd)
		if err != nil {
			return false, err
		}
		fused, err := k.AttentionBatchTerms(att, &t, q, &dl.kv, bt, T, d.heads, scale)
		if err != nil {
			return false, err
		}
		if !fused {
			return false, e.matmul(k, att, T, h, dl.o)
		}
		if added, err := k.MatMulTermsAdd(t, a.x.F32(0, T*d.hidden), dl.o, cuda.Buf{}); added || err != nil {
			return added, err
		}
		return false, k.MatMulTerms(t, h, []*cuda.Weight{dl.o})
	}
	if err := k.AttentionBatch(att, q, &dl.kv, bt, T, d.heads, scale); err != nil {
		return false, err
	}
	return false, e.matmul(k, att, T, h, dl.o)
}

// layersTerms runs the decoder layers of a model whose matmul weights are
// all tiled BF16: the norms and SiLU-mul write the matmuls' inputs as mma
// terms directly (no separate split launch): they compute the float32
// values layersFloat's kernels write and split them as lb_mma_split does.
// In a decode step of BF16 activations and a token or two (RMSInGemv,
// where e.gemvNorms fuses) each layer's input norm goes into its q/k/v GEMV
// (MatMulRMS), and the down projection before it writes the new
// residual's RMS tile sums: the same bits, with no norm launch.
func (e *CUDAExecutor) layersTerms(k *cuda.K, T int, bt *cuda.Batch, scale float32) error {
	d, a := e.m.d, &e.act
	qd, kvd := d.heads*d.headDim, d.kvHeads*d.headDim
	x, h := a.x.F32(0, T*d.hidden), a.h.F32(0, T*d.hidden)
	q, kk, v := a.q.F32(0, T*qd), a.k.F32(0, T*kvd), a.v.F32(0, T*kvd)
	g, u := a.gate.F32(0, T*d.inter), a.up.F32(0, T*d.inter)
	// Size the shared terms buffer for the widest input first, so that no
	// later TermsFor reallocates it under a Terms still in use.
	if _, err := k.TermsFor(T, max(d.hidden, qd, d.inter)); err != nil {
		return err
	}
	var sums cuda.Buf // the residual's RMS tile sums, where the input norms go into the GEMVs
	if e.decodeBF16 && e.gemvNorms.fuses(d.hidden) && k.RMSInGemv(T, d.hidden) {
		var err error
		if sums, err = k.RMSSumsFor(T, d.hidden); err != nil {
			return err
		}
	}
	terms := func(width int, produce func(cuda.Terms) error) (cuda.Terms, error) {
		t, err := e.termsFor(k, T, width)
		if err == nil {
			err = produce(t)
		}
		return t, err
	}
	// norm runs RMSNorm(x) (of x + h unless the projection before added
	// into x: added; a zero h adds nothing) into the terms it returns
	// (RMSNormTerms over several blocks where x holds the sum already, or
	// nothing is added: layer 0's input, the embedding).
	norm := func(added bool, h, w cuda.Buf) (cuda.Terms, error) {
		return terms(d.hidden, func(t cuda.Terms) error {
			if added || h.Bytes() == 0 {
				return k.RMSNormTerms(x, t, w, d.hidden, d.eps, false)
			}
			return k.AddRMSNormTerms(x, h, t, w, d.hidden, d.eps, false)
		})
	}
	added := false
	for i := range e.layers {
		dl := &e.layers[i]
		// Layer 0's input is the embedding, to which nothing is added.
		hin := h
		if i == 0 {
			hin = cuda.Buf{}
		}
		ys, ws := []cuda.Buf{q, kk, v}, []*cuda.Weight{dl.q, dl.k, dl.v}
		fused := false
		if added && sums.Bytes() > 0 {
			in := cuda.RMSInput{X: x, Sums: sums, W: dl.inputNorm, T: T, D: d.hidden, Eps: d.eps}
			var err error
			if fused, err = k.MatMulRMS(in, ys, ws); err != nil {
				return err
			}
		}
		if !fused {
			t, err := norm(added, hin, dl.inputNorm)
			if err != nil {
				return err
			}
			if err := k.MatMulTerms(t, ys, ws); err != nil {
				return err
			}
		}
		var err error
		if added, err = e.attention(k, dl, T, bt, scale, true); err != nil {
			return err
		}
		t, err := norm(added, h, dl.postNorm)
		if err != nil {
			return err
		}
		// The gate and up GEMVs write silu(gate)·up as the down
		// projection's terms themselves where they can (a decode step of
		// BF16 activations); else SiLU-mul follows them.
		var td cuda.Terms
		fused = false
		if e.decodeBF16 {
			if td, err = k.SiLUTermsFor(T, d.inter); err != nil {
				return err
			}
			if fused, err = k.MatMulSiLUTerms(t, td, dl.gate, dl.up); err != nil {
				return err
			}
		}
		if !fused {
			if err := k.MatMulTerms(t, []cuda.Buf{g, u}, []*cuda.Weight{dl.gate, dl.up}); err != nil {
				return err
			}
			if td, err = terms(d.inter, func(t cuda.Terms) error { return k.SiLUMulTerms(t, g, u, d.inter) }); err != nil {
				return err
			}
		}
		last := i+1 == len(e.layers)
		downSums := sums
		if last {
			downSums = cuda.Buf{} // the final norm is its own launch (step)
		}
		if added, err = k.MatMulTermsAdd(td, x, dl.down, downSums); err != nil {
			return err
		}
		if !added {
			if err := k.MatMulTerms(td, []cuda.Buf{h}, []*cuda.Weight{dl.down}); err != nil {
				return err
			}
		}
		if last && !added {
			return k.Add(x, x, h, T*d.hidden)
		}
	}
	return nil
}
