//go:build cgo

package cuda

// #include "driver.h"
import "C"

import (
	"fmt"
	"slices"
	"unsafe"

	"github.com/lowbit-ai/lowbit/kernels"
)

// Buf is a span of device memory. The zero Buf is a null pointer.
type Buf struct {
	ptr   C.lb_devptr
	bytes int
}

// Bytes returns the span's size.
func (b Buf) Bytes() int { return b.bytes }

// Slice returns the span [from, to) in bytes.
func (b Buf) Slice(from, to int) Buf {
	if from < 0 || to > b.bytes || from > to {
		panic(fmt.Sprintf("cuda: Buf.Slice(%d, %d) of %d bytes", from, to, b.bytes))
	}
	return Buf{b.ptr + C.lb_devptr(from), to - from}
}

// F32 returns the span of float32 elements [from, to).
func (b Buf) F32(from, to int) Buf { return b.Slice(4*from, 4*to) }

// K launches kernels on one Device inside Device.Run: the context is
// current and the device locked for the callback's duration. Launches are
// asynchronous; Run waits for them.
type K struct{ d *Device }

// Run runs f with a K, then waits for the device and reports an
// asynchronous kernel error. Scratch buffers taken inside f are reused by
// the next Run.
func (d *Device) Run(f func(k *K) error) error {
	return d.do(func() error {
		d.pool.next = 0
		if err := f(&K{d}); err != nil {
			return err
		}
		return d.sync("Run")
	})
}

// Alloc returns a device allocation of n bytes (plain cuMemAlloc), to be
// freed with Free.
func (d *Device) Alloc(n int) (Buf, error) {
	var b Buf
	err := d.do(func() error {
		var p C.lb_devptr
		if err := check(fmt.Sprintf("cuMemAlloc(%d)", n), C.lb_cuMemAlloc(&p, C.size_t(max(n, 1)))); err != nil {
			return err
		}
		b = Buf{p, n}
		return nil
	})
	return b, err
}

// Free releases an allocation of Alloc.
func (d *Device) Free(b Buf) {
	if b.ptr != 0 {
		d.do(func() error { return check("cuMemFree", C.lb_cuMemFree(b.ptr)) })
	}
}

// MemInfo returns the device's free and total memory.
func (d *Device) MemInfo() (free, total int64, err error) {
	err = d.do(func() error {
		var f, t C.size_t
		err := check("cuMemGetInfo", C.lb_cuMemGetInfo(&f, &t))
		free, total = int64(f), int64(t)
		return err
	})
	return
}

// Upload copies host bytes into dst (at most dst.Bytes()).
func (d *Device) Upload(dst Buf, src []byte) error {
	if len(src) > dst.bytes {
		return fmt.Errorf("cuda: Upload of %d bytes into %d", len(src), dst.bytes)
	}
	if len(src) == 0 {
		return nil
	}
	return d.do(func() error {
		if err := check("cuMemcpyHtoDAsync", C.lb_cuMemcpyHtoDAsync(dst.ptr, unsafe.Pointer(unsafe.SliceData(src)), C.size_t(len(src)), d.stream)); err != nil {
			return err
		}
		return d.sync("Upload")
	})
}

// Download copies src to host memory.
func (d *Device) Download(dst []byte, src Buf) error {
	if len(dst) > src.bytes {
		return fmt.Errorf("cuda: Download of %d bytes from %d", len(dst), src.bytes)
	}
	if len(dst) == 0 {
		return nil
	}
	return d.do(func() error {
		if err := check("cuMemcpyDtoHAsync", C.lb_cuMemcpyDtoHAsync(unsafe.Pointer(unsafe.SliceData(dst)), src.ptr, C.size_t(len(dst)), d.stream)); err != nil {
			return err
		}
		return d.sync("Download")
	})
}

// UploadWeight allocates and copies w's data and scales.
func (d *Device) UploadWeight(w *kernels.Weight) (*Weight, error) {
	return d.uploadWeight(w, nil)
}

