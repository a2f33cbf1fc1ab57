//go:build cgo

package cuda

import (
	"fmt"
	"unsafe"

	"github.com/lowbit-ai/lowbit/kernels"
)

// Ops implements kernels.Ops with the CUDA kernels on host slices: each
// call copies its inputs to the device, runs the same launchers (K) that a
// device-resident forward runs, waits and copies the outputs back. Outputs
// are poisoned on the device first, so an unwritten element comes back as
// NaN. A CUDA error panics with its message (kernels.Ops has no error
// results; the conformance suite reports panics as failures).
type Ops struct{ d *Device }

var _ kernels.Ops = (*Ops)(nil)

// NewOps returns Ops on d.
func NewOps(d *Device) *Ops { return &Ops{d: d} }

// Name identifies the backend and architecture.
func (o *Ops) Name() string { return "cuda-" + o.d.Arch }

func (o *Ops) run(f func(k *K) error) {
	if err := o.d.Run(f); err != nil {
		panic(err.Error())
	}
}

func need(op, name string, got, want int) {
	if got < want {
		panic(fmt.Sprintf("cuda: %s: len(%s) = %d, need %d", op, name, got, want))
	}
}

func grid1(n, block int) [3]int { return [3]int{(n + block - 1) / block, 1, 1} }

// asBytes views the first n elements of s as bytes.
func asBytes[E float32 | int32](s []E, n int) []byte {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), n*4)
}

// out returns a poisoned scratch output of n float32.
func out(k *K, n int) (Buf, error) {
	b, err := k.Scratch(4 * n)
	if err != nil {
		return b, err
	}
	return b, k.Poison(b)
}

// MatMul: see kernels.Ops.
func (o *Ops) MatMul(y, x []float32, T int, w *kernels.Weight) {
	if err := w.Check(); err != nil {
		panic("cuda: MatMul: " + err.Error())
	}
	need("MatMul", "x", len(x), T*w.In)
	need("MatMul", "y", len(y), T*w.Out)
	if T == 0 {
		return
	}
	o.run(func(k *K) error {
		dx, err := k.Upload(asBytes(x, T*w.In))
		if err != nil {
			return err
		}
		dw := &Weight{Format: w.Format, Out: w.Out, In: w.In, GlobalScale: w.GlobalScale, Act: w.Act, InputScale: w.InputScale}
		if dw.Data, err = k.Upload(w.Data); err != nil {
			return err
		}
		if usesMMA(w.Format, w.Act) {
			raw := dw.Data
			if dw.Data, err = k.Scratch(TiledBytes(w.Out, w.In)); err != nil {
				return err
			}
			if err := k.TileWeight(dw.Data, raw, w.Out, w.In); err != nil {
				return err
			}
			dw.Tiled = true
		}
		if dw.Scales, err = k.Upload(asBytes(w.Scales, len(w.Scales))); err != nil {
			return err
		}
		dy, err := out(k, T*w.Out)
		if err != nil {
			return err
		}
		if err := k.MatMul(dy, dx, T, dw); err != nil {
			return err
		}
		return k.Download(asBytes(y, T*w.Out), dy)
	})
}

// RMSNorm: see kernels.Ops.
func (o *Ops) RMSNorm(y, x, weight []float32, T, D int, eps float32, zeroCentered bool) {
	need("RMSNorm", "x", len(x), T*D)
	need("RMSNorm", "y", len(y), T*D)
	need("RMSNorm", "weight", len(weight), D)
	if T*D == 0 {
		return
	}
	o.run(func(k *K) error {
		dx, err := k.Upload(asBytes(x, T*D))
		if err != nil {
			return err
		}
		dw, err := k.Upload(asBytes(weight, D))
		if err != nil {
			return err
		}
		dy, err := out(k, T*D)
		if err != nil {
			return err
		}
		if err := k.RMSNorm(dy, dx, dw, T, D, eps, zeroCentered); err != nil {
			return err
		}
		return k.Download(asBytes(y, T*D), dy)
	})
}

// RoPE: see kernels.Ops.
func (o *Ops) RoPE(x []float32, T, heads, headDim, rotaryDim int, pos []int32, theta float64) {
	need("RoPE", "x", len(x), T*heads*headDim)
	need("RoPE", "pos", len(pos), T)
	if T*heads*(rotaryDim/2) == 0 {
		return
	}
	o.run(func(k *K) error {
		dx, err := k.Upload(asBytes(x, T*heads*headDim))
		if err != nil {
			return err
		}
		dp, err := k.Upload(asBytes(pos, T))
		if err != nil {
			return err
		}
		if err := k.RoPE(dx, dp, T, heads, headDim, rotaryDim, theta); err != nil {
			return err
		}
		return k.Download(asBytes(x, T*heads*headDim), dx)
	})
}

// Attention: see kernels.Ops (a contiguous float32 cache).
func (o *Ops) Attention(outp, q, k, v []float32, T, start, H, KVH, Dh int, scale float32) {
	if KVH <= 0 || H%KVH != 0 {
		panic(fmt.Sprintf("cuda: Attention: H = %d query heads is not a multiple of KVH = %d", H, KVH))
	}
	need("Attention", "q", len(q), T*H*Dh)
	need("Attention", "out", len(outp), T*H*Dh)
	need("Attention", "k", len(k), (start+T)*KVH*Dh)
	need("Attention", "v", len(v), (start+T)*KVH*Dh)
	if T*H*Dh == 0 {
		return
	}
	n := (start + T) * KVH * Dh
	kv := &kernels.KVCache{DType: kernels.KVFloat32, KVHeads: KVH, HeadDim: Dh, BlockSize: start + T,
		K: asBytes(k, n), V: asBytes(v, n), KScale: 1, VScale: 1}
	o.attention(outp, q, kv, false, T, start, H, scale)
}

