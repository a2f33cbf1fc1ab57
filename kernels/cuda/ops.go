//go:build cgo

package cuda

// #include "driver.h"
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/lowbit-ai/lowbit/kernels"
)

// Ops implements kernels.Ops with the CUDA kernels on host slices: each
// call copies its inputs to the device, launches, waits and copies the
// outputs back. A CUDA error panics with its message (kernels.Ops has no
// error results; the conformance suite reports panics as failures).
type Ops struct{ d *Device }

var _ kernels.Ops = (*Ops)(nil)

// NewOps returns Ops on d.
func NewOps(d *Device) *Ops { return &Ops{d: d} }

// Name identifies the backend and architecture.
func (o *Ops) Name() string { return "cuda-" + o.d.Arch }

func (o *Ops) run(op string, f func(d *Device) error) {
	err := o.d.do(func() error {
		o.d.pool.next = 0
		if err := f(o.d); err != nil {
			return err
		}
		return o.d.sync(op)
	})
	if err != nil {
		panic(err.Error())
	}
}

func need(op, name string, got, want int) {
	if got < want {
		panic(fmt.Sprintf("cuda: %s: len(%s) = %d, need %d", op, name, got, want))
	}
}

func f32p(s []float32) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(s)) }

func grid1(n, block int) [3]int { return [3]int{(n + block - 1) / block, 1, 1} }

// MatMul: see kernels.Ops; act_quant.cu, then matmul.cu.
func (o *Ops) MatMul(y, x []float32, T int, w *kernels.Weight) {
	if err := w.Check(); err != nil {
		panic("cuda: MatMul: " + err.Error())
	}
	need("MatMul", "x", len(x), T*w.In)
	need("MatMul", "y", len(y), T*w.Out)
	if T == 0 {
		return
	}
	fmtID := map[kernels.WeightFormat]int{kernels.WeightBF16: 1, kernels.WeightFP8Channel: 2,
		kernels.WeightFP8Tensor: 3, kernels.WeightFP8Block: 4, kernels.WeightNVFP4: 5}[w.Format]
	act := map[kernels.ActQuant]int{kernels.ActNone: 0, kernels.ActFP8Token: 1, kernels.ActFP8Tensor: 2,
		kernels.ActFP8Group128: 3, kernels.ActNVFP4: 4}[w.Act]
	o.run("MatMul", func(d *Device) error {
		dx, err := d.upload(f32p(x), 4*T*w.In)
		if err != nil {
			return err
		}
		dw, err := d.upload(unsafe.Pointer(unsafe.SliceData(w.Data)), len(w.Data))
		if err != nil {
			return err
		}
		dws, err := d.upload(f32p(w.Scales), 4*len(w.Scales))
		if err != nil {
			return err
		}
		xe, xs := dx, C.lb_devptr(0)
		if act != 0 {
			group := map[int]int{1: w.In, 2: w.In, 3: 128, 4: 16}[act]
			ng := w.In / group
			if xe, err = d.scratch(4 * T * w.In); err != nil {
				return err
			}
			if xs, err = d.scratch(4 * T * ng); err != nil {
				return err
			}
			if err := d.launch("lb_act_quant", [3]int{T * ng, 1, 1}, [3]int{min(256, max(32, (group+31)/32*32)), 1, 1}, 0,
				ptrArg(xe), ptrArg(xs), ptrArg(dx), intArg(w.In), intArg(act), f32Arg(w.InputScale)); err != nil {
				return err
			}
		}
		dy, err := d.scratch(4 * T * w.Out)
		if err != nil {
			return err
		}
		if err := d.poison(dy, 4*T*w.Out); err != nil {
			return err
		}
		const warps = 8
		if err := d.launch("lb_matmul", [3]int{(w.Out + warps - 1) / warps, T, 1}, [3]int{32 * warps, 1, 1}, 0,
			ptrArg(dy), ptrArg(xe), ptrArg(xs), ptrArg(dw), ptrArg(dws), f32Arg(w.GlobalScale),
			intArg(T), intArg(w.Out), intArg(w.In), intArg(fmtID), intArg(act)); err != nil {
			return err
		}
		return d.download(f32p(y), dy, 4*T*w.Out)
	})
}