// uploadWeight uploads w into spans from take (nil: a device allocation
// each, which the caller frees).
func (d *Device) uploadWeight(w *kernels.Weight, take func(n int) (Buf, error)) (*Weight, error) {
	owned := take == nil
	if owned {
		take = d.Alloc
	}
	if err := w.Check(); err != nil {
		return nil, err
	}
	dw := &Weight{Format: w.Format, Out: w.Out, In: w.In, GlobalScale: w.GlobalScale, Act: w.Act, InputScale: w.InputScale}
	var err error
	if usesMMA(w.Format, w.Act) {
		raw, err := d.Alloc(len(w.Data))
		if err != nil {
			return nil, err
		}
		defer d.Free(raw)
		if err = d.Upload(raw, w.Data); err != nil {
			return nil, err
		}
		if dw.Data, err = take(TiledBytes(w.Out, w.In)); err != nil {
			return nil, err
		}
		dw.Tiled = true
		if err = d.Run(func(k *K) error { return k.TileWeight(dw.Data, raw, w.Out, w.In) }); err != nil {
			if owned {
				d.Free(dw.Data)
			}
			return nil, err
		}
		return dw, nil
	}
	if dw.Data, err = take(len(w.Data)); err != nil {
		return nil, err
	}
	if err = d.Upload(dw.Data, w.Data); err != nil {
		return nil, err
	}
	if len(w.Scales) > 0 {
		if dw.Scales, err = take(4 * len(w.Scales)); err != nil {
			return nil, err
		}
		if err = d.Upload(dw.Scales, unsafe.Slice((*byte)(unsafe.Pointer(&w.Scales[0])), 4*len(w.Scales))); err != nil {
			return nil, err
		}
	}
	return dw, nil
}

// Scratch returns a scratch span of n bytes valid until the Run returns.
func (k *K) Scratch(n int) (Buf, error) {
	p, err := k.d.scratch(n)
	return Buf{p, n}, err
}

// rmsMaxWidth is the widest row the norm kernels take (RMS_TILES_MAX tiles
// of 16 in common.cuh).
const rmsMaxWidth = 1024 * 16

// rmsWidth checks a norm's row width.
func rmsWidth(op string, D int) error {
	if D < 1 || D > rmsMaxWidth {
		return fmt.Errorf("cuda: %s of width %d: the norm kernels take 1 to %d columns", op, D, rmsMaxWidth)
	}
	return nil
}

// RMSNorm: y [T, D] = x / rms(x) · (w or 1 + w) (rmsnorm.cu), the squares
// summed in the RMS order (common.cuh) as every norm kernel sums them.
func (k *K) RMSNorm(y, x, w Buf, T, D int, eps float32, zeroCentered bool) error {
	if err := rmsWidth("RMSNorm", D); err != nil {
		return err
	}
	return k.d.launch("lb_rmsnorm", [3]int{T, 1, 1}, [3]int{256, 1, 1}, 0,
		ptrArg(y.ptr), ptrArg(x.ptr), ptrArg(w.ptr), intArg(D), f32Arg(eps), flagArg(zeroCentered))
}

// AddRMSNorm: x += h, then y = RMSNorm(x) (add_rmsnorm.cu): the bits of
// Add followed by RMSNorm, one launch. y must not alias x or h.
func (k *K) AddRMSNorm(x, h, y, w Buf, T, D int, eps float32, zeroCentered bool) error {
	if err := rmsWidth("AddRMSNorm", D); err != nil {
		return err
	}
	return k.d.launch("lb_add_rmsnorm", [3]int{T, 1, 1}, [3]int{256, 1, 1}, 0,
		ptrArg(x.ptr), ptrArg(h.ptr), ptrArg(y.ptr), ptrArg(w.ptr), intArg(D), f32Arg(eps), flagArg(zeroCentered))
}

// qkNormRoPEWarps and qkNormRoPEWarpsW are qk_norm_rope.cu's QKR_WARPS and
// QKRW_WARPS.
const qkNormRoPEWarps, qkNormRoPEWarpsW = 32, 8