// PagedAttention: see kernels.Ops.
func (o *Ops) PagedAttention(outp, q []float32, kv *kernels.KVCache, T, start, H int, scale float32) {
	if err := kv.Check(start + T); err != nil {
		panic("cuda: PagedAttention: " + err.Error())
	}
	if H%kv.KVHeads != 0 {
		panic(fmt.Sprintf("cuda: PagedAttention: H = %d query heads is not a multiple of KVH = %d", H, kv.KVHeads))
	}
	need("PagedAttention", "q", len(q), T*H*kv.HeadDim)
	need("PagedAttention", "out", len(outp), T*H*kv.HeadDim)
	if T*H == 0 {
		return
	}
	o.attention(outp, q, kv, true, T, start, H, scale)
}

func (o *Ops) attention(outp, q []float32, kv *kernels.KVCache, paged bool, T, start, H int, scale float32) {
	Dh := kv.HeadDim
	o.run(func(k *K) error {
		dq, err := k.Upload(asBytes(q, T*H*Dh))
		if err != nil {
			return err
		}
		p := &KVPool{DType: kv.DType, KVHeads: kv.KVHeads, HeadDim: Dh, BlockSize: kv.BlockSize, KScale: kv.KScale, VScale: kv.VScale}
		if p.K, err = k.Upload(kv.K); err != nil {
			return err
		}
		if p.V, err = k.Upload(kv.V); err != nil {
			return err
		}
		var blocks Buf
		if paged {
			if blocks, err = k.Upload(asBytes(kv.Blocks, len(kv.Blocks))); err != nil {
				return err
			}
		}
		dout, err := out(k, T*H*Dh)
		if err != nil {
			return err
		}
		if err := k.Attention(dout, dq, p, blocks, T, start, H, scale); err != nil {
			return err
		}
		return k.Download(asBytes(outp, T*H*Dh), dout)
	})
}

// WriteKV: see kernels.Ops. The pools travel to the device and back whole.
func (o *Ops) WriteKV(kv *kernels.KVCache, kk, vv []float32, T, start int) {
	if err := kv.Check(start + T); err != nil {
		panic("cuda: WriteKV: " + err.Error())
	}
	row := kv.KVHeads * kv.HeadDim
	need("WriteKV", "k", len(kk), T*row)
	need("WriteKV", "v", len(vv), T*row)
	if T == 0 {
		return
	}
	o.run(func(k *K) error {
		p := &KVPool{DType: kv.DType, KVHeads: kv.KVHeads, HeadDim: kv.HeadDim, BlockSize: kv.BlockSize, KScale: kv.KScale, VScale: kv.VScale}
		var err error
		if p.K, err = k.Upload(kv.K); err != nil {
			return err
		}
		if p.V, err = k.Upload(kv.V); err != nil {
			return err
		}
		dk, err := k.Upload(asBytes(kk, T*row))
		if err != nil {
			return err
		}
		dv, err := k.Upload(asBytes(vv, T*row))
		if err != nil {
			return err
		}
		blocks, err := k.Upload(asBytes(kv.Blocks, len(kv.Blocks)))
		if err != nil {
			return err
		}
		if err := k.WriteKV(p, dk, dv, blocks, T, start); err != nil {
			return err
		}
		if err := k.Download(kv.K, p.K); err != nil {
			return err
		}
		return k.Download(kv.V, p.V)
	})
}

// SiLUMul: see kernels.Ops.
func (o *Ops) SiLUMul(outp, gate, up []float32, n int) {
	o.binary("SiLUMul", (*K).SiLUMul, outp, gate, up, n)
}

// Add: see kernels.Ops.
func (o *Ops) Add(outp, a, b []float32, n int) { o.binary("Add", (*K).Add, outp, a, b, n) }

func (o *Ops) binary(op string, f func(k *K, out, a, b Buf, n int) error, outp, a, b []float32, n int) {
	need(op, "out", len(outp), n)
	need(op, "a", len(a), n)
	need(op, "b", len(b), n)
	if n == 0 {
		return
	}
	o.run(func(k *K) error {
		da, err := k.Upload(asBytes(a, n))
		if err != nil {
			return err
		}
		db, err := k.Upload(asBytes(b, n))
		if err != nil {
			return err
		}
		dout, err := out(k, n)
		if err != nil {
			return err
		}
		if err := f(k, dout, da, db, n); err != nil {
			return err
		}
		return k.Download(asBytes(outp, n), dout)
	})
}

// LogSoftmax: see kernels.Ops.
func (o *Ops) LogSoftmax(outp, logits []float32, T, V int) {
	need("LogSoftmax", "out", len(outp), T*V)
	need("LogSoftmax", "logits", len(logits), T*V)
	if T*V == 0 {
		return
	}
	o.run(func(k *K) error {
		dl, err := k.Upload(asBytes(logits, T*V))
		if err != nil {
			return err
		}
		dout, err := out(k, T*V)
		if err != nil {
			return err
		}
		if err := k.LogSoftmax(dout, dl, T, V); err != nil {
			return err
		}
		return k.Download(asBytes(outp, T*V), dout)
	})
}