// RMSNorm: see kernels.Ops; rmsnorm.cu.
func (o *Ops) RMSNorm(y, x, weight []float32, T, D int, eps float32, zeroCentered bool) {
	need("RMSNorm", "x", len(x), T*D)
	need("RMSNorm", "y", len(y), T*D)
	need("RMSNorm", "weight", len(weight), D)
	if T*D == 0 {
		return
	}
	zc := 0
	if zeroCentered {
		zc = 1
	}
	o.run("RMSNorm", func(d *Device) error {
		dx, err := d.upload(f32p(x), 4*T*D)
		if err != nil {
			return err
		}
		dw, err := d.upload(f32p(weight), 4*D)
		if err != nil {
			return err
		}
		dy, err := d.scratch(4 * T * D)
		if err != nil {
			return err
		}
		if err := d.launch("lb_rmsnorm", [3]int{T, 1, 1}, [3]int{256, 1, 1}, 0,
			ptrArg(dy), ptrArg(dx), ptrArg(dw), intArg(D), f32Arg(eps), intArg(zc)); err != nil {
			return err
		}
		return d.download(f32p(y), dy, 4*T*D)
	})
}

// RoPE: see kernels.Ops; rope.cu.
func (o *Ops) RoPE(x []float32, T, heads, headDim, rotaryDim int, pos []int32, theta float64) {
	need("RoPE", "x", len(x), T*heads*headDim)
	need("RoPE", "pos", len(pos), T)
	n := T * heads * (rotaryDim / 2)
	if n == 0 {
		return
	}
	o.run("RoPE", func(d *Device) error {
		dx, err := d.upload(f32p(x), 4*T*heads*headDim)
		if err != nil {
			return err
		}
		dp, err := d.upload(unsafe.Pointer(unsafe.SliceData(pos)), 4*T)
		if err != nil {
			return err
		}
		if err := d.launch("lb_rope", grid1(n, 256), [3]int{256, 1, 1}, 0, ptrArg(dx), ptrArg(dp), intArg(T),
			intArg(heads), intArg(headDim), intArg(rotaryDim), f64Arg(theta)); err != nil {
			return err
		}
		return d.download(f32p(x), dx, 4*T*heads*headDim)
	})
}

// Attention: see kernels.Ops; attention.cu with a contiguous float32 cache.
func (o *Ops) Attention(out, q, k, v []float32, T, start, H, KVH, Dh int, scale float32) {
	if KVH <= 0 || H%KVH != 0 {
		panic(fmt.Sprintf("cuda: Attention: H = %d query heads is not a multiple of KVH = %d", H, KVH))
	}
	need("Attention", "q", len(q), T*H*Dh)
	need("Attention", "out", len(out), T*H*Dh)
	need("Attention", "k", len(k), (start+T)*KVH*Dh)
	need("Attention", "v", len(v), (start+T)*KVH*Dh)
	if T*H*Dh == 0 {
		return
	}
	n := (start + T) * KVH * Dh
	o.attention("Attention", out, q, f32p(k), f32p(v), 4*n, 0, 1, 1, nil, 1, T, start, H, KVH, Dh, scale)
}

// PagedAttention: see kernels.Ops; attention.cu.
func (o *Ops) PagedAttention(out, q []float32, kv *kernels.KVCache, T, start, H int, scale float32) {
	if err := kv.Check(start + T); err != nil {
		panic("cuda: PagedAttention: " + err.Error())
	}
	if H%kv.KVHeads != 0 {
		panic(fmt.Sprintf("cuda: PagedAttention: H = %d query heads is not a multiple of KVH = %d", H, kv.KVHeads))
	}
	need("PagedAttention", "q", len(q), T*H*kv.HeadDim)
	need("PagedAttention", "out", len(out), T*H*kv.HeadDim)
	if T*H == 0 {
		return
	}
	o.attention("PagedAttention", out, q, unsafe.Pointer(unsafe.SliceData(kv.K)), unsafe.Pointer(unsafe.SliceData(kv.V)),
		len(kv.K), int(kv.DType), kv.KScale, kv.VScale, kv.Blocks, kv.BlockSize, T, start, H, kv.KVHeads, kv.HeadDim, scale)
}

func (o *Ops) attention(op string, out, q []float32, k, v unsafe.Pointer, poolBytes, dtype int, kscale, vscale float32,
	blocks []int32, bs, T, start, H, KVH, Dh int, scale float32) {
	ctx := start + T
	o.run(op, func(d *Device) error {
		dq, err := d.upload(f32p(q), 4*T*H*Dh)
		if err != nil {
			return err
		}
		dk, err := d.upload(k, poolBytes)
		if err != nil {
			return err
		}
		dv, err := d.upload(v, poolBytes)
		if err != nil {
			return err
		}
		var db C.lb_devptr
		if blocks != nil {
			if db, err = d.upload(unsafe.Pointer(unsafe.SliceData(blocks)), 4*len(blocks)); err != nil {
				return err
			}
		}
		scores, err := d.scratch(4 * T * H * ctx)
		if err != nil {
			return err
		}
		dout, err := d.scratch(4 * T * H * Dh)
		if err != nil {
			return err
		}
		if err := d.poison(dout, 4*T*H*Dh); err != nil {
			return err
		}
		if err := d.launch("lb_attention", [3]int{T, H, 1}, [3]int{128, 1, 1}, 4*Dh,
			ptrArg(dout), ptrArg(dq), ptrArg(dk), ptrArg(dv), intArg(dtype), f32Arg(kscale), f32Arg(vscale),
			ptrArg(db), intArg(bs), intArg(start), intArg(H), intArg(KVH), intArg(Dh), f32Arg(scale),
			ptrArg(scores), intArg(ctx)); err != nil {
			return err
		}
		return d.download(f32p(out), dout, 4*T*H*Dh)
	})
}