// qkNormRoPEByWarp runs lb_qk_norm_rope_w (a warp a head) where the shape
// allows (qkNormRoPEWarpFits); a test hook turns it off to compare it with
// lb_qk_norm_rope.
var qkNormRoPEByWarp = true

// qkNormRoPEWarpFits says whether lb_qk_norm_rope_w takes a head of Dh
// elements with rot rotated: the (Dh, rot) pairs of its switch.
func qkNormRoPEWarpFits(Dh, rot int) bool {
	switch [2]int{Dh, rot} {
	case [2]int{64, 64}, [2]int{128, 64}, [2]int{128, 128}, [2]int{256, 64}, [2]int{256, 128}, [2]int{256, 256}:
		return true
	}
	return false
}

// QKNormRoPE takes a batch's q [T, H, Dh], k and v [T, KVH, Dh] to the
// attention's inputs in one launch (qk_norm_rope.cu): q and k heads
// RMS-normalized with qw and kw when qkNorm, rotated (NeoX RoPE, rotaryDim
// of each head, base theta) at the batch's positions, q in place, k and v
// stored into p's cache.
func (k *K) QKNormRoPE(q, kk, v, qw, kw Buf, qkNorm bool, eps float32, p *KVPool, b *Batch, T, H, rotaryDim int, theta float64) error {
	if p.HeadDim > 256 || rotaryDim > p.HeadDim || rotaryDim%2 != 0 {
		return fmt.Errorf("cuda: QKNormRoPE: head_dim %d, rotary %d (the kernel takes head_dim ≤ 256)", p.HeadDim, rotaryDim)
	}
	qn := 0
	if qkNorm {
		qn = 1
	}
	// The first layer of a step writes the batch's table; the others read
	// it.
	if b.Rope.bytes < 4*T*rotaryDim {
		table, err := k.d.persistent("rope_table", 4*T*rotaryDim)
		if err != nil {
			return err
		}
		if err := k.RoPETable(table, b.Pos, T, rotaryDim, theta); err != nil {
			return err
		}
		b.Rope = table
	}
	args := []arg{ptrArg(q.ptr), ptrArg(kk.ptr), ptrArg(v.ptr), ptrArg(qw.ptr), ptrArg(kw.ptr), intArg(qn), f32Arg(eps),
		ptrArg(b.Pos.ptr), intArg(H), intArg(p.KVHeads), intArg(p.HeadDim), intArg(rotaryDim), ptrArg(b.Rope.ptr),
		ptrArg(p.K.ptr), ptrArg(p.V.ptr), intArg(int(p.DType)), f32Arg(p.KScale), f32Arg(p.VScale),
		ptrArg(b.Tables.ptr), intArg(b.Stride), ptrArg(b.Seq.ptr), intArg(p.BlockSize)}
	if qkNormRoPEByWarp && qkNormRoPEWarpFits(p.HeadDim, rotaryDim) {
		units := T * (H + 2*p.KVHeads)
		return k.d.launch("lb_qk_norm_rope_w", grid1(units, qkNormRoPEWarpsW), [3]int{32 * qkNormRoPEWarpsW, 1, 1}, 0,
			append(args, intArg(T))...)
	}
	return k.d.launch("lb_qk_norm_rope", [3]int{T, 1, 1}, [3]int{32 * qkNormRoPEWarps, 1, 1}, 0, args...)
}

// RoPETable writes into table (T·rotaryDim float32s: a (cos, sin) pair a
// token and rotary frequency) the RoPE angles of the T positions pos
// (lb_rope_table): a step's layers share them (Batch.Rope).
func (k *K) RoPETable(table, pos Buf, T, rotaryDim int, theta float64) error {
	if table.bytes < 4*T*rotaryDim {
		return fmt.Errorf("cuda: RoPETable of %d tokens and %d rotary dims into %d bytes", T, rotaryDim, table.bytes)
	}
	n := T * (rotaryDim / 2)
	return k.d.launch("lb_rope_table", grid1(n, 256), [3]int{256, 1, 1}, 0, ptrArg(table.ptr), ptrArg(pos.ptr), intArg(T),
		intArg(rotaryDim), f64Arg(theta))
}

