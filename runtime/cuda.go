//go:build cgo

package runtime

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/lowbit-ai/lowbit/kernels"
	"github.com/lowbit-ai/lowbit/kernels/cuda"
)

// CUDAExecutor runs a Model on a GPU with everything resident on the
// device: the weights (uploaded once, as stored), a paged KV pool per layer,
// and the activations. A forward launches the kernels of kernels/cuda in
// the order of Model.layer, with the same float32 numerics (contract of
// kernels.Ops), and copies only the token ids, positions and block tables
// in and the requested logits out. Results match the CPU's within float32
// summation order, and are batch invariant in the same way.
type CUDAExecutor struct {
	m         *Model
	d         *cuda.Device
	dtype     kernels.KVDType
	blocks    int
	blockSize int

	embed  cuda.Buf
	norm   cuda.Buf
	lmHead *cuda.Weight
	layers []cudaLayer
	allocs []cuda.Buf

	act cudaActs
}

type cudaLayer struct {
	inputNorm, postNorm, qNorm, kNorm cuda.Buf
	q, k, v, o, gate, up, down        *cuda.Weight
	kv                                cuda.KVPool
}

// cudaActs are the activation buffers of a forward of up to t tokens.
type cudaActs struct {
	t                                    int
	x, h, q, k, v, att, gate, up, logits cuda.Buf
	rows                                 int
}