// WriteKV: see kernels.Ops; kv_write.cu. The pools travel to the device
// and back whole.
func (o *Ops) WriteKV(kv *kernels.KVCache, k, v []float32, T, start int) {
	if err := kv.Check(start + T); err != nil {
		panic("cuda: WriteKV: " + err.Error())
	}
	row := kv.KVHeads * kv.HeadDim
	need("WriteKV", "k", len(k), T*row)
	need("WriteKV", "v", len(v), T*row)
	if T == 0 {
		return
	}
	o.run("WriteKV", func(d *Device) error {
		dkp, err := d.upload(unsafe.Pointer(unsafe.SliceData(kv.K)), len(kv.K))
		if err != nil {
			return err
		}
		dvp, err := d.upload(unsafe.Pointer(unsafe.SliceData(kv.V)), len(kv.V))
		if err != nil {
			return err
		}
		dk, err := d.upload(f32p(k), 4*T*row)
		if err != nil {
			return err
		}
		dv, err := d.upload(f32p(v), 4*T*row)
		if err != nil {
			return err
		}
		db, err := d.upload(unsafe.Pointer(unsafe.SliceData(kv.Blocks)), 4*len(kv.Blocks))
		if err != nil {
			return err
		}
		if err := d.launch("lb_kv_write", grid1(T*row, 256), [3]int{256, 1, 1}, 0, ptrArg(dkp), ptrArg(dvp),
			ptrArg(dk), ptrArg(dv), intArg(int(kv.DType)), f32Arg(kv.KScale), f32Arg(kv.VScale), ptrArg(db),
			intArg(kv.BlockSize), intArg(T), intArg(start), intArg(row)); err != nil {
			return err
		}
		if err := d.download(unsafe.Pointer(unsafe.SliceData(kv.K)), dkp, len(kv.K)); err != nil {
			return err
		}
		return d.download(unsafe.Pointer(unsafe.SliceData(kv.V)), dvp, len(kv.V))
	})
}

// SiLUMul: see kernels.Ops; silu_mul.cu.
func (o *Ops) SiLUMul(out, gate, up []float32, n int) {
	o.binary("SiLUMul", "lb_silu_mul", out, gate, up, n)
}

// Add: see kernels.Ops; silu_mul.cu.
func (o *Ops) Add(out, a, b []float32, n int) { o.binary("Add", "lb_add", out, a, b, n) }

func (o *Ops) binary(op, kernel string, out, a, b []float32, n int) {
	need(op, "out", len(out), n)
	need(op, "a", len(a), n)
	need(op, "b", len(b), n)
	if n == 0 {
		return
	}
	o.run(op, func(d *Device) error {
		da, err := d.upload(f32p(a), 4*n)
		if err != nil {
			return err
		}
		db, err := d.upload(f32p(b), 4*n)
		if err != nil {
			return err
		}
		dout, err := d.scratch(4 * n)
		if err != nil {
			return err
		}
		if err := d.launch(kernel, grid1(n, 256), [3]int{256, 1, 1}, 0, ptrArg(dout), ptrArg(da), ptrArg(db), i64Arg(int64(n))); err != nil {
			return err
		}
		return d.download(f32p(out), dout, 4*n)
	})
}

// LogSoftmax: see kernels.Ops; log_softmax.cu.
func (o *Ops) LogSoftmax(out, logits []float32, T, V int) {
	need("LogSoftmax", "out", len(out), T*V)
	need("LogSoftmax", "logits", len(logits), T*V)
	if T*V == 0 {
		return
	}
	o.run("LogSoftmax", func(d *Device) error {
		dl, err := d.upload(f32p(logits), 4*T*V)
		if err != nil {
			return err
		}
		dout, err := d.scratch(4 * T * V)
		if err != nil {
			return err
		}
		if err := d.launch("lb_log_softmax", [3]int{T, 1, 1}, [3]int{512, 1, 1}, 0, ptrArg(dout), ptrArg(dl), intArg(V)); err != nil {
			return err
		}
		return d.download(f32p(out), dout, 4*T*V)
	})
}