// RoPE rotates x [T, heads, headDim] in place at positions pos [T] int32
// (rope.cu).
func (k *K) RoPE(x, pos Buf, T, heads, headDim, rotaryDim int, theta float64) error {
	n := T * heads * (rotaryDim / 2)
	return k.d.launch("lb_rope", grid1(n, 256), [3]int{256, 1, 1}, 0, ptrArg(x.ptr), ptrArg(pos.ptr), intArg(T),
		intArg(heads), intArg(headDim), intArg(rotaryDim), f64Arg(theta))
}

// KVPool is one layer's paged cache on the device (kernels.KVCache's
// layout).
type KVPool struct {
	DType            kernels.KVDType
	KVHeads, HeadDim int
	BlockSize        int
	K, V             Buf
	KScale, VScale   float32
}

// WriteKV stores k, v [T, KVHeads·HeadDim] at positions start.. of the
// sequence with block table blocks [int32] (kv_write.cu).
func (k *K) WriteKV(p *KVPool, kv, vv, blocks Buf, T, start int) error {
	row := p.KVHeads * p.HeadDim
	return k.d.launch("lb_kv_write", grid1(T*row, 256), [3]int{256, 1, 1}, 0, ptrArg(p.K.ptr), ptrArg(p.V.ptr),
		ptrArg(kv.ptr), ptrArg(vv.ptr), intArg(int(p.DType)), f32Arg(p.KScale), f32Arg(p.VScale), ptrArg(blocks.ptr),
		intArg(p.BlockSize), intArg(T), intArg(start), intArg(row))
}

// SiLUMul: out[i] = silu(gate[i])·up[i] for n elements (silu_mul.cu).
func (k *K) SiLUMul(out, gate, up Buf, n int) error {
	return k.d.launch("lb_silu_mul", grid1(n, 256), [3]int{256, 1, 1}, 0, ptrArg(out.ptr), ptrArg(gate.ptr), ptrArg(up.ptr), i64Arg(int64(n)))
}

// Add: out[i] = a[i] + b[i] for n elements (silu_mul.cu).
func (k *K) Add(out, a, b Buf, n int) error {
	return k.d.launch("lb_add", grid1(n, 256), [3]int{256, 1, 1}, 0, ptrArg(out.ptr), ptrArg(a.ptr), ptrArg(b.ptr), i64Arg(int64(n)))
}

// LogSoftmax of T rows of V (log_softmax.cu).
func (k *K) LogSoftmax(out, logits Buf, T, V int) error {
	return k.d.launch("lb_log_softmax", [3]int{T, 1, 1}, [3]int{512, 1, 1}, 0, ptrArg(out.ptr), ptrArg(logits.ptr), intArg(V))
}

// Embed gathers x [T, hidden] float32 from a BF16 table for ids [T] int32
// (embed.cu).
func (k *K) Embed(x, table, ids Buf, T, hidden int) error {
	return k.d.launch("lb_embed", grid1(T*hidden, 256), [3]int{256, 1, 1}, 0, ptrArg(x.ptr), ptrArg(table.ptr), ptrArg(ids.ptr), intArg(T), intArg(hidden))
}

// Poison fills b with 0xFF bytes (float32 NaNs), so that unwritten output
// shows.
func (k *K) Poison(b Buf) error { return k.d.poison(b.ptr, b.bytes) }

// Upload copies host bytes into a scratch span and returns it.
func (k *K) Upload(src []byte) (Buf, error) {
	p, err := k.d.upload(unsafe.Pointer(unsafe.SliceData(src)), len(src))
	return Buf{p, len(src)}, err
}

// Download copies b to host memory.
func (k *K) Download(dst []byte, b Buf) error {
	return k.d.download(unsafe.Pointer(unsafe.SliceData(dst)), b.ptr, len(dst))
}