// NewCUDAExecutor uploads m's weights to d and allocates a KV pool of
// blocks blocks of blockSize positions in dtype (FP8 with the checkpoint's
// scales, 1 without).
func NewCUDAExecutor(m *Model, d *cuda.Device, blocks, blockSize int, dtype kernels.KVDType) (*CUDAExecutor, error) {
	if blocks <= 0 || blockSize <= 0 || dtype.Size() == 0 {
		return nil, fmt.Errorf("runtime: CUDA executor: %d blocks of %d positions in %v", blocks, blockSize, dtype)
	}
	e := &CUDAExecutor{m: m, d: d, dtype: dtype, blocks: blocks, blockSize: blockSize}
	if err := e.upload(); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

func (e *CUDAExecutor) alloc(n int) (cuda.Buf, error) {
	b, err := e.d.Alloc(n)
	if err == nil {
		e.allocs = append(e.allocs, b)
	}
	return b, err
}

func (e *CUDAExecutor) bytes(src []byte) (cuda.Buf, error) {
	b, err := e.alloc(len(src))
	if err != nil {
		return b, err
	}
	return b, e.d.Upload(b, src)
}

func (e *CUDAExecutor) floats(src []float32) (cuda.Buf, error) {
	if len(src) == 0 {
		return cuda.Buf{}, nil
	}
	return e.bytes(unsafe.Slice((*byte)(unsafe.Pointer(&src[0])), 4*len(src)))
}

func (e *CUDAExecutor) weight(w *kernels.Weight) (*cuda.Weight, error) {
	dw, err := e.d.UploadWeight(w)
	if err == nil {
		e.allocs = append(e.allocs, dw.Data, dw.Scales)
	}
	return dw, err
}

func (e *CUDAExecutor) upload() error {
	m, d := e.m, e.m.d
	var err error
	if e.embed, err = e.bytes(m.embed); err != nil {
		return err
	}
	if e.norm, err = e.floats(m.norm); err != nil {
		return err
	}
	if m.lmHead.Format == kernels.WeightBF16 && unsafe.SliceData(m.lmHead.Data) == unsafe.SliceData(m.embed) {
		e.lmHead = &cuda.Weight{Format: kernels.WeightBF16, Out: d.vocab, In: d.hidden, Data: e.embed, Act: kernels.ActNone}
	} else if e.lmHead, err = e.weight(&m.lmHead); err != nil {
		return err
	}
	poolBytes := e.blocks * e.blockSize * d.kvHeads * d.headDim * e.dtype.Size()
	e.layers = make([]cudaLayer, d.layers)
	for i := range m.layers {
		ly, dl := &m.layers[i], &e.layers[i]
		for _, f := range []struct {
			dst *cuda.Buf
			src []float32
		}{{&dl.inputNorm, ly.inputNorm}, {&dl.postNorm, ly.postNorm}, {&dl.qNorm, ly.qNorm}, {&dl.kNorm, ly.kNorm}} {
			if *f.dst, err = e.floats(f.src); err != nil {
				return err
			}
		}
		for _, w := range []struct {
			dst **cuda.Weight
			src *kernels.Weight
		}{{&dl.q, &ly.q}, {&dl.k, &ly.k}, {&dl.v, &ly.v}, {&dl.o, &ly.o}, {&dl.gate, &ly.gate}, {&dl.up, &ly.up}, {&dl.down, &ly.down}} {
			if *w.dst, err = e.weight(w.src); err != nil {
				return err
			}
		}
		ks, vs := float32(1), float32(1)
		if e.dtype == kernels.KVFP8 && ly.kScale > 0 && ly.vScale > 0 {
			ks, vs = ly.kScale, ly.vScale
		}
		dl.kv = cuda.KVPool{DType: e.dtype, KVHeads: d.kvHeads, HeadDim: d.headDim, BlockSize: e.blockSize, KScale: ks, VScale: vs}
		if dl.kv.K, err = e.alloc(poolBytes); err != nil {
			return err
		}
		if dl.kv.V, err = e.alloc(poolBytes); err != nil {
			return err
		}
	}
	return nil
}

// Blocks returns the number of KV blocks.
func (e *CUDAExecutor) Blocks() int { return e.blocks }

// BlockSize returns the positions per block.
func (e *CUDAExecutor) BlockSize() int { return e.blockSize }

// DType returns the KV cache's element type.
func (e *CUDAExecutor) DType() kernels.KVDType { return e.dtype }

// Close frees the executor's device memory.
func (e *CUDAExecutor) Close() error {
	for _, b := range e.allocs {
		e.d.Free(b)
	}
	e.allocs = nil
	e.act = cudaActs{}
	return nil
}

// acts returns activation buffers for t tokens and rows logits rows.
func (e *CUDAExecutor) acts(t, rows int) (*cudaActs, error) {
	a := &e.act
	if t <= a.t && rows <= a.rows {
		return a, nil
	}
	d := e.m.d
	t, rows = max(t, a.t), max(rows, a.rows)
	qd, kvd := d.heads*d.headDim, d.kvHeads*d.headDim
	n := cudaActs{t: t, rows: rows}
	var err error
	for _, f := range []struct {
		dst   *cuda.Buf
		elems int
	}{{&n.x, t * d.hidden}, {&n.h, t * d.hidden}, {&n.q, t * qd}, {&n.k, t * kvd}, {&n.v, t * kvd},
		{&n.att, t * qd}, {&n.gate, t * d.inter}, {&n.up, t * d.inter}, {&n.logits, rows * d.vocab}} {
		if *f.dst, err = e.alloc(4 * f.elems); err != nil {
			return nil, err
		}
	}
	*a = n
	return a, nil
}

// Forward runs a batch (see Model.ForwardBatch) on the device.
func (e *CUDAExecutor) Forward(batch []BatchEntry) ([]float32, error) {
	m, d := e.m, e.m.d
	T, rows, err := m.checkBatch(batch, e.blocks, e.blockSize)
	if err != nil {
		return nil, err
	}
	a, err := e.acts(T, rows)
	if err != nil {
		return nil, err
	}
	// Host-side batch description: ids, positions, each entry's block
	// table, and the rows that return logits.
	ids, pos := make([]int32, 0, T), make([]int32, 0, T)
	var tables []int32
	tableAt := make([]int, len(batch))
	rowIdx := make([]int32, 0, rows)
	t := 0
	for i, b := range batch {
		tableAt[i] = len(tables)
		tables = append(tables, b.Blocks...)
		for j, id := range b.Tokens {
			ids = append(ids, int32(id))
			pos = append(pos, int32(b.Start+j))
		}
		for r := len(b.Tokens) - b.Logits; r < len(b.Tokens); r++ {
			rowIdx = append(rowIdx, int32(t+r))
		}
		t += len(b.Tokens)
	}
	logits := make([]float32, rows*d.vocab)
	qd, kvd := d.heads*d.headDim, d.kvHeads*d.headDim
	scale := float32(1 / math.Sqrt(float64(d.headDim)))
	err = e.d.Run(func(k *cuda.K) error {
		dids, err := k.Upload(i32Bytes(ids))
		if err != nil {
			return err
		}
		dpos, err := k.Upload(i32Bytes(pos))
		if err != nil {
			return err
		}
		dtables, err := k.Upload(i32Bytes(tables))
		if err != nil {
			return err
		}
		x, h := a.x.F32(0, T*d.hidden), a.h.F32(0, T*d.hidden)
		q, kk, v, att := a.q.F32(0, T*qd), a.k.F32(0, T*kvd), a.v.F32(0, T*kvd), a.att.F32(0, T*qd)
		g, u := a.gate.F32(0, T*d.inter), a.up.F32(0, T*d.inter)
		if err := k.Embed(x, e.embed, dids, T, d.hidden); err != nil {
			return err
		}
		for i := range e.layers {
			dl := &e.layers[i]
			steps := []func() error{
				func() error { return k.RMSNorm(h, x, dl.inputNorm, T, d.hidden, d.eps, false) },
				func() error { return k.MatMul(q, h, T, dl.q) },
				func() error { return k.MatMul(kk, h, T, dl.k) },
				func() error { return k.MatMul(v, h, T, dl.v) },
			}
			if d.qkNorm {
				steps = append(steps,
					func() error { return k.RMSNorm(q, q, dl.qNorm, T*d.heads, d.headDim, d.eps, false) },
					func() error { return k.RMSNorm(kk, kk, dl.kNorm, T*d.kvHeads, d.headDim, d.eps, false) })
			}
			steps = append(steps,
				func() error { return k.RoPE(q, dpos, T, d.heads, d.headDim, d.rotaryDim, d.theta) },
				func() error { return k.RoPE(kk, dpos, T, d.kvHeads, d.headDim, d.rotaryDim, d.theta) },
				func() error {
					t := 0
					for j, b := range batch {
						n := len(b.Tokens)
						tb := dtables.Slice(4*tableAt[j], 4*(tableAt[j]+len(b.Blocks)))
						if err := k.WriteKV(&dl.kv, kk.F32(t*kvd, (t+n)*kvd), v.F32(t*kvd, (t+n)*kvd), tb, n, b.Start); err != nil {
							return err
						}
						if err := k.Attention(att.F32(t*qd, (t+n)*qd), q.F32(t*qd, (t+n)*qd), &dl.kv, tb, n, b.Start, d.heads, scale); err != nil {
							return err
						}
						t += n
					}
					return nil
				},
				func() error { return k.MatMul(h, att, T, dl.o) },
				func() error { return k.Add(x, x, h, T*d.hidden) },
				func() error { return k.RMSNorm(h, x, dl.postNorm, T, d.hidden, d.eps, false) },
				func() error { return k.MatMul(g, h, T, dl.gate) },
				func() error { return k.MatMul(u, h, T, dl.up) },
				func() error { return k.SiLUMul(g, g, u, T*d.inter) },
				func() error { return k.MatMul(h, g, T, dl.down) },
				func() error { return k.Add(x, x, h, T*d.hidden) },
			)
			for _, s := range steps {
				if err := s(); err != nil {
					return err
				}
			}
		}
		if rows == 0 {
			return nil
		}
		drows, err := k.Upload(i32Bytes(rowIdx))
		if err != nil {
			return err
		}
		hr := h.F32(0, rows*d.hidden)
		if err := k.GatherRows(hr, x, drows, rows, d.hidden); err != nil {
			return err
		}
		if err := k.RMSNorm(hr, hr, e.norm, rows, d.hidden, d.eps, false); err != nil {
			return err
		}
		out := a.logits.F32(0, rows*d.vocab)
		if err := k.MatMul(out, hr, rows, e.lmHead); err != nil {
			return err
		}
		return k.Download(unsafe.Slice((*byte)(unsafe.Pointer(&logits[0])), 4*len(logits)), out)
	})
	if err != nil {
		return nil, err
	}
	if rows == 0 {
		return nil, nil
	}
	return logits, nil
}

func i32Bytes(s []int32) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), 4*len(s))
}