// Copy copies src into dst on the device (min of the two sizes).
func (k *K) Copy(dst, src Buf) error {
	n := min(dst.bytes, src.bytes)
	if n == 0 {
		return nil
	}
	return check("cuMemcpyDtoDAsync", C.lb_cuMemcpyDtoDAsync(dst.ptr, src.ptr, C.size_t(n), k.d.stream))
}

// CopyBandwidth measures the device-to-device copy rate in bytes per
// second, counting bytes read plus bytes written (the device machine's
// method): the median of reps copies of n bytes, each timed by a pair of
// device events, after copyWarmup untimed ones that let the clocks rise
// (a host clock around each copy read a few percent low, and an idle
// GPU's first copies lower still).
func (d *Device) CopyBandwidth(n, reps int) (float64, error) {
	a, err := d.Alloc(n)
	if err != nil {
		return 0, err
	}
	defer d.Free(a)
	b, err := d.Alloc(n)
	if err != nil {
		return 0, err
	}
	defer d.Free(b)
	if err := d.Run(func(k *K) error { return k.Poison(a) }); err != nil {
		return 0, err
	}
	times := make([]float64, 0, reps)
	err = d.do(func() error {
		var start, end C.lb_handle
		if err := check("cuEventCreate", C.lb_cuEventCreate(&start, 0)); err != nil {
			return err
		}
		defer C.lb_cuEventDestroy(start)
		if err := check("cuEventCreate", C.lb_cuEventCreate(&end, 0)); err != nil {
			return err
		}
		defer C.lb_cuEventDestroy(end)
		for i := range copyWarmup + reps {
			if err := check("cuEventRecord", C.lb_cuEventRecord(start, d.stream)); err != nil {
				return err
			}
			if err := check("cuMemcpyDtoDAsync", C.lb_cuMemcpyDtoDAsync(b.ptr, a.ptr, C.size_t(n), d.stream)); err != nil {
				return err
			}
			if err := check("cuEventRecord", C.lb_cuEventRecord(end, d.stream)); err != nil {
				return err
			}
			if err := check("cuEventSynchronize", C.lb_cuEventSynchronize(end)); err != nil {
				return err
			}
			var ms C.float
			if err := check("cuEventElapsedTime", C.lb_cuEventElapsedTime(&ms, start, end)); err != nil {
				return err
			}
			if i >= copyWarmup {
				times = append(times, float64(ms)/1e3)
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	slices.Sort(times)
	return 2 * float64(n) / times[len(times)/2], nil
}

// copyWarmup is CopyBandwidth's untimed copies: about 40 ms of copying at
// 2 GiB.
const copyWarmup = 20

// GatherRows: dst [n, width] = src rows rows[0..n) (int32 indices)
// (gather.cu).
func (k *K) GatherRows(dst, src, rows Buf, n, width int) error {
	return k.d.launch("lb_gather_rows", grid1(n*width, 256), [3]int{256, 1, 1}, 0, ptrArg(dst.ptr), ptrArg(src.ptr), ptrArg(rows.ptr), intArg(n), intArg(width))
}

// UploadTo copies host bytes into dst, in stream order (the host memory
// may be reused once the call returns: the driver stages pageable memory).
func (k *K) UploadTo(dst Buf, src []byte) error {
	if len(src) > dst.bytes {
		return fmt.Errorf("cuda: UploadTo of %d bytes into %d", len(src), dst.bytes)
	}
	if len(src) == 0 {
		return nil
	}
	return check("cuMemcpyHtoDAsync", C.lb_cuMemcpyHtoDAsync(dst.ptr, unsafe.Pointer(unsafe.SliceData(src)), C.size_t(len(src)), k.d.stream))
}

// Graph is a captured sequence of launches, replayed with one call.
type Graph struct {
	exec    C.lb_handle
	Gen     int      // the device's persistent-buffer generation at capture
	kernels []string // its launches in order, with a timeline (trace.go)
}

// Generation returns the persistent-buffer generation: a Graph captured at
// an older one refers to freed memory and must be captured again.
func (d *Device) Generation() int { return d.gen }

// Capture records f's launches into a Graph instead of running them. f
// must only launch kernels and copy device to device: host copies and
// allocations belong before the capture (run f once eagerly first, so that
// the buffers it needs exist at their final size).
func (d *Device) Capture(f func(k *K) error) (*Graph, error) {
	var g *Graph
	err := d.do(func() error {
		d.pool.next = 0
		// CU_STREAM_CAPTURE_MODE_RELAXED: other threads' unrelated calls are
		// not this capture's business.
		if err := check("cuStreamBeginCapture", C.lb_cuStreamBeginCapture(d.stream, 2)); err != nil {
			return err
		}
		d.capturing = true
		if d.trace != nil {
			d.trace.captured = nil
		}
		ferr := f(&K{d})
		d.capturing = false
		var graph C.lb_handle
		if err := check("cuStreamEndCapture", C.lb_cuStreamEndCapture(d.stream, &graph)); err != nil {
			return err
		}
		defer C.lb_cuGraphDestroy(graph)
		if ferr != nil {
			return ferr
		}
		g = &Graph{Gen: d.gen}
		if d.trace != nil {
			g.kernels = d.trace.captured
		}
		return check("cuGraphInstantiate", C.lb_cuGraphInstantiate(&g.exec, graph))
	})
	return g, err
}

// Launch replays g in stream order (under a profile: timed as a whole, as
// "graph replay").
func (k *K) Launch(g *Graph) error {
	if g.Gen != k.d.gen {
		return fmt.Errorf("cuda: a graph of buffer generation %d replayed at %d", g.Gen, k.d.gen)
	}
	k.d.traceReplay(g)
	return k.d.timed(GraphReplay, func() error { return check("cuGraphLaunch", C.lb_cuGraphLaunch(g.exec, k.d.stream)) })
}

// GraphReplay names graph replays among a profile's KernelTimes.
const GraphReplay = "graph replay"

// Destroy frees g.
func (d *Device) Destroy(g *Graph) {
	if g != nil && g.exec != nil {
		d.do(func() error { return check("cuGraphExecDestroy", C.lb_cuGraphExecDestroy(g.exec)) })
		g.exec = nil
	}
}

// WriteKVBatch stores a batch's keys and values, T tokens, in one launch
// (kv_write.cu).
func (k *K) WriteKVBatch(p *KVPool, kv, vv Buf, b *Batch, T int) error {
	row := p.KVHeads * p.HeadDim
	return k.d.launch("lb_kv_write_varlen", grid1(T*row, 256), [3]int{256, 1, 1}, 0, ptrArg(p.K.ptr), ptrArg(p.V.ptr),
		ptrArg(kv.ptr), ptrArg(vv.ptr), intArg(int(p.DType)), f32Arg(p.KScale), f32Arg(p.VScale), ptrArg(b.Tables.ptr),
		intArg(b.Stride), ptrArg(b.Seq.ptr), ptrArg(b.Pos.ptr), intArg(p.BlockSize), intArg(T), intArg(row))
}

// TopKMax is TOPK_MAX of topk.cu: the most entries TopK returns a row.
const TopKMax = 64

// topKChunk is TOPK_CHUNK of topk.cu: the entries of a row one block of
// lb_topk_chunks and lb_topk_ties takes.
const topKChunk = 2048

// TopK reduces each of rows rows of logits [rows, V] to its k best
// entries (largest first, ties by ascending id), their log-probabilities
// and the count of entries at least as probable as the k-th (topk.cu:
// three launches, the row spread over ⌈V / 2048⌉ blocks), and copies them
// back: TopKInto on scratch buffers, then TopKRead.
func (k *K) TopK(logits Buf, rows, V, n int) (ids []int32, vals, lps []float32, ties []int32, err error) {
	outBytes, workBytes := TopKBytes(rows, V)
	out, err := k.Scratch(outBytes)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	work, err := k.Scratch(workBytes)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	if err := k.TopKInto(logits, rows, V, n, out, work); err != nil {
		return nil, nil, nil, nil, err
	}
	return k.TopKRead(out, rows, n)
}

// TopKBytes is the size of TopKInto's out and work buffers for rows rows
// of V entries and any n up to TopKMax.
func TopKBytes(rows, V int) (out, work int) {
	C := (V + topKChunk - 1) / topKChunk
	return 4 * rows * (3*TopKMax + 1), 4 * rows * (2*C + 2*C*TopKMax + 2)
}

// TopKInto launches TopK's three kernels, leaving the result in out for
// TopKRead; work is their work space (sizes: TopKBytes). It only
// launches, so a decode step's graph captures it with the step (the
// runtime's ForwardTop) and one copy brings back the rows' best entries.
func (k *K) TopKInto(logits Buf, rows, V, n int, out, work Buf) error {
	outBytes, workBytes := TopKBytes(rows, V)
	if n < 1 || n > TopKMax || n > V || logits.bytes < 4*rows*V || out.bytes < outBytes || work.bytes < workBytes {
		return fmt.Errorf("cuda: TopK of %d from %d rows of %d in %d bytes (out %d, work %d)", n, rows, V, logits.bytes,
			out.bytes, work.bytes)
	}
	C := (V + topKChunk - 1) / topKChunk
	// The work space: each chunk's max and sum, its candidates' keys and
	// ids, each row's lse and k-th log-probability.
	at := func(b Buf, from, to int) Buf { return b.Slice(4*rows*from, 4*rows*to) } // in float32s a row
	stats, keys, cands, lseLast := at(work, 0, 2*C), at(work, 2*C, 2*C+C*n), at(work, 2*C+C*n, 2*C+2*C*n), at(work, 2*C+2*C*n, 2*C+2*C*n+2)
	part := func(i int) Buf { return at(out, n*i, n*(i+1)) }
	tiesBuf := at(out, 3*n, 3*n+1)
	if err := k.d.launch("lb_topk_chunks", [3]int{C, rows, 1}, [3]int{256, 1, 1}, 0, ptrArg(logits.ptr), intArg(V), intArg(n),
		ptrArg(stats.ptr), ptrArg(keys.ptr), ptrArg(cands.ptr)); err != nil {
		return err
	}
	if err := k.d.launch("lb_topk_merge", [3]int{rows, 1, 1}, [3]int{1024, 1, 1}, 0, intArg(V), intArg(n), intArg(C),
		ptrArg(stats.ptr), ptrArg(keys.ptr), ptrArg(cands.ptr), ptrArg(part(0).ptr), ptrArg(part(1).ptr),
		ptrArg(part(2).ptr), ptrArg(tiesBuf.ptr), ptrArg(lseLast.ptr)); err != nil {
		return err
	}
	return k.d.launch("lb_topk_ties", [3]int{C, rows, 1}, [3]int{256, 1, 1}, 0, ptrArg(logits.ptr), intArg(V),
		ptrArg(lseLast.ptr), ptrArg(tiesBuf.ptr))
}

// TopKRead copies back what TopKInto left in out for rows rows and n
// entries a row: each row's ids, logits and log-probabilities, one after
// the other, then each row's count of ties.
func (k *K) TopKRead(out Buf, rows, n int) (ids []int32, vals, lps []float32, ties []int32, err error) {
	host := make([]int32, rows*(3*n+1))
	if 4*len(host) > out.bytes {
		return nil, nil, nil, nil, fmt.Errorf("cuda: TopKRead of %d rows of %d from %d bytes", rows, n, out.bytes)
	}
	if err := k.Download(asBytes(host, len(host)), out); err != nil {
		return nil, nil, nil, nil, err
	}
	f := unsafe.Slice((*float32)(unsafe.Pointer(&host[0])), len(host))
	return host[:rows*n], f[rows*n : 2*rows*n], f[2*rows*n : 3*rows*n], host[3*rows*n:], nil
}
